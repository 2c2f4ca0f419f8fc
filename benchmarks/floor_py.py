"""The Python floor distributor: the interpreter, ``import json`` and the same hard links.

    python floor_py.py PRECOMPUTED_DIR JOBFILE

Hard-links PRECOMPUTED_DIR/<i>.o to outputs[0] of the i-th job (see floor_c.c).
"""

import json
import os
import sys

pre, path = sys.argv[1], sys.argv[-1]
with open(path) as f:
    document = json.load(f)
for i, job in enumerate(document["jobs"]):
    out = job["outputs"][0]
    if os.path.exists(out):
        os.unlink(out)
    os.link(os.path.join(pre, f"{i}.o"), out)
