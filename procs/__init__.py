"""The processes cached-dist works with beside its own: forked workers and the standbys a warm
server forks ahead of a link (:mod:`.forked`), helpers started detached (:mod:`.detached`),
and the two calls they rest on: writing a whole message and reading another process's state.

Process machinery, not storage or keys: it imports neither ``store`` nor ``cached_dist``, and
both use it (the store starts its writer detached; a warm server's child forks its early
worker, which also places half of the hits' outputs, through it).
"""

from __future__ import annotations

import os


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write may write less than asked; loop until all of `data` is out."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def proc_stat(pid: int) -> list[bytes]:
    """The fields of /proc/PID/stat after the process's name (state, parent, ...: field 3
    on is [0] on), which may hold anything, even parentheses and spaces, so they are read
    after the last one. OSError if the process cannot be read (gone, say)."""
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while chunk := os.read(fd, 4096):
            parts.append(chunk)
    finally:
        os.close(fd)
    return b"".join(parts).rpartition(b")")[2].split()
