#!/usr/bin/env python3
"""A distributor for the job-file fuzzer: keeps a real link's job file, inputs and objects.

    capture_jobfile.py SAVE_DIR CACHED_DIST [ARGS...] JOBFILE

LLD deletes the shards and extracted archive members after the link; this copies every input
the job file names (relative paths, kept relative) to SAVE_DIR with the job file as
SAVE_DIR/job.json, runs cached-dist, and keeps each output it wrote under
SAVE_DIR/reference/ (listed in reference.json): the objects a correct link must give.
"""

import json
import os
import shutil
import subprocess
import sys


def main() -> int:
    save, cached_dist, *rest = sys.argv[1:]
    job_file = rest[-1]
    with open(job_file) as f:
        document = json.load(f)
    names = list(document["common"].get("inputs", []))
    for job in document["jobs"]:
        names += job["inputs"]
    for name in dict.fromkeys(names):
        if not os.path.isabs(name):
            dest = os.path.join(save, name)
            os.makedirs(os.path.dirname(dest) or save, exist_ok=True)
            shutil.copy(name, dest)
    shutil.copy(job_file, os.path.join(save, "job.json"))
    status = subprocess.run([cached_dist, *rest]).returncode
    references = {}
    os.makedirs(os.path.join(save, "reference"), exist_ok=True)
    for i, job in enumerate(document["jobs"]):
        for k, out in enumerate(job["outputs"]):
            ref = os.path.join("reference", f"{i}.{k}.o")
            shutil.copy(out, os.path.join(save, ref))
            references[out] = ref
    with open(os.path.join(save, "reference.json"), "w") as f:
        json.dump(references, f)
    return status


if __name__ == "__main__":
    sys.exit(main())
