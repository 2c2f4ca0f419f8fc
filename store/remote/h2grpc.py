"""Unary and server-streaming gRPC calls over one HTTP/2 connection, without grpcio.

Importing grpcio costs a cached link more than all its other work (docs/benchmarks/
cold-link.md, REAPI section), and h2, the well-kept HTTP/2 library, still costs tens of
milliseconds (it brings logging, enum, base64...). A lookup needs little of HTTP/2: send
each call's HEADERS and DATA, read the answers, honour the server's settings and flow
control. This module does that for a batch of calls at once: every call is a stream on the
same connection, written in one go (as many as the server allows at a time), so a batch
costs one round trip. Header compression: store/remote/hpack.py.

Everything the server sends is untrusted: frame sizes, header blocks, message lengths and
the total per call are bounded, and any violation is an :class:`H2Error` (a fault of the
remote: one warning, never a crash). URLs: ``unix:PATH``, ``grpc://HOST:PORT``, and
``grpcs://HOST:PORT`` (TLS, ALPN ``h2``, the system's trusted certificates).
"""

from __future__ import annotations

import _socket  # not socket: its enums cost a lookup more than its use (TLS imports it)
import time

from . import hpack

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST, _SETTINGS, _PUSH, _PING, _GOAWAY, _WINDOW, _CONTINUATION = (
    0, 1, 3, 4, 5, 6, 7, 8, 9)  # fmt: skip
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_MAX_FRAME = 16384  # what we accept (the default: we do not raise it)
_WINDOW_MAX = 2**31 - 1
_MAX_HEADER_BLOCK = 64 * 2**10
#: Streams opened before the server's SETTINGS say how many it takes (RFC 9113 suggests
#: servers allow at least 100).
_FIRST_STREAMS = 100
_REFUSED_STREAM = 7
_UNAVAILABLE, _UNKNOWN = 14, 2
#: gRPC status codes by number, for messages.
CODES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
         "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
         "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
         "UNAUTHENTICATED")  # fmt: skip
#: HTTP statuses gRPC maps to codes (grpc's doc/http-grpc-status-mapping.md).
_HTTP_CODES = {400: 13, 401: 16, 403: 7, 404: 12, 429: 14, 502: 14, 503: 14, 504: 14}


def code_name(code: int) -> str:
    return CODES[code] if 0 <= code < len(CODES) else f"code {code}"


class H2Error(Exception):
    """The connection failed or the server broke the protocol; ``timeout`` if it did not
    answer in time."""

    def __init__(self, message: str, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class Reply:
    """One call's outcome: its gRPC status and the messages it answered."""

    __slots__ = ("code", "message", "messages")

    def __init__(self, code: int, message: str, messages: list[bytes]) -> None:
        self.code = code
        self.message = message
        self.messages = messages


class _Call:
    __slots__ = ("body", "done", "headers", "index", "limit", "out", "refused", "reply",
                 "sent_end", "stream", "trailers", "window")  # fmt: skip

    def __init__(self, index: int, limit: int) -> None:
        self.index = index
        self.limit = limit
        self.stream = 0
        self.headers: list[tuple[str, str]] | None = None
        self.trailers: list[tuple[str, str]] | None = None
        self.body = bytearray()
        self.out = b""  # DATA not yet sent (flow control)
        self.sent_end = False
        self.window = 0
        self.done = False
        self.reply: Reply | None = None
        self.refused = 0


def parse_target(url: str) -> tuple[str, str, int, bool]:
    """(unix socket path or "", host, port, TLS?) of a REAPI URL; ValueError if malformed."""
    if url[:5].lower() == "unix:":
        path = url[5:]
        if path.startswith("//"):
            path = path[2:]
        if not path.startswith("/"):
            raise ValueError("a unix: URL needs an absolute socket path (unix:/path/to/socket)")
        return path, "localhost", 0, False
    scheme, _, rest = url.partition("://")
    tls = scheme.lower() == "grpcs"
    host = rest.split("/", 1)[0]
    if not host or "@" in host:
        raise ValueError("expected grpc://HOST:PORT or grpcs://HOST:PORT")
    port = 443 if tls else 80
    if host.startswith("["):
        name, bracket, after = host[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            raise ValueError("expected grpc://HOST:PORT or grpcs://HOST:PORT")
        if after:
            port = _port(after[1:])
        return "", name, port, tls
    name, colon, number = host.partition(":")
    if colon:
        port = _port(number)
    return "", name, port, tls


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"not a port: {text!r}")
    return int(text)


def _connected(family: int, address: str | tuple[Any, ...], timeout: float) -> _socket.socket:
    sock = _socket.socket(family, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def _tcp(host: str, port: int, timeout: float) -> _socket.socket:
    """socket.create_connection's loop over the host's addresses, with _socket."""
    error: OSError | None = None
    for family, _, _, _, address in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        try:
            sock = _connected(family, address, timeout)
        except OSError as e:
            error = e
            continue
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        return sock
    raise error or OSError(f"no address for {host}")


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags])
            + stream.to_bytes(4, "big") + payload)  # fmt: skip


def _unpercent(text: str) -> str:
    """grpc-message is percent-encoded UTF-8."""
    if "%" not in text:
        return text
    raw = bytearray()
    i = 0
    data = text.encode("latin-1")
    while i < len(data):
        if data[i] == 0x25 and i + 2 < len(data) and _is_hex(data[i + 1 : i + 3]):
            raw.append(int(data[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(data[i])
            i += 1
    return raw.decode("utf-8", "replace")


def _is_hex(pair: bytes) -> bool:
    return len(pair) == 2 and all(c in b"0123456789abcdefABCDEF" for c in pair)


class Channel:
    """A connection to one server, opened on the first batch and kept for the next."""

    def __init__(
        self, url: str, *, connect_timeout: float, headers: Sequence[tuple[str, str | bytes]],
        user_agent: str = "cached-dist",
    ) -> None:  # fmt: skip
        self.path, self.host, self.port, self.tls = parse_target(url)
        self.connect_timeout = connect_timeout
        authority = self.host if self.path else f"{self.host}:{self.port}"
        if ":" in self.host and not self.path:
            authority = f"[{self.host}]:{self.port}"
        self._fixed = [(":method", "POST"), (":scheme", "https" if self.tls else "http")]
        self._after = [(":authority", authority), ("te", "trailers"),
                       ("content-type", "application/grpc"),
                       ("user-agent", user_agent)]  # fmt: skip
        self._metadata = list(headers)
        self._sock: _socket.socket | None = None

    # -- the connection ---------------------------------------------------------------------

    def _connect(self, until: float) -> None:
        try:
            if self.path:
                sock = _connected(_socket.AF_UNIX, self.path, self.connect_timeout)
            else:
                sock = _tcp(self.host, self.port, self.connect_timeout)
        except TimeoutError:
            raise H2Error("timed out connecting", timeout=True) from None
        except OSError as e:
            raise H2Error(f"UNAVAILABLE: cannot connect: {e.strerror or e}") from None
        if self.tls:
            import socket
            import ssl

            sock = socket.socket(fileno=sock.detach())  # ssl wraps socket.socket only
            sock.settimeout(self.connect_timeout)

            try:
                context = ssl.create_default_context()
                context.set_alpn_protocols(["h2"])
                sock = context.wrap_socket(sock, server_hostname=self.host)
            except TimeoutError:
                sock.close()
                raise H2Error("timed out in the TLS handshake", timeout=True) from None
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise H2Error(f"UNAVAILABLE: TLS: {e}") from None
            if sock.selected_alpn_protocol() != "h2":
                sock.close()
                raise H2Error("UNAVAILABLE: the server did not agree to HTTP/2 (ALPN h2)")
        self._sock = sock
        self._decoder = hpack.Decoder()
        self._settled = False  # the server's SETTINGS seen
        self._max_streams = _FIRST_STREAMS
        self._peer_window = 65535  # the connection's send window
        self._peer_initial = 65535  # each new stream's send window
        self._peer_frame = 16384
        self._next_stream = 1
        self._received = 0  # DATA bytes since our last connection WINDOW_UPDATE
        self._goaway: int | None = None
        self._continuing = False
        self._block = b""
        self._out = bytearray(_PREFACE)
        settings = (2).to_bytes(2, "big") + (0).to_bytes(4, "big")  # ENABLE_PUSH 0
        settings += (4).to_bytes(2, "big") + _WINDOW_MAX.to_bytes(4, "big")  # INITIAL_WINDOW
        settings += (6).to_bytes(2, "big") + _MAX_HEADER_BLOCK.to_bytes(4, "big")
        self._out += _frame(_SETTINGS, 0, 0, settings)
        self._out += _frame(_WINDOW, 0, 0, (_WINDOW_MAX - 65535).to_bytes(4, "big"))
        self._buf = bytearray()

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    # -- a batch of calls -------------------------------------------------------------------

    def calls(
        self, requests: Sequence[tuple[str, bytes]], *, timeout: float,
        limits: Sequence[int] | None = None,
    ) -> list[Reply]:  # fmt: skip
        """Each (method path, serialized request) as a call, all at once; a Reply each.
        ``limits``: the most bytes each call may answer (default 64 MiB)."""
        until = time.monotonic() + timeout
        try:
            if self._sock is None:
                self._connect(until)
            return self._run(requests, until, timeout, limits)
        except H2Error:
            self.close()
            raise
        except TimeoutError:
            self.close()
            raise H2Error("timed out", timeout=True) from None
        except (BrokenPipeError, ConnectionResetError):
            self.close()
            raise H2Error("UNAVAILABLE: connection closed by the server") from None
        except OSError as e:
            self.close()
            raise H2Error(f"UNAVAILABLE: {e.strerror or e}") from None

    def _run(
        self, requests: Sequence[tuple[str, bytes]], until: float, timeout: float,
        limits: Sequence[int] | None,
    ) -> list[Reply]:  # fmt: skip
        calls = [_Call(i, limits[i] if limits else 64 * 2**20) for i in range(len(requests))]
        queue = list(reversed(calls))
        self._active: dict[int, _Call] = {}
        millis = max(1, int(timeout * 1000))
        grpc_timeout = f"{millis}m" if millis < 10**8 else f"{millis // 1000}S"
        while True:
            while queue and len(self._active) < self._max_streams and self._goaway is None:
                call = queue.pop()
                self._open(call, requests[call.index], grpc_timeout)
            self._flush_data()
            if not self._active:
                break
            assert self._sock is not None
            if self._out:
                self._sock.settimeout(max(0.001, until - time.monotonic()))
                self._sock.sendall(self._out)
                self._out.clear()
            self._read(until)
            for stream, call in list(self._active.items()):
                if call.done:
                    del self._active[stream]
                    if call.reply is None:  # refused before any work: asked again
                        call.done, call.headers, call.body = False, None, bytearray()
                        call.sent_end = False
                        queue.append(call)
            if self._goaway is not None and (queue or any(
                    s > self._goaway for s in self._active)):  # fmt: skip
                raise H2Error("UNAVAILABLE: the server is closing the connection (GOAWAY)")
        if self._out:
            assert self._sock is not None
            self._sock.sendall(self._out)  # SETTINGS and PING acknowledgements
            self._out.clear()
        replies = [call.reply for call in calls if call.reply is not None]
        assert len(replies) == len(calls)
        return replies

    def _open(self, call: _Call, request: tuple[str, bytes], grpc_timeout: str) -> None:
        path, body = request
        call.stream = self._next_stream
        self._next_stream += 2
        if self._next_stream >= 2**31:
            raise H2Error("UNAVAILABLE: out of stream ids")  # a new connection would do
        block = hpack.encode([*self._fixed, (":path", path), *self._after,
                              ("grpc-timeout", grpc_timeout), *self._metadata])  # fmt: skip
        step = self._peer_frame
        first, rest = block[:step], block[step:]
        self._out += _frame(_HEADERS, 0 if rest else _END_HEADERS, call.stream, first)
        while rest:
            piece, rest = rest[:step], rest[step:]
            self._out += _frame(_CONTINUATION, 0 if rest else _END_HEADERS, call.stream, piece)
        call.out = b"\x00" + len(body).to_bytes(4, "big") + body
        call.window = self._peer_initial
        self._active[call.stream] = call

    def _flush_data(self) -> None:
        """Sends what the flow-control windows allow of each open call's request."""
        for call in self._active.values():
            while not call.sent_end:
                n = min(len(call.out), call.window, self._peer_window, self._peer_frame)
                if n <= 0 and call.out:
                    break
                piece, call.out = call.out[:n], call.out[n:]
                end = not call.out
                self._out += _frame(_DATA, _END_STREAM if end else 0, call.stream, piece)
                call.window -= n
                self._peer_window -= n
                call.sent_end = end

    # -- reading ----------------------------------------------------------------------------

    def _read(self, until: float) -> None:
        """Reads and handles at least one frame."""
        assert self._sock is not None
        buf = self._buf
        handled = False
        while not handled:
            left = until - time.monotonic()
            if left <= 0:
                raise H2Error("timed out", timeout=True)
            self._sock.settimeout(left)
            chunk = self._sock.recv(262144)
            if not chunk:
                raise H2Error("UNAVAILABLE: connection closed by the server")
            buf += chunk
            pos = 0
            while len(buf) - pos >= 9:
                length = int.from_bytes(buf[pos : pos + 3], "big")
                if length > _MAX_FRAME:
                    raise H2Error(self._bad("a frame above the size allowed"))
                if len(buf) - pos - 9 < length:
                    break
                kind, flags = buf[pos + 3], buf[pos + 4]
                stream = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                payload = bytes(buf[pos + 9 : pos + 9 + length])
                pos += 9 + length
                self._frame(kind, flags, stream, payload)
                handled = True
            del buf[:pos]

    def _bad(self, what: str) -> str:
        return f"INTERNAL: malformed answer ({what})"

    def _frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if not self._settled and kind != _SETTINGS:
            raise H2Error(self._bad("not an HTTP/2 server: no SETTINGS first"))
        if self._continuing and kind != _CONTINUATION:
            raise H2Error(self._bad("a header block interrupted"))
        if kind == _DATA:
            self._data(flags, stream, payload)
        elif kind == _HEADERS:
            self._headers(flags, stream, payload)
        elif kind == _CONTINUATION:
            if not self._continuing or stream != self._continuing_stream:
                raise H2Error(self._bad("an unexpected CONTINUATION"))
            self._block += payload
            if len(self._block) > _MAX_HEADER_BLOCK:
                raise H2Error(self._bad("a header block too large"))
            if flags & _END_HEADERS:
                self._continuing = False
                self._header_block(stream, self._block_end)
        elif kind == _SETTINGS:
            self._settings(flags, stream, payload)
        elif kind == _WINDOW:
            self._window(stream, payload)
        elif kind == _RST:
            self._reset(stream, payload)
        elif kind == _PING:
            if len(payload) != 8 or stream:
                raise H2Error(self._bad("a bad PING"))
            if not flags & _ACK:
                self._out += _frame(_PING, _ACK, 0, payload)
        elif kind == _GOAWAY:
            if len(payload) < 8 or stream:
                raise H2Error(self._bad("a bad GOAWAY"))
            self._goaway = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        elif kind == _PUSH:
            raise H2Error(self._bad("a PUSH_PROMISE, push being disabled"))
        # other frame types (PRIORITY, extensions) are ignored, as RFC 9113 says

    _continuing = False
    _continuing_stream = 0
    _block = b""
    _block_end = False

    def _unpad(self, flags: int, payload: bytes, priority: bool = False) -> bytes:
        start = 0
        pad = 0
        if flags & _PADDED:
            if not payload:
                raise H2Error(self._bad("a padded frame without its padding length"))
            pad = payload[0]
            start = 1
        if priority and flags & _PRIORITY:
            start += 5
        if start + pad > len(payload):
            raise H2Error(self._bad("padding beyond the frame"))
        return payload[start : len(payload) - pad]

    def _data(self, flags: int, stream: int, payload: bytes) -> None:
        self._received += len(payload)
        if self._received > 2**30:  # keep the connection's window open
            self._out += _frame(_WINDOW, 0, 0, self._received.to_bytes(4, "big"))
            self._received = 0
        if stream == 0:
            raise H2Error(self._bad("DATA on stream 0"))
        call = self._active.get(stream)
        if call is None or call.done:
            return  # a stream already finished (reset): nothing to keep
        if call.headers is None or call.trailers is not None:
            raise H2Error(self._bad("DATA outside a response"))
        call.body += self._unpad(flags, payload)
        if len(call.body) > call.limit:
            raise H2Error(self._bad("an answer above the size allowed"))
        if flags & _END_STREAM:
            self._finish(call)

    def _headers(self, flags: int, stream: int, payload: bytes) -> None:
        if stream == 0:
            raise H2Error(self._bad("HEADERS on stream 0"))
        self._block = self._unpad(flags, payload, priority=True)
        self._block_end = bool(flags & _END_STREAM)
        if flags & _END_HEADERS:
            self._header_block(stream, self._block_end)
        else:
            self._continuing, self._continuing_stream = True, stream

    def _header_block(self, stream: int, end: bool) -> None:
        try:
            headers = self._decoder.decode(self._block)  # always: the table must follow
        except hpack.HpackError as e:
            raise H2Error(self._bad(f"HPACK: {e}")) from None
        self._block = b""
        call = self._active.get(stream)
        if call is None or call.done:
            return
        if call.headers is None:
            call.headers = headers
        elif call.trailers is None and end:
            call.trailers = headers
        else:
            raise H2Error(self._bad("headers after the trailers"))
        if end:
            self._finish(call)

    def _settings(self, flags: int, stream: int, payload: bytes) -> None:
        if stream:
            raise H2Error(self._bad("SETTINGS on a stream"))
        if flags & _ACK:
            return
        if len(payload) % 6:
            raise H2Error(self._bad("a SETTINGS frame of a bad length"))
        for i in range(0, len(payload), 6):
            ident = int.from_bytes(payload[i : i + 2], "big")
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if ident == 3:
                self._max_streams = max(1, min(value, 1000))
            elif ident == 4:
                if value > _WINDOW_MAX:
                    raise H2Error(self._bad("a window above 2^31-1"))
                for call in self._active.values():
                    call.window += value - self._peer_initial
                self._peer_initial = value
            elif ident == 5:
                if not 16384 <= value <= 2**24 - 1:
                    raise H2Error(self._bad("a bad frame size"))
                self._peer_frame = value
        self._settled = True
        self._out += _frame(_SETTINGS, _ACK, 0)

    def _window(self, stream: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise H2Error(self._bad("a bad WINDOW_UPDATE"))
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream == 0:
            self._peer_window += increment
            if self._peer_window > _WINDOW_MAX:
                raise H2Error(self._bad("a window above 2^31-1"))
        elif (call := self._active.get(stream)) is not None:
            call.window += increment

    def _reset(self, stream: int, payload: bytes) -> None:
        if len(payload) != 4 or stream == 0:
            raise H2Error(self._bad("a bad RST_STREAM"))
        call = self._active.get(stream)
        if call is None or call.done:
            return
        error = int.from_bytes(payload, "big")
        call.done = True
        if error == _REFUSED_STREAM and call.headers is None and call.refused < 3:
            call.refused += 1
            return  # asked again (reply None)
        call.reply = Reply(_UNAVAILABLE, f"stream reset by the server (HTTP/2 error {error})",
                           [])  # fmt: skip

    def _finish(self, call: _Call) -> None:
        """The gRPC status and messages of a call whose stream the server ended."""
        call.done = True
        headers = dict(reversed(call.headers or []))  # the first of each name
        status = headers.get(":status", "")
        if status != "200":
            code = _HTTP_CODES.get(int(status), _UNKNOWN) if status.isdigit() else _UNKNOWN
            call.reply = Reply(code, f"HTTP status {status or 'missing'}", [])
            return
        if not headers.get("content-type", "").startswith("application/grpc"):
            raise H2Error(self._bad("not a gRPC answer (content-type)"))
        final = dict(reversed(call.trailers)) if call.trailers is not None else headers
        text = final.get("grpc-status")
        if text is None or not text.isdigit() or len(text) > 3:
            raise H2Error(self._bad("no grpc-status"))
        messages = []
        body = call.body
        pos = 0
        while pos < len(body):
            if len(body) - pos < 5:
                raise H2Error(self._bad("a truncated message"))
            if body[pos]:
                raise H2Error(self._bad("a compressed message, none asked for"))
            n = int.from_bytes(body[pos + 1 : pos + 5], "big")
            if n > len(body) - pos - 5:
                raise H2Error(self._bad("a message beyond the answer"))
            messages.append(bytes(body[pos + 5 : pos + 5 + n]))
            pos += 5 + n
        call.body = bytearray()
        call.reply = Reply(int(text), _unpercent(final.get("grpc-message", "")), messages)
