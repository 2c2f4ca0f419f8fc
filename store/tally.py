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

from .fsutil import open_dir, read_nonblocking, temp_name, unlink_quietly, write_all

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
        try:
            fd = open_dir(directory)
        except FileNotFoundError:
            modes.makedirs(directory)
            fd = open_dir(directory)
    except OSError:
        return False  # not a directory of the cache's own (never written through), or none
    try:
        if len(os.listdir(fd)) >= FOLD_AT:
            return False
        data = "".join(f"{name} {value}\n" for name, value in rows).encode()
        tmp = os.path.basename(temp_name(directory, "counts"))
        out = modes.create(tmp, dir_fd=fd)
        try:
            try:
                write_all(out, data)
            finally:
                os.close(out)
            os.rename(tmp, tmp[1:-4], src_dir_fd=fd, dst_dir_fd=fd)  # whole or absent
        except OSError:
            unlink_quietly(tmp, fd)
            raise
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def take(stats_dir: str, stale_after: float = 3600.0) -> dict[str, int]:
    """Reads and removes every pending file (call inside the database transaction that adds
    the result); returns the summed counts. Temporary files older than ``stale_after``
    seconds (a writer killed before its rename) are removed too. Only in the directory the
    store made: a symbolic link in its place is left alone."""
    import time

    try:
        fd = open_dir(pending_dir(stats_dir))
    except OSError:
        return {}
    try:
        return _take(fd, time.time() - stale_after)
    finally:
        os.close(fd)


def _take(fd: int, stale_before: float) -> dict[str, int]:
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return {}
    totals: dict[str, int] = {}
    for entry in entries:
        if entry.name.startswith("."):
            try:
                if entry.stat(follow_symlinks=False).st_mtime < stale_before:
                    os.unlink(entry.name, dir_fd=fd)
            except OSError:
                pass
            continue
        if not entry.is_file(follow_symlinks=False):
            continue  # not a pending file: left alone
        data = read_nonblocking(entry.name, _MAX_FILE, fd)  # swapped for a FIFO: no wait
        if data is None:
            continue  # folded by another process meanwhile, or unreadable
        try:
            os.unlink(entry.name, dir_fd=fd)
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
