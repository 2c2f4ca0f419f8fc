"""Full-hit time of two cached-dist installations side by side, on lua's real job file.

    python -m benchmarks.hit_compare OTHER_CACHED_DIST [--rounds N] [--regular]

For a change that must not slow the hit path down: OTHER_CACHED_DIST is the console script
of another checkout (e.g. a worktree of the previous commit with its own venv). Each
installation gets its own cache, warmed by the same job file; then both serve it, interleaved
round by round, and the medians and their ratio are printed (and saved to
benchmarks/results/hit_compare.json). With --instructions N, each also serves it N times under
valgrind's callgrind, whose instruction counts do not depend on what else the machine runs
(times on a loaded 2-core machine do).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import lua
from .cache_link import CAPTURE, byte_compile, cached_dist
from .sources import WORK, machine
from .timing import interleave, timed

RESULTS = Path(__file__).parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hit_compare", description=__doc__)
    parser.add_argument("other", help="the other installation's cached-dist console script")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--regular", action="store_true", help="a regular liblua.a (not thin)")
    parser.add_argument("--instructions", type=int, default=0, metavar="N",
                        help="also count instructions under callgrind, N runs each")  # fmt: skip
    args = parser.parse_args(argv)
    byte_compile()
    other = str(Path(args.other).resolve())
    other_root = Path(other).parent.parent.parent  # .venv/bin/cached-dist -> checkout
    byte_compile(tuple(other_root / p for p in ("cached_dist", "store", "procs")
                       if (other_root / p).is_dir()),
                 str(Path(other).parent / "python"))  # fmt: skip
    work = WORK / "hit_compare"
    src = lua.build(work / "lua", thin=not args.regular)
    saved = work / "saved"
    shutil.rmtree(saved, ignore_errors=True)
    programs = {"this": cached_dist(), "other": other}
    caches = {name: work / f"cache-{name}" for name in programs}
    for cache in caches.values():
        shutil.rmtree(cache, ignore_errors=True)
    capture = [f"-fthinlto-distributor={sys.executable}",
               f"-Xthinlto-distributor={CAPTURE},{saved},{cached_dist()},--quiet,"
               f"--cache-dir={caches['this']}"]  # fmt: skip
    timed(lua.link_command("lua-warm", capture), src)
    job_file = saved / "lua-warm.job.json"
    for shard in saved.glob("*.thinlto.bc"):
        shutil.copy(shard, src / shard.name)
    commands = {n: [p, f"--cache-dir={caches[n]}", "--quiet", str(job_file)]
                for n, p in programs.items()}  # fmt: skip
    timed(commands["other"], src)  # warms the other installation's cache
    for command in commands.values():
        timed(command, src)  # both now serve every job from their cache

    def runner(command: list[str]) -> Callable[[], float]:
        return lambda: timed(command, src)

    results = interleave({n: runner(c) for n, c in commands.items()}, args.rounds, print)
    jobs = len(json.loads(job_file.read_text())["jobs"])
    this, that = results["this"].median, results["other"].median
    report = {"benchmark": "hit_compare", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": machine(), "program": f"lua 5.4, {jobs} jobs, "
              f"{'regular' if args.regular else 'thin'} liblua.a", "other": other,
              "this_s": this, "other_s": that, "ratio": this / that,
              "times_s": {n: m.times for n, m in results.items()}}  # fmt: skip
    if args.instructions:
        counts = {n: sorted(instructions(c, src) for _ in range(args.instructions))
                  for n, c in commands.items()}  # fmt: skip
        mid = {n: c[len(c) // 2] for n, c in counts.items()}
        report["instructions"] = counts
        report["instructions_ratio"] = mid["this"] / mid["other"]
        print(f"instructions, {jobs} jobs: this {mid['this']:,}, other {mid['other']:,}, "
              f"ratio {mid['this'] / mid['other']:.3f} (medians of {args.instructions} "
              "callgrind runs)")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hit_compare.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"full hit, {jobs} jobs: this {1000 * this:.1f} ms, other {1000 * that:.1f} ms, "
          f"ratio {this / that:.3f} (medians of {args.rounds} interleaved rounds)")  # fmt: skip
    return 0


def instructions(command: list[str], cwd: Path) -> int:
    """Instructions the command executes (callgrind's total), with hashing made repeatable."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed: {done.stderr[-500:]}")
    return int(found.group(1))


if __name__ == "__main__":
    sys.exit(main())
