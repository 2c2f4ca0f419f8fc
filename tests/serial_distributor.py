#!/usr/bin/env python3
"""A minimal external DTLTO distributor written for the tests: runs each job in turn.

It reads an LLD-schema job file (its last argument) and runs ``common.args + job.args`` for
every job, the way a third-party distributor that cached-dist wraps would.
"""

import json
import subprocess
import sys


def main() -> int:
    with open(sys.argv[-1]) as f:
        document = json.load(f)
    common = document["common"]["args"]
    marker = sys.argv[1] if len(sys.argv) > 2 else None
    for job in document["jobs"]:
        if subprocess.run([*common, *job["args"]]).returncode != 0:
            return 1
    if marker:
        with open(marker, "a") as f:
            f.write(f"{len(document['jobs'])}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
