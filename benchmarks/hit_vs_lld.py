"""Full-hit links of lua 5.4: cached-dist against LLD's own --thinlto-cache-dir.

    python -m benchmarks.hit_vs_lld [--rounds N]

For a regular liblua.a (whose shards differ every link, so each is canonicalized) and a thin
one (byte-identical shards: memoized), both caches are warmed once, then the same link is
timed with each, interleaved. LLD's cache does not even start the distributor on a full
hit; the budgets are cached-dist/LLD <= 3.0 (regular) and <= 2.0 (thin).
Results go to benchmarks/results/hit_vs_lld.json.
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from . import lua
from .sources import WORK, machine
from .timing import interleave, timed

RESULTS = Path(__file__).parent / "results"
BUDGET = {"regular": 3.0, "thin": 2.0}


def say(message: str) -> None:
    print(message, file=sys.stderr)


def cached_dist() -> str:
    return str(Path(sys.executable).parent / "cached-dist")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hit_vs_lld", description=__doc__)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args(argv)
    from .cache_link import byte_compile

    byte_compile()
    report: dict[str, object] = {
        "benchmark": "hit_vs_lld",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine(),
        "rounds": args.rounds,
    }
    configs = {}
    for variant in ("regular", "thin"):
        say(f"building lua 5.4 with a {variant} liblua.a")
        work = WORK / "hit_vs_lld" / variant
        src = lua.build(work / "lua", thin=variant == "thin")
        ours_cache, lld_cache = work / "cached-dist-cache", work / "lld-cache"
        for d in (ours_cache, lld_cache):
            shutil.rmtree(d, ignore_errors=True)
        dist = f"-fthinlto-distributor={cached_dist()}"
        ours = lua.link_command(
            "lua-ours", [dist, f"-Xthinlto-distributor=--quiet,--cache-dir={ours_cache}"]
        )
        lld = lua.link_command(
            "lua-lld",
            [
                dist,
                "-Xthinlto-distributor=--quiet,--disable",
                f"-Wl,--thinlto-cache-dir={lld_cache}",
            ],
        )
        timed(ours, src)
        timed(lld, src)  # both warm now
        configs[f"{variant}: cached-dist"] = lambda c=ours, s=src: timed(c, s)
        configs[f"{variant}: LLD cache"] = lambda c=lld, s=src: timed(c, s)
    results = interleave(configs, args.rounds, say)
    summary = {}
    for variant in ("regular", "thin"):
        ours_s = results[f"{variant}: cached-dist"].median
        lld_s = results[f"{variant}: LLD cache"].median
        summary[variant] = {"cached_dist_s": ours_s, "lld_cache_s": lld_s,
                            "ratio": ours_s / lld_s, "budget": BUDGET[variant]}  # fmt: skip
        print(
            f"{variant} liblua.a: cached-dist {1000 * ours_s:.0f} ms, LLD cache "
            f"{1000 * lld_s:.0f} ms, ratio {ours_s / lld_s:.2f} (budget {BUDGET[variant]})"
        )
    report["times_s"] = {n: m.times for n, m in results.items()}
    report["summary"] = summary
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hit_vs_lld.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
