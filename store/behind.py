"""Writes behind the caller: store work a process need not wait for, done by a detached process.

A link served from a remote tier promotes what it got into the local store, so that the next
link hits locally. Opening the index for writing (importing diskcache, opening it) and
committing costs about as much as the whole rest of such a link, and the link's own outputs do
not depend on it. So the link writes that work to a file in the store's tmp/ and starts a
fresh interpreter (``python -P -m store.writer``, :mod:`.detached`) that the link does not
wait for, and exits. A fresh process rather than a fork: sqlite's per-process lock state
must not cross a fork, and closing the caller's connections first would cost a WAL
checkpoint.

Every such writer holds a shared ``flock`` on ``locks/write-behind.lock`` (taken by the
caller, handed over) until it is done. :func:`settle` (an exclusive attempt, polled) waits for
the writers running now, so a process that opens the store afterwards sees what earlier links
wrote, as it did when they wrote it themselves. Writers are best effort like every cache
write: one that fails or is killed leaves misses, never a damaged store (blobs are published
by rename, index rows by transaction).
"""

from __future__ import annotations

import os
import stat
import time

from procs.detached import spawn

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .fsutil import Modes

LOCK = os.path.join("locks", "write-behind.lock")
#: How long settle() waits for writers still running before it goes on without their writes.
SETTLE_BOUND = 5.0
_POLL = 0.002
#: O_NONBLOCK: a FIFO in the lock's place must not block the open.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_lock(root: str, modes: Modes) -> int | None:
    """The lock file, opened (made in the store's mode by whoever needs it first). Only
    read: flock needs no more, and another member's file is theirs (its mode too). A
    symbolic link or a FIFO put in its place is refused (None: no writer waited for, none
    started)."""
    path = os.path.join(root, LOCK)
    for _ in range(3):
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            try:
                os.close(modes.create(path))
            except FileExistsError:
                pass  # another process made it meanwhile
            except FileNotFoundError:
                try:
                    modes.makedirs(os.path.dirname(path))
                except OSError:
                    return None
            except OSError:
                return None  # a read-only store has no writers to wait for, and starts none
            continue
        except OSError:
            return None
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
        except OSError:
            pass
        os.close(fd)
        return None
    return None


def start(root: str, modes: Modes, work: str) -> bool:
    """Starts a detached writer (store/writer.py) that stores the ``work`` file (written by
    Store.write_behind in the store's tmp/) into the store at ``root``; False (nothing
    started: the caller writes it itself) when the lock or the process is not to be had."""
    import fcntl

    fd = _open_lock(root, modes)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a settle() in progress: write here
        spawn("store.writer", [root, work, str(fd)], keep=fd)
    except OSError:
        return False
    finally:
        os.close(fd)  # the writer's copy keeps the shared lock
    return True


def settle(root: str, modes: Modes, bound: float = SETTLE_BOUND) -> None:
    """Waits (up to ``bound`` seconds) until no writer started by start() is running."""
    import fcntl

    fd = _open_lock(root, modes)
    if fd is None:
        return
    try:
        deadline = time.monotonic() + bound
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(_POLL)
            except OSError:
                return
    finally:
        os.close(fd)  # releases the lock at once: writers may start again
