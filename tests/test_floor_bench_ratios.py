"""floor_bench's per-round ratios: each link against the LLD cache link of its own round."""

import pytest

from benchmarks.floor_bench import CONFIGS, round_ratios
from benchmarks.timing import Measured


def test_a_drift_over_the_run_moves_the_ratio_of_medians_but_not_the_per_round_ratio() -> None:
    # The host slows down over the run: every link of round r takes (1 + r) times as long.
    drift = [1.0, 1.1, 1.5, 1.9, 2.0]
    base = {name: 0.2 for name in CONFIGS}
    base["C floor"] = 0.21  # 1.05x LLD's cache in every round
    base["warm server"] = 0.25  # 1.25x
    results = {f"p: {name}": Measured([t * d for d in drift]) for name, t in base.items()}
    # One round's C floor link ran while the host was slower still: one outlier of five.
    results["p: C floor"].times[1] = 0.21 * 1.9
    ratios = round_ratios(results, "p")
    assert set(ratios) == set(CONFIGS[1:])
    assert ratios["C floor"] == pytest.approx(1.05)
    assert ratios["warm server"] == pytest.approx(1.25)
    assert ratios["cached-dist"] == pytest.approx(1.0)
    # The ratio of medians is what a drift moves (here the C floor's outlier tips it).
    medians = results["p: C floor"].median / results["p: LLD cache"].median
    assert medians == pytest.approx(0.21 * 1.9 / 0.2 / 1.5)


def test_serve_compare_pairs_differences() -> None:
    """benchmarks/serve_compare.py reports paired differences: the mean, its standard error
    (stdev / sqrt(n)) and the median, of new - old pair by pair, not of the medians."""
    from benchmarks.serve_compare import paired

    got = paired([10.0, 12.0, 11.0, 15.0], [9.0, 9.0, 10.0, 10.0])  # differences 1, 3, 1, 5
    assert got["mean"] == 2.5 and got["median"] == 2.0 and got["pairs"] == 4
    assert abs(got["se"] - 1.9148542155126762 / 2) < 1e-12
    with pytest.raises(ValueError):
        paired([1.0], [2.0])
    with pytest.raises(ValueError):
        paired([1.0, 2.0], [1.0])
