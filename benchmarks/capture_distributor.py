#!/usr/bin/env python3
"""A distributor for benchmarks: saves the job file and its shards, then runs cached-dist.

    capture_distributor.py SAVE_DIR CACHED_DIST [ARGS...] JOBFILE

LLD deletes shards after the link; keeping them lets a benchmark time cached-dist alone on a
real job file, without the linker around it.
"""

import json
import os
import shutil
import sys


def main() -> int:
    save, cached_dist, *rest = sys.argv[1:]
    job_file = rest[-1]
    with open(job_file) as f:
        document = json.load(f)
    os.makedirs(save, exist_ok=True)
    for job in document["jobs"]:
        shard = job["inputs"][1]
        shutil.copy(shard, os.path.join(save, os.path.basename(shard)))
    name = os.path.basename(document["common"]["linker_output"])
    shutil.copy(job_file, os.path.join(save, f"{name}.job.json"))
    os.execv(cached_dist, [cached_dist, *rest])


if __name__ == "__main__":
    sys.exit(main())
