"""The detached writer that store/behind.py starts: ``python -P -m store.writer ROOT WORK FD``.

Reads the work file (marshal: max size, group sharing, memos, entries, compression level),
removes it, stores the work and exits; the shared lock on FD, handed over by the caller, goes
with the process.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import sys

from .store import Store


def main(argv: list[str]) -> int:
    root, work, _lock = argv
    try:
        with open(work, "rb") as f:
            max_size, group_shared, memos, entries, *rest = marshal.load(f)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(work)
    level = rest[0] if rest else 0  # a work file written before compression: plain
    store = Store(root, max_size=max_size, group_shared=group_shared, compression_level=level)
    store.write_now(memos, entries)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
