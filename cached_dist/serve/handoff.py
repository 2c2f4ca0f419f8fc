"""The moment a server's child commits to a link, or hands it back to the client.

A child serves a link only when every job is a hit in the local cache or the remote tiers
(fetched and checked first: cached_dist/link/cached.py serve_all). Until it knows, it
writes nothing the link could see (no outputs; what it would print is held back), so the
client can still do the whole link itself. :meth:`Handoff.commit` is called by the link at
that point (cached_dist/link/cached.py): not a full hit, or a client that has given up, and
:class:`FallBack` unwinds the child; otherwise what was held back is printed and the link
goes on exactly as in a process of its own.
"""

from __future__ import annotations

import io
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import TextIO

    from procs.forked import Standby


class FallBack(BaseException):
    """The client is to do the link itself (args: why, and optionally the remotes that failed
    in the attempt). A BaseException: no ``except Exception`` on the way (a link's own error
    handling) may turn it into an error message."""


class Handoff:
    """One link's commitment, over the connection to its client (see client.c's protocol)."""

    def __init__(self, conn: socket.socket, standby: Standby | None = None) -> None:
        self.conn = conn
        # The link's early worker, forked by the spare before the link came, if it could be
        # (cached_dist/link/flow.py tells it which job file, or ends it).
        self.standby = standby
        # Set by the link: whether it had an early worker (the server's next spares then
        # fork one ahead: cached_dist/serve/server.py _standby).
        self.early_started = False
        self.committed = False
        self._streams: tuple[TextIO, TextIO] = (sys.stdout, sys.stderr)
        self._held = (_Held(sys.stdout), _Held(sys.stderr))
        sys.stdout, sys.stderr = self._held  # until committed

    def commit(
        self, full_hit: bool, why: str = "not a full hit from the local cache", failed: str = ""
    ) -> None:
        """Raises FallBack(why, failed) unless ``full_hit`` and the client still waits; then
        lets the link write (and prints what it held back). ``failed``: the remotes that failed
        in this attempt (link/tiers.py Tiers.failures), passed on to the client."""
        if self.committed:
            return
        if not full_hit:
            raise FallBack(why, failed)
        try:
            self.conn.sendall(b"R")
            go = self.conn.recv(1)
        except OSError:
            go = b""
        if go != b"G":
            raise FallBack("the client gave up waiting")  # and links by itself
        self.committed = True
        sys.stdout, sys.stderr = self._streams
        for held, stream in zip(self._held, self._streams, strict=True):
            value = held.getvalue()
            if value:
                try:
                    stream.write(value)
                    stream.flush()
                except (OSError, ValueError):
                    pass  # a closed stream, as Log itself treats one

    def discard(self) -> None:
        """Drops what was held back (the client's own run will say it again)."""
        if not self.committed:
            sys.stdout, sys.stderr = self._streams


class _Held(io.StringIO):
    """What a stream would have been given; a terminal still says it is one (the link's
    progress line depends on it)."""

    def __init__(self, real: TextIO) -> None:
        super().__init__()
        self.real = real

    def isatty(self) -> bool:
        try:
            return self.real.isatty()
        except (OSError, ValueError):
            return False
