"""A link's statistics as one small file, when it only read the store.

Recording a full hit's counts in the statistics database costs importing sqlite and a write
transaction, ~4 ms of a ~25 ms link. Such a link leaves its counts in ``stats/pending/``
instead (a temporary file renamed into place: whole or absent); the next process that opens
the database folds every pending file into it, in the transaction that also removes them
(store/stats.py), so a count is never added twice. Past FOLD_AT pending files a link opens
the database itself, which bounds how many there can be.

A file is lines of ``name value`` (a counter name and a decimal integer); lines that are not
are ignored, as is a file that cannot be read.
"""

from __future__ import annotations

import os

from .fsutil import TempFile, read_nonblocking, rename_into, write_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from .fsutil import Modes

FOLD_AT = 256
_MAX_FILE = 1 << 16


def pending_dir(stats_dir: str) -> str:
    return os.path.join(stats_dir, "pending")


def leave(stats_dir: str, modes: Modes, deltas: Mapping[str, int]) -> bool:
    """Writes ``deltas`` as a pending file; False when the caller should add them to the
    database itself (too many pending, or the file could not be written)."""
    rows = [(k, int(v)) for k, v in deltas.items() if v]
    if not rows:
        return True
    directory = pending_dir(stats_dir)
    try:
        if len(os.listdir(directory)) >= FOLD_AT:
            return False
    except FileNotFoundError:
        try:
            modes.makedirs(directory)
        except OSError:
            return False
    except OSError:
        return False
    data = "".join(f"{name} {value}\n" for name, value in rows).encode()
    try:
        with TempFile(directory, modes, "counts") as (fd, tmp):
            write_all(fd, data)
        rename_into(tmp, os.path.join(directory, os.path.basename(tmp)[1:-4]), modes)
    except OSError:
        return False
    return True


def take(stats_dir: str, stale_after: float = 3600.0) -> dict[str, int]:
    """Reads and removes every pending file (call inside the database transaction that adds
    the result); returns the summed counts. Temporary files older than ``stale_after``
    seconds (a writer killed before its rename) are removed too."""
    import time

    directory = pending_dir(stats_dir)
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return {}
    totals: dict[str, int] = {}
    now = time.time()
    for entry in entries:
        if entry.name.startswith("."):
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime > stale_after:
                    os.unlink(entry.path)
            except OSError:
                pass
            continue
        if not entry.is_file(follow_symlinks=False):
            continue  # not a pending file: left alone
        data = read_nonblocking(entry.path, _MAX_FILE)  # swapped for a FIFO: no wait
        if data is None:
            continue  # folded by another process meanwhile, or unreadable
        try:
            os.unlink(entry.path)
        except OSError:
            continue  # folded by another process meanwhile
        for name, value in _parse(data):
            totals[name] = totals.get(name, 0) + value
    return totals


def _parse(data: bytes) -> list[tuple[str, int]]:
    rows = []
    for line in data.split(b"\n"):
        name, _, value = line.partition(b" ")
        digits = value[1:] if value[:1] == b"-" else value
        if not 0 < len(name) <= 64 or not 0 < len(digits) <= 18 or not digits.isdigit():
            continue
        if not name.replace(b"_", b"").isalnum():  # ASCII letters and digits only
            continue
        rows.append((name.decode("ascii"), int(value)))
    return rows
