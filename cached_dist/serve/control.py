"""``cached-dist serve --status`` and ``--stop``: the server that listens on a socket.

A server holds a lock on ``SOCKET.lock`` and, once it listens, writes its pid there
(server.py). The pid is believed only if that process has the lock file open: only the
server itself keeps it open (its children close it), so a pid left by a server that was
killed, and since reused by another process, names no server.
"""

from __future__ import annotations

import os
import select
import signal

#: Longest ``--stop`` waits for the server to exit after SIGTERM (it ends at once: its
#: children serving links finish them on their own).
STOP_WAIT = 30.0


def find(path: str) -> int:
    """The pid of the server listening on ``path`` (0: none): the pid in its lock file, if
    that process holds the file."""
    lock = path + ".lock"
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0  # none was ever started there, or it is not for us to read
    try:
        st = os.fstat(fd)
        text = os.pread(fd, 32, 0)
    except OSError:
        return 0
    finally:
        os.close(fd)
    try:
        pid = int(text)
    except ValueError:
        return 0  # a server between its lock and its listen, or none
    return pid if pid > 0 and _holds(pid, (st.st_dev, st.st_ino)) else 0


def _holds(pid: int, file: tuple[int, int]) -> bool:
    """Whether process ``pid`` has ``file`` (device, inode) open; False for a process this
    one cannot look into (another user's, unless this one is root)."""
    where = f"/proc/{pid}/fd"
    try:
        names = os.listdir(where)
    except OSError:
        return False
    for name in names:
        try:
            st = os.stat(f"{where}/{name}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == file:
            return True
    return False


def stop(pid: int, wait: float = STOP_WAIT) -> bool:
    """Sends SIGTERM (and SIGCONT, should it be stopped) to the server ``pid``; whether it
    exited within ``wait`` seconds (True if it was gone already)."""
    try:
        done = os.pidfd_open(pid)  # before the signal: then no other process has its pid
    except ProcessLookupError:
        return True
    try:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            signal.pidfd_send_signal(done, sig)
        return bool(select.select([done], [], [], wait)[0])  # readable once it has exited
    except ProcessLookupError:
        return True
    finally:
        os.close(done)
