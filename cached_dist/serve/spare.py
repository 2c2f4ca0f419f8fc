"""A child forked ahead of the next link, which takes its page faults while the server idles.

Forked, a child shares the server's memory until it writes to it: every page it then touches
is copied on the spot, a page fault of ~4 us on these machines, ~650 of them in a 301-job
full hit (~4 ms of ~40). A spare child is forked as soon as the previous link has its own
and, once that link is over (not to take a core from it), makes all of its writable memory
its own at once (``MADV_POPULATE_WRITE``, Linux 5.14+; elsewhere it simply waits). The server
hands it the next connection over a socket pair; a link that comes before the warm-up is
served at once, as by a freshly forked child.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct

_PEER = struct.Struct("<i")
_MADV_POPULATE_WRITE = 23
_MAX_MAPPING = 64 << 20  # larger private mappings are reservations, not the program's state


class Spare:
    """The server's end of a spare child."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.sock = sock
        self.pid = pid

    def take(self, conn: socket.socket, peer_pid: int) -> bool:
        """Hands ``conn`` (from ``peer_pid``) to the spare; False if it is gone (the server
        forks a child for the link as without one)."""
        try:
            return socket.send_fds(self.sock, [_PEER.pack(peer_pid)], [conn.fileno()]) > 0
        except OSError:
            return False
        finally:
            self.sock.close()


def wait(sock: socket.socket, after: int) -> tuple[socket.socket, int] | None:
    """In the spare: waits for a connection from the server, warming up once the process
    ``after`` (the child of the previous link; 0 for none) is gone. The connection and its
    client's pid, or None once the server is gone."""
    pidfd = -1
    if after > 0:
        with contextlib.suppress(OSError):  # already gone, or no pidfd here: warm up now
            pidfd = os.pidfd_open(after)
    warm = False
    while True:
        if not warm and pidfd < 0 and not select.select([sock], [], [], 0)[0]:
            prefault()
            warm = True
        ready = select.select([sock] + ([pidfd] if pidfd >= 0 else []), [], [])[0]
        if sock in ready:
            break
        os.close(pidfd)
        pidfd = -1
    if pidfd >= 0:
        os.close(pidfd)
    try:
        head, fds, _, _ = socket.recv_fds(sock, _PEER.size, 1)
    except OSError:
        return None
    finally:
        sock.close()
    if len(head) != _PEER.size or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        return None  # the server closed its end: it has stopped
    return socket.socket(fileno=fds[0]), _PEER.unpack(head)[0]


def prefault() -> None:
    """Makes every private writable mapping of this process its own now, rather than page by
    page as a link writes to it. Best effort: any failure leaves the faults to the link."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        with open("/proc/self/maps") as f:
            mappings = f.read().splitlines()
    except (OSError, AttributeError):
        return
    for line in mappings:
        fields = line.split()
        if len(fields) < 2 or fields[1][1:2] != "w" or fields[1][3:4] != "p":
            continue
        name = fields[5] if len(fields) > 5 else ""
        if name.startswith("[") and name != "[heap]":
            continue  # the stack, the vDSO's data: not the program's state
        low, high = (int(address, 16) for address in fields[0].split("-"))
        if high - low <= _MAX_MAPPING:
            madvise(low, high - low, _MADV_POPULATE_WRITE)  # EINVAL on older kernels
