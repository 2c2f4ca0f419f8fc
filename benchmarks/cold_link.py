"""Cold link of lua: cached-dist's local runner against in-process ThinLTO, same parallelism.

    python -m benchmarks.cold_link [--rounds N]

All link the same bitcode with N backend jobs at a time (N = usable CPUs): in-process with
``--thinlto-jobs=N``, DTLTO through ``cached-dist --disable --jobs=N``, and DTLTO through the
benchmarks' bare distributor (the least a DTLTO distributor can do: what DTLTO itself costs).
Rounds rotate the order so machine drift hits all alike. Results: results/cold_link.json.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import lua
from .sources import machine
from .timing import interleave, timed

RESULTS = Path(__file__).parent / "results"
BARE = Path(__file__).parent / "bare_distributor.py"


def cached_dist() -> str:
    return str(Path(sys.executable).parent / "cached-dist")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cold_link", description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    jobs = len(os.sched_getaffinity(0))
    print(f"building lua 5.4 ({jobs} CPUs)", file=sys.stderr)
    src = lua.build()
    dist = [f"-fthinlto-distributor={cached_dist()}",
            f"-Xthinlto-distributor=--disable,--quiet,--jobs={jobs}"]  # fmt: skip
    bare = [f"-fthinlto-distributor={sys.executable}",
             f"-Xthinlto-distributor={BARE},--jobs={jobs}"]  # fmt: skip
    configs = {
        "in-process ThinLTO": lambda: timed(
            lua.link_command("lua-inproc", [f"-Wl,--thinlto-jobs={jobs}"]), src
        ),
        "cached-dist local runner": lambda: timed(lua.link_command("lua-dtlto", dist), src),
        "bare Python distributor": lambda: timed(lua.link_command("lua-bare", bare), src),
    }
    results = interleave(configs, args.rounds, lambda m: print(m, file=sys.stderr))
    base = results["in-process ThinLTO"].median
    ours = results["cached-dist local runner"].median
    report = {
        "benchmark": "cold_link",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine(),
        "program": "lua 5.4 (lua.o + liblua.a, 33 backend jobs)",
        "parallelism": jobs,
        "rounds": args.rounds,
        "times": {name: m.times for name, m in results.items()},
        "medians": {name: m.median for name, m in results.items()},
        "ratio": ours / base,
        "bare_distributor_ratio": results["bare Python distributor"].median / base,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cold_link.json").write_text(json.dumps(report, indent=1) + "\n")
    bare_s = results["bare Python distributor"].median
    print(
        f"in-process {base:.3f} s, cached-dist {ours:.3f} s, ratio {ours / base:.3f}; "
        f"bare distributor {bare_s:.3f} s, ratio {bare_s / base:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
