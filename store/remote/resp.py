"""A minimal RESP2 exchange for the one hot Redis call, the batched lookup of a link.

Importing the redis package costs ~120 ms (it pulls in asyncio), more than a whole cached
link; a full hit from the remote needs only AUTH, SELECT and MGET, written in one go and read
back: one round trip over a plain (or TLS) socket. Claims and uploads, which only links that
compile make, use the redis package.
"""

from __future__ import annotations

import socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


class ReplyError(Exception):
    """An error reply from the server (wrong password, OOM, ...)."""


def encode(command: Sequence[bytes | str | int]) -> bytes:
    parts = [b"*%d\r\n" % len(command)]
    for arg in command:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class Connection:
    """One socket to a Redis server; every error is an OSError or a ReplyError."""

    def __init__(
        self, host: str, port: int, *, tls: bool, connect_timeout: float, timeout: float
    ) -> None:
        sock = socket.create_connection((host, port), timeout=connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls:
                import ssl

                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            sock.settimeout(timeout)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._file = sock.makefile("rb")

    def call_many(self, commands: Sequence[Sequence[bytes | str | int]]) -> list[object]:
        """Sends every command at once, then reads one reply each (one round trip)."""
        self._sock.sendall(b"".join(encode(c) for c in commands))
        return [self._reply() for _ in commands]

    def _reply(self) -> object:
        line = self._file.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by the server")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            return ReplyError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self._file.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError("connection closed by the server")
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise ConnectionError(f"not a Redis reply: {line[:40]!r}")

    def close(self) -> None:
        try:
            self._file.close()
        finally:
            self._sock.close()
