"""Runs cached-dist on a job file, then keeps each job's object as SAVE_DIR/<i>.o (floors).

python floor_save.py SAVE_DIR CACHED_DIST [ARGS...] JOBFILE
"""

import json
import os
import shutil
import subprocess
import sys


def main() -> int:
    save, cached_dist, *rest = sys.argv[1:]
    command = [cached_dist, *rest]
    if cached_dist.endswith(".py"):
        command.insert(0, sys.executable)
    done = subprocess.run(command)
    if done.returncode:
        return done.returncode
    with open(rest[-1]) as f:
        document = json.load(f)
    os.makedirs(save, exist_ok=True)
    for i, job in enumerate(document["jobs"]):
        shutil.copy(job["outputs"][0], os.path.join(save, f"{i}.o"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
