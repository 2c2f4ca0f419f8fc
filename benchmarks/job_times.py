"""Backend compile times of the ~250-job python3.11 link, and the model of a Dask cluster's scale.

    python -m benchmarks.job_times [--program python3.11|leveldb|lua] [--overhead-ms O]

Builds the program with its own build system (as ``python -m benchmarks run`` does), then
links it twice through cached-dist with a fresh cache: a cold ``--verbose`` link, whose lines
give each backend job's compile time (``miss KEY MODULE: compiled here, T s``), and a full
hit of the same link, which is the serial part S (the thin link, keys, and the final link:
everything but the backend compiles). From C (the sum of the compile times), t_max (the
longest job), n jobs, the Dask runner's setup d once per link (reaching the resident client;
a machine's first link imports distributed and connects instead, reported apart) and its
overhead o per job beyond that (``--overhead-ms``; by default what
``benchmarks.dask_link`` measured, from results/dask_link*.json), it prints the *model*
S + d + max(t_max, (C + n o) / W) for W = 2, 8, 32, 128 workers. A model, not a
measurement: it assumes jobs spread perfectly over the workers and that shipping scales
with them.
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
from typing import Any

from .harness.codebases import CODEBASES, ENV, Build
from .harness.configs import cached_dist
from .sources import WORK, ensure_packages, machine
from .timing import timed

RESULTS = Path(__file__).parent / "results"
_COMPILED = re.compile(r"cached-dist: miss [0-9a-f]{32} (\S+): compiled here, ([0-9.]+) s$")
WORKERS = (2, 8, 32, 128)


def measured_overhead() -> tuple[float, float, float]:
    """(setup seconds once per link, ms per job beyond it, the first link's setup): the
    largest of each that benchmarks.dask_link recorded (lua and leveldb); zeros when it has
    not run."""
    setup, per_job, first = 0.0, 0.0, 0.0
    for path in RESULTS.glob("dask_link*.json"):
        found = json.loads(path.read_text())
        s, o = found.get("setup_s"), found.get("overhead_ms_per_job_beyond_setup")
        if isinstance(s, int | float) and isinstance(o, int | float):
            setup, per_job = max(setup, float(s)), max(per_job, float(o))
            first = max(first, float(found.get("first_link_setup_s", s)))
    return setup, per_job, first


def model(serial: float, compile_s: float, longest: float, jobs: int, o: float, w: int) -> float:
    """S + max(t_max, (C + n o) / W): the serial part, then the compiles spread over W."""
    return serial + max(longest, (compile_s + jobs * o) / w)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.job_times", description=__doc__)
    parser.add_argument("--program", choices=sorted(CODEBASES), default="python3.11")
    parser.add_argument("--overhead-ms", type=float, default=None)
    parser.add_argument("--model-only", action="store_true",
                        help="recompute the model from the saved measurement (after a new "
                             "benchmarks.dask_link run), without building or linking")  # fmt: skip
    args = parser.parse_args(argv)
    path = RESULTS / f"job_times-{args.program}.json"
    report = json.loads(path.read_text()) if args.model_only else measure(args.program)
    setup, o_ms, first = measured_overhead()
    if args.overhead_ms is not None:
        o_ms = args.overhead_ms
    o = o_ms / 1000
    jobs, compile_s, longest = report["jobs"], report["compile_sum_s"], report["longest_s"]
    # The Dask runner's setup (reaching the resident client) adds to the serial part.
    serial = report["serial_s"] + setup
    report["overhead_ms_per_job"], report["dask_setup_s"] = o_ms, setup
    report["dask_first_link_setup_s"] = first  # importing distributed and connecting
    report["model_s"] = {str(w): model(serial, compile_s, longest, jobs, o, w) for w in WORKERS}
    report["bound"] = {str(w): "longest job" if longest >= (compile_s + jobs * o) / w
                       else "compiles" for w in WORKERS}  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{jobs} jobs, C = {compile_s:.1f} s, t_max = {longest:.2f} s "
          f"({report['longest_module']}), S = {report['serial_s']:.2f} s, cold link "
          f"{report['cold_link_s']:.1f} s, Dask setup {setup:.2f} s (a machine's first link "
          f"{first:.2f} s), o = {o_ms:.0f} ms; model: "
          + ", ".join(f"W={w}: {t:.1f} s" for w, t in report["model_s"].items()))  # fmt: skip
    return 0


def measure(program: str) -> dict[str, Any]:
    """Builds ``program``, links it cold (verbose) and fully cached: the measured part."""
    codebase = CODEBASES[program]
    work = WORK / f"job-times-{program}"
    ensure_packages(codebase.packages)
    saved = work / "build.json"  # the build of an earlier run, reused if it is still there
    if saved.exists() and (work / "build").is_dir():
        fields = json.loads(saved.read_text())
        build = Build(Path(fields["root"]), Path(fields["cwd"]), tuple(fields["link"]),
                      Path(fields["top"]))  # fmt: skip
    else:
        print(f"building {program} with its own build system", file=sys.stderr)
        saved.unlink(missing_ok=True)
        build = codebase.build(work / "build", work / "build-cache")
        saved.write_text(json.dumps({"root": str(build.root), "cwd": str(build.cwd),
                                     "link": build.link, "top": str(build.top)}))  # fmt: skip
    cache = work / "timing-cache"
    shutil.rmtree(cache, ignore_errors=True)
    flags = [f"-fthinlto-distributor={cached_dist()}",
             f"-Xthinlto-distributor=--verbose,--jobs=2,--cache-dir={cache}"]  # fmt: skip
    print("cold link, --verbose --jobs=2", file=sys.stderr)
    started = time.monotonic()
    done = subprocess.run(build.command("timed-out", flags), cwd=build.cwd, env=ENV,
                          capture_output=True, text=True)  # fmt: skip
    cold = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the cold link failed: {done.stderr[-2000:]}")
    times = {m[1]: float(m[2]) for m in map(_COMPILED.search, done.stderr.splitlines()) if m}
    print("full hit of the same link (the serial part)", file=sys.stderr)
    hits = sorted(timed(build.command("timed-hit", flags), build.cwd, ENV) for _ in range(3))
    longest_module, longest = max(times.items(), key=lambda kv: kv[1])
    return {
        "benchmark": "job_times", "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(),
        "program": f"{program}: {codebase.program}", "jobs": len(times),
        "cold_link_s": cold, "serial_s": hits[1], "compile_sum_s": sum(times.values()),
        "longest_s": longest, "longest_module": longest_module,
        "median_job_s": sorted(times.values())[len(times) // 2], "times_s": times,
    }  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
