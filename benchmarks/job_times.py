"""Backend compile times of the ~250-job python3.11 link, and the model of a Dask cluster's scale.

    python -m benchmarks.job_times [--program python3.11|leveldb|lua] [--overhead-ms O]

Builds the program with its own build system (as ``python -m benchmarks run`` does), then
links it twice through cached-dist with a fresh cache: a cold ``--verbose`` link, whose lines
give each backend job's compile time (``miss KEY MODULE: compiled here, T s``), and a full
hit of the same link, which is the serial part S (the thin link, keys, and the final link:
everything but the backend compiles). From C (the sum of the compile times), t_max (the
longest job), n jobs and a per-job runner overhead o (``--overhead-ms``; by default the one
``benchmarks.dask_link`` measured, from results/dask_link*.json), it prints the *model*
S + max(t_max, (C + n o) / W) for W = 2, 8, 32, 128 workers. A model, not a measurement:
it assumes jobs spread perfectly over the workers and that shipping scales with them.
Results: results/job_times-PROGRAM.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .harness.codebases import CODEBASES
from .harness.configs import cached_dist
from .sources import WORK, ensure_packages, machine
from .timing import timed

RESULTS = Path(__file__).parent / "results"
_COMPILED = re.compile(r"cached-dist: miss [0-9a-f]{32} (\S+): compiled here, ([0-9.]+) s$")
WORKERS = (2, 8, 32, 128)


def measured_overhead_ms() -> float | None:
    """The largest per-job overhead benchmarks.dask_link recorded (lua and leveldb)."""
    found = []
    for path in RESULTS.glob("dask_link*.json"):
        value = json.loads(path.read_text()).get("overhead_ms_per_job")
        if isinstance(value, int | float):
            found.append(float(value))
    return max(found) if found else None


def model(serial: float, compile_s: float, longest: float, jobs: int, o: float, w: int) -> float:
    return serial + max(longest, (compile_s + jobs * o) / w)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.job_times", description=__doc__)
    parser.add_argument("--program", choices=sorted(CODEBASES), default="python3.11")
    parser.add_argument("--overhead-ms", type=float, default=None)
    args = parser.parse_args(argv)
    codebase = CODEBASES[args.program]
    work = WORK / f"job-times-{args.program}"
    ensure_packages(codebase.packages)
    print(f"building {args.program} with its own build system", file=sys.stderr)
    build = codebase.build(work / "build", work / "build-cache")
    cache = work / "timing-cache"
    shutil.rmtree(cache, ignore_errors=True)
    flags = [f"-fthinlto-distributor={cached_dist()}",
             f"-Xthinlto-distributor=--verbose,--jobs=2,--cache-dir={cache}"]  # fmt: skip
    print("cold link, --verbose --jobs=2", file=sys.stderr)
    started = time.monotonic()
    done = subprocess.run(build.command("timed-out", flags), cwd=build.cwd, capture_output=True,
                          text=True)  # fmt: skip
    cold = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the cold link failed: {done.stderr[-2000:]}")
    times = {m[1]: float(m[2]) for m in map(_COMPILED.search, done.stderr.splitlines()) if m}
    print("full hit of the same link (the serial part)", file=sys.stderr)
    hits = sorted(timed(build.command("timed-hit", flags), build.cwd) for _ in range(3))
    serial = hits[1]
    jobs, compile_s = len(times), sum(times.values())
    longest_module, longest = max(times.items(), key=lambda kv: kv[1])
    o_ms = args.overhead_ms if args.overhead_ms is not None else measured_overhead_ms()
    o = (o_ms or 0.0) / 1000
    predicted = {str(w): model(serial, compile_s, longest, jobs, o, w) for w in WORKERS}
    report = {
        "benchmark": "job_times", "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(),
        "program": f"{args.program}: {codebase.program}", "jobs": jobs,
        "cold_link_s": cold, "serial_s": serial, "compile_sum_s": compile_s,
        "longest_s": longest, "longest_module": longest_module,
        "median_job_s": sorted(times.values())[jobs // 2],
        "overhead_ms_per_job": o_ms, "model_s": predicted,
        "bound": {str(w): "longest job" if longest >= (compile_s + jobs * o) / w else "compiles"
                  for w in WORKERS},
        "times_s": times,
    }  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"job_times-{args.program}.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"{jobs} jobs, C = {compile_s:.1f} s, t_max = {longest:.2f} s ({longest_module}), "
          f"S = {serial:.2f} s, cold link {cold:.1f} s, o = {o_ms} ms; model: "
          + ", ".join(f"W={w}: {t:.1f} s" for w, t in predicted.items()))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
