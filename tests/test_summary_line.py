"""The summary line's wording: a full hit's time in milliseconds, only what happened named."""

from cached_dist.link.summary import Summary, duration


def test_a_time_below_a_second_is_in_milliseconds() -> None:
    assert duration(0.0004) == "0 ms"
    assert duration(0.038) == "38 ms"
    assert duration(0.9994) == "999 ms"
    assert duration(1.0) == "1.00 s"
    assert duration(29.449) == "29.45 s"


def test_a_full_hit_reads_in_milliseconds() -> None:
    assert Summary(5, hits=5).line(0.004) == "5 jobs: 5 hits, 0 compiled, 4 ms"
    assert Summary(5, compiled=5).line(2.41) == "5 jobs: 0 hits, 5 compiled, 2.41 s"
    assert (
        Summary(5, compiled=5, fallback=5).line(2.77)
        == "5 jobs: 0 hits, 0 compiled, 5 fallback, 2.77 s"
    )
