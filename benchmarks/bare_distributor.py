#!/usr/bin/env python3
"""A bare DTLTO distributor with no cache: the baseline the benchmarks wrap and compare with.

    bare_distributor.py [--jobs=N] JOBFILE

Reads an LLD-schema job file, runs ``common.args + job.args`` for every job, N at a time
(default: the usable CPUs), and exits non-zero if any job fails. When the environment names
``BENCH_JOBS_LOG``, one line with the number of jobs is appended to it, so a benchmark knows
how many backend jobs a link had even when a cache in front of this script hid some of them.
Standard library only, so that it starts as fast as a distributor can in Python.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def _run(cmd: list[str]) -> tuple[int, str]:
    done = subprocess.run(cmd, capture_output=True, text=True)
    return done.returncode, done.stderr


def main(argv: list[str]) -> int:
    jobs = len(os.sched_getaffinity(0))
    rest = []
    for arg in argv:
        if arg.startswith("--jobs="):
            jobs = int(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if len(rest) != 1:
        print("usage: bare_distributor.py [--jobs=N] JOBFILE", file=sys.stderr)
        return 2
    with open(rest[0]) as f:
        document = json.load(f)
    common = document["common"]["args"]
    commands = [[*common, *job["args"]] for job in document["jobs"]]
    log = os.environ.get("BENCH_JOBS_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{len(commands)}\n")
    failed = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for status, stderr in pool.map(_run, commands):
            if stderr:
                sys.stderr.write(stderr)
            failed += status != 0
    if failed:
        print(f"bare_distributor: {failed} backend jobs failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
