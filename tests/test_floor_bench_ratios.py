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


def test_the_distance_from_the_c_floor_leaves_out_the_floors_own_excess() -> None:
    """floor_distance: each of ours minus the C floor link of the same round, in seconds and
    over that round's LLD cache link, medians over the rounds; a drift over the run and the
    C floor's own excess over LLD's cache (1.05x, then 1.12x) do not move it."""
    from benchmarks.floor_bench import OURS, floor_distance

    drift = [1.0, 1.2, 1.6, 2.0, 2.4]
    floor_over = [1.05, 1.12, 1.05, 1.12, 1.08]
    lld = [0.2 * d for d in drift]
    results = {
        "p: LLD cache": Measured(lld),
        "p: C floor": Measured([t * f for t, f in zip(lld, floor_over, strict=True)]),
    }
    for k, name in enumerate(OURS):  # 0.01x, 0.02x, ... above the floor, every round
        results[f"p: {name}"] = Measured(
            [t * (f + 0.01 * (k + 1)) for t, f in zip(lld, floor_over, strict=True)]
        )
    over = floor_distance(results, "p")
    assert set(over) == set(OURS)
    for k, name in enumerate(OURS):
        assert over[name][1] == pytest.approx(0.01 * (k + 1))
        assert over[name][0] == pytest.approx(0.01 * (k + 1) * 0.2 * 1.6)  # the median round
    # One round where ours ran while the host was slower: one outlier of five moves no median.
    results[f"p: {OURS[0]}"].times[0] *= 3
    assert floor_distance(results, "p")[OURS[0]][1] == pytest.approx(0.01)


def test_the_coff_program_links_with_lld_link_spellings() -> None:
    """floor_bench's coff-300 links take the ELF links' driver flags in lld-link's words."""
    from benchmarks.floor_bench import LLVM_BIN, link_command

    command = link_command("coff-300", "app", ["-fthinlto-distributor=/d", "-Xthinlto-distributor=a,b",
                                               "-Wl,--thinlto-cache-dir=/c"])  # fmt: skip
    assert command[0] == str(LLVM_BIN / "lld-link") and "/out:app" in command
    assert command[command.index("/out:app") + 1 :] == [
        "/thinlto-distributor:/d", f"/thinlto-remote-compiler:{LLVM_BIN / 'clang'}",
        "/thinlto-distributor-arg:a", "/thinlto-distributor-arg:b", "/lldltocache:/c",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="no lld-link spelling"):
        link_command("coff-300", "app", ["-Wl,--gc-sections"])
