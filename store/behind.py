"""Writes behind the caller: store work a process need not wait for, done by a detached child.

A link served from a remote tier promotes what it got into the local store, so that the next
link hits locally. Opening the index for writing (importing diskcache, opening it) and
committing costs about as much as the whole rest of such a link, and the link's own outputs do
not depend on it. So the link hands that work to a grandchild in a session of its own (no
terminal, no inherited pipes: a caller reading the link's output is not held up) and exits.

Every such writer holds a shared ``flock`` on ``locks/write-behind.lock`` until it is done.
:func:`settle` (an exclusive attempt, polled) waits for the writers running now, so a process
that opens the store afterwards sees what earlier links wrote, as it did when they wrote it
themselves. Writers are best effort like every cache write: one that fails or is killed leaves
misses, never a damaged store (blobs are published by rename, index rows by transaction).
"""

from __future__ import annotations

import contextlib
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .fsutil import Modes

LOCK = os.path.join("locks", "write-behind.lock")
#: How long settle() waits for writers still running before it goes on without their writes.
SETTLE_BOUND = 5.0
_POLL = 0.002


def _open_lock(root: str, modes: Modes) -> int | None:
    path = os.path.join(root, LOCK)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, modes.file)
        except FileNotFoundError:
            try:
                modes.makedirs(os.path.dirname(path))
            except OSError:
                return None
            continue
        except OSError:
            return None  # a read-only store has no writers to wait for, and starts none
        modes.fix_file(fd)
        return fd
    return None


def run_detached(root: str, modes: Modes, work: Callable[[], None]) -> bool:
    """Runs ``work`` in a detached grandchild under the shared lock; returns False (nothing
    started: the caller does the work itself) when the lock or a fork is not to be had."""
    import fcntl

    fd = _open_lock(root, modes)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a settle() in progress: do it here
        pid = os.fork()
    except OSError:
        os.close(fd)
        return False
    if pid == 0:  # pragma: no cover - runs in the child, which never returns
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)  # the grandchild is adopted by init: no zombie for the caller
            null = os.open(os.devnull, os.O_RDWR)
            for std in (0, 1, 2):
                os.dup2(null, std)
            # Pipes the caller inherited (a build tool's output capture, a jobserver) must not
            # stay open here: whoever reads them would wait for this writer.
            os.closerange(3, fd)
            os.closerange(fd + 1, 1 << 20)
            work()
        finally:
            os._exit(0)
    os.close(fd)  # the grandchild's descriptor keeps the shared lock
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    return True


def settle(root: str, modes: Modes, bound: float = SETTLE_BOUND) -> None:
    """Waits (up to ``bound`` seconds) until no writer started by run_detached is running."""
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
