"""The REAPI tier's own lookup client (store/remote/reapi_lookup.py, h2grpc.py) against a real
buildbox-casd, the grpcio client beside it, a TLS front and servers that answer garbage."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.remote import RemoteError, hpack

from .servers import Casd, casd, requires_casd, start_casd  # noqa: F401
from .test_remote import Machine, uncached, warnings
from .toolchain import requires_toolchain, stats

rpb = pytest.importorskip("store.remote.reapi_pb.remote_execution_pb2")


def _clients(url: str, **more: object) -> tuple[object, object]:
    from store.remote.reapi_grpc import Client
    from store.remote.reapi_lookup import Lookup

    settings = {"connect_timeout": 5, "timeout": 30, **more}
    return Lookup(url, **settings), Client(url, **settings)  # type: ignore[arg-type]


def _stored(url: str) -> tuple[tuple[str, int], list[tuple[str, int]], bytes]:
    """An ActionResult naming a stored blob under a random Action, the blob, and a digest
    the CAS never saw (casd answers NOT_FOUND for a result whose outputs it lacks)."""
    from store.remote.reapi_grpc import Client, digest_of

    client = Client(url, connect_timeout=5, timeout=30)
    try:
        blob = os.urandom(5000)
        action = digest_of(os.urandom(40))
        missing = digest_of(os.urandom(30))
        client.upload({digest_of(blob).hash: blob})
        result = rpb.ActionResult(exit_code=0, output_files=[
            rpb.OutputFile(path="outputs/0.o", digest=digest_of(blob))])  # fmt: skip
        client.update_action_results([(action, result)])
    finally:
        client.close()
    pair = [(digest_of(blob).hash, len(blob)), (missing.hash, missing.size_bytes)]
    return (action.hash, action.size_bytes), pair, blob


def _pd(d: tuple[str, int]) -> object:
    return rpb.Digest(hash=d[0], size_bytes=d[1])


@requires_casd
def test_the_same_answers_as_grpcio(casd: Casd) -> None:  # noqa: F811
    action, blobs, blob = _stored(casd.url)
    unknown = (os.urandom(32).hex(), 12)
    lean, grpcio = _clients(casd.url)
    try:
        ours = lean.get_action_results([action, unknown], inline=["outputs/0.o"])  # type: ignore[attr-defined]
        theirs = grpcio.get_action_results([_pd(action), _pd(unknown)], inline=["outputs/0.o"])  # type: ignore[attr-defined]
        assert ours[1] is None and theirs[1] is None
        assert ours[0] is not None and theirs[0] is not None
        assert [(f.path, f.digest, f.contents) for f in ours[0].output_files] == [
            (f.path, (f.digest.hash, f.digest.size_bytes), f.contents)
            for f in theirs[0].output_files]  # fmt: skip
        assert ours[0].exit_code == theirs[0].exit_code == 0
        asked = [*blobs, ("0" * 64, 0)]  # stored, never stored, empty (never asked)
        found = lean.read_blobs(asked)  # type: ignore[attr-defined]
        assert found == grpcio.read_blobs([_pd(d) for d in asked])  # type: ignore[attr-defined]
        assert found == {blobs[0][0]: blob, "0" * 64: b""}
        # one round each: the lookups (with GetCapabilities beside them), the blobs
        assert lean.round_trips == 2  # type: ignore[attr-defined]
    finally:
        lean.close()  # type: ignore[attr-defined]
        grpcio.close()  # type: ignore[attr-defined]


@requires_casd
def test_a_wrong_instance_name_is_the_same_error(casd: Casd) -> None:  # noqa: F811
    messages = []
    lean, grpcio = _clients(casd.url, instance_name="no-such-instance")
    for client, digest in ((lean, ("ab" * 32, 3)), (grpcio, _pd(("ab" * 32, 3)))):
        with pytest.raises(RemoteError) as e:
            client.get_action_results([digest])  # type: ignore[attr-defined]
        messages.append(str(e.value))
        client.close()  # type: ignore[attr-defined]
    assert messages[0] == messages[1]
    assert messages[0].startswith("GetActionResult: INVALID_ARGUMENT: "), messages


@requires_casd
def test_a_server_killed_between_rounds(tmp_path: Path) -> None:
    server = start_casd(tmp_path / "casd")
    try:
        action, blobs, _ = _stored(server.url)
        lean, grpcio = _clients(server.url)
        assert lean.get_action_results([action])[0] is not None  # type: ignore[attr-defined]
        assert grpcio.get_action_results([_pd(action)])[0] is not None  # type: ignore[attr-defined]
        server.kill()
        with pytest.raises(RemoteError) as ours:
            lean.read_blobs(blobs)  # type: ignore[attr-defined]
        with pytest.raises(RemoteError) as theirs:
            grpcio.read_blobs([_pd(d) for d in blobs])  # type: ignore[attr-defined]
        assert str(ours.value).startswith("BatchReadBlobs: UNAVAILABLE: ")
        assert str(theirs.value).startswith("BatchReadBlobs: UNAVAILABLE: ")
        with pytest.raises(RemoteError) as again:  # a new connection, refused
            lean.get_action_results([action])  # type: ignore[attr-defined]
        assert str(again.value).startswith("GetActionResult: UNAVAILABLE: cannot connect: ")
        lean.close()  # type: ignore[attr-defined]
        grpcio.close()  # type: ignore[attr-defined]
    finally:
        server.stop()


# -- a TLS front (grpcs://) ---------------------------------------------------------------


class _Accepting:
    """A test server's accept loop: each connection served by ``_serve`` in a thread of its
    own, until the listener is closed."""

    listener: socket.socket

    def _start(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError


class _TlsFront(_Accepting):
    """A TLS server on 127.0.0.1 (ALPN h2, a self-signed certificate) passing each
    connection's bytes to and from a Unix socket."""

    def __init__(self, dir: Path, backend: str) -> None:
        self.cert = dir / "cert.pem"
        key = dir / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-keyout", str(key), "-out", str(self.cert), "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)  # fmt: skip
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(self.cert, key)
        self.context.set_alpn_protocols(["h2"])
        self.backend = backend
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.negotiated: list[str | None] = []
        self._start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()
            return
        self.negotiated.append(tls.selected_alpn_protocol())
        back = socket.socket(socket.AF_UNIX)
        back.connect(self.backend)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=pump, args=(back, tls), daemon=True).start()
        pump(tls, back)

    def close(self) -> None:
        self.listener.close()


@requires_casd
@requires_toolchain
@pytest.mark.e2e
def test_grpcs_machine_b_hits_over_tls(tmp_path: Path, casd: Casd) -> None:  # noqa: F811
    front = _TlsFront(tmp_path, casd.url[5:])
    try:
        url = f"grpcs://127.0.0.1:{front.port}"
        env = {
            **os.environ,
            "SSL_CERT_FILE": str(front.cert),  # the lean lookups (ssl)
            "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(front.cert),
        }  # grpcio's writes
        a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
        done = a.link(url, env=env)
        assert warnings(done.stderr) == [] and a.compiled == 5, done.stderr
        done = b.link(url, env=env)
        assert warnings(done.stderr) == [], done.stderr
        assert b.compiled == 0 and "5 hits (5 from the remote)" in done.stderr
        assert b.output() == uncached(b.project)
        assert front.negotiated and set(front.negotiated) == {"h2"}
        # Without the certificate trusted: one warning, the link goes on.
        c = Machine(tmp_path, "c")
        done = c.link(url)
        found = warnings(done.stderr)
        assert len(found) == 1 and "GetActionResult: UNAVAILABLE: TLS: " in found[0], done.stderr
        assert c.compiled == 5
    finally:
        front.close()


# -- servers that answer garbage -----------------------------------------------------------


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


_SETTINGS = _frame(4, 0, 0)
_OK_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]


def _grpc(message: bytes, flag: int = 0) -> bytes:
    return bytes([flag]) + len(message).to_bytes(4, "big") + message


def _answer(stream: int, message: bytes, status: str = "0", flag: int = 0) -> bytes:
    return (_frame(1, 4, stream, hpack.encode(_OK_HEADERS))
            + _frame(0, 0, stream, _grpc(message, flag))
            + _frame(1, 5, stream, hpack.encode([("grpc-status", status)])))  # fmt: skip


def _result_message() -> bytes:
    result = rpb.ActionResult(output_files=[rpb.OutputFile(
        path="outputs/0.o", digest=rpb.Digest(hash="ab" * 32, size_bytes=1))])  # fmt: skip
    data: bytes = result.SerializeToString()
    return data


class _Fake(_Accepting):
    """A server on a Unix socket: reads the client's frames and, for each request it ends,
    sends ``answer(stream)``; ``preface`` is sent first on each connection."""

    def __init__(self, path: str, preface: bytes, answer: Callable[[int], bytes]) -> None:
        self.path, self.preface, self.answer = path, preface, answer
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(path)
        self.listener.listen(8)
        self._start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                if self.preface:
                    conn.sendall(self.preface)
                buf = b""
                while data := conn.recv(65536):
                    buf += data
                    if buf.startswith(b"PRI * HTTP/2.0"):
                        buf = buf[24:]
                    while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                        n = int.from_bytes(buf[:3], "big")
                        kind, flags = buf[3], buf[4]
                        stream = int.from_bytes(buf[5:9], "big")
                        buf = buf[9 + n :]
                        if kind == 0 and flags & 1:
                            conn.sendall(self.answer(stream))
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Callable[[bytes, Callable[[int], bytes]], str]]:
    servers: list[_Fake] = []
    short = Path(os.path.realpath("/tmp")) / f"fake-{os.getpid()}-{id(tmp_path)}"
    short.mkdir()

    def start(preface: bytes, answer: Callable[[int], bytes]) -> str:
        path = str(short / f"{len(servers)}.sock")
        servers.append(_Fake(path, preface, answer))
        return f"unix:{path}"

    yield start
    for server in servers:
        server.close()
    for p in short.iterdir():
        p.unlink()
    short.rmdir()


def _lookup(url: str) -> list[object]:
    from store.remote.reapi_lookup import Lookup

    lookup = Lookup(url, connect_timeout=5, timeout=30)
    try:
        found: list[object] = [*lookup.get_action_results([("ab" * 32, 10), ("cd" * 32, 20)])]
        return found
    finally:
        lookup.close()


_GARBAGE: dict[str, tuple[bytes, Callable[[int], bytes], str]] = {
    "an HTTP/1.1 server": (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
                           lambda s: b"", "frame above the size allowed"),
    "no SETTINGS first": (_frame(6, 0, 0, b"\0" * 8), lambda s: b"", "no SETTINGS first"),
    "a bad HPACK index": (_SETTINGS, lambda s: _frame(1, 5, s, b"\xff\x7f"), "HPACK"),
    "protobuf garbage": (_SETTINGS, lambda s: _answer(s, b"\x12\x7f\x00"), "beyond"),
    "a group field": (_SETTINGS, lambda s: _answer(s, b"\x13\x14"), "wire type"),
    "no grpc-status": (_SETTINGS, lambda s: _frame(1, 5, s, hpack.encode(_OK_HEADERS)),
                       "no grpc-status"),
    "not gRPC": (_SETTINGS, lambda s: _frame(1, 5, s, hpack.encode(
        [(":status", "200"), ("content-type", "text/html")])), "content-type"),
    "a compressed message": (_SETTINGS, lambda s: _answer(s, _result_message(), flag=1),
                             "compressed"),
    "a message cut short": (_SETTINGS, lambda s: _frame(1, 4, s, hpack.encode(_OK_HEADERS))
                            + _frame(0, 0, s, _grpc(b"abcdef")[:7])
                            + _frame(1, 5, s, hpack.encode([("grpc-status", "0")])), "beyond the answer"),
    "two messages": (_SETTINGS, lambda s: _frame(1, 4, s, hpack.encode(_OK_HEADERS))
                     + _frame(0, 0, s, _grpc(b"") + _grpc(b""))
                     + _frame(1, 5, s, hpack.encode([("grpc-status", "0")])), "2 messages"),
    "a frame too large": (_SETTINGS + _frame(0, 0, 1, b"x" * 20000), lambda s: b"",
                          "size allowed"),
    "a bad SETTINGS": (_frame(4, 0, 0, b"\0\3\0"), lambda s: b"", "SETTINGS"),
    "a push": (_SETTINGS, lambda s: _frame(5, 4, s, b"\0\0\0\2"), "PUSH_PROMISE"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(_GARBAGE))
def test_garbage_is_one_remote_error(
    case: str, fake: Callable[[bytes, Callable[[int], bytes]], str]
) -> None:
    preface, answer, why = _GARBAGE[case]
    url = fake(preface, answer)
    with pytest.raises(RemoteError) as e:
        _lookup(url)
    message = str(e.value)
    assert message.startswith("GetActionResult: ") and why in message, message
    assert "\n" not in message


def test_statuses_and_a_closed_connection(
    fake: Callable[[bytes, Callable[[int], bytes]], str],
) -> None:
    assert _lookup(fake(_SETTINGS, lambda s: _answer(s, b"", status="5"))) == [None, None]
    found = _lookup(fake(_SETTINGS, lambda s: _answer(s, _result_message())))
    assert [[f.path for f in r.output_files] for r in found] == [["outputs/0.o"]] * 2  # type: ignore[attr-defined]
    with pytest.raises(RemoteError) as e:
        _lookup(fake(_SETTINGS, lambda s: _answer(s, b"", status="7")))
    assert str(e.value) == "GetActionResult: PERMISSION_DENIED: "
    with pytest.raises(RemoteError) as e:
        _lookup(fake(_SETTINGS, lambda s: _frame(1, 5, s, hpack.encode([(":status", "503")]))))
    assert str(e.value) == "GetActionResult: UNAVAILABLE: HTTP status 503"
    refused = _frame(3, 0, 1, (7).to_bytes(4, "big"))  # REFUSED_STREAM: asked again, then fine
    found = _lookup(fake(_SETTINGS, lambda s: refused if s == 1 else _answer(s, b"", "5")))
    assert found == [None, None]
    with pytest.raises(RemoteError) as e:
        _lookup(fake(_SETTINGS, lambda s: _frame(7, 0, 0, b"\0" * 8)))  # GOAWAY, last stream 0
    assert "GOAWAY" in str(e.value)
    with pytest.raises(RemoteError) as e:  # the server reads, then hangs up

        def hang_up(stream: int) -> bytes:
            raise OSError("gone")

        _lookup(fake(_SETTINGS, hang_up))
    assert str(e.value) == "GetActionResult: UNAVAILABLE: connection closed by the server"


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_damaged_http2_answers_never_crash(
    fake: Callable[[bytes, Callable[[int], bytes]], str], data: st.DataObject
) -> None:
    """A good answer with bytes cut, flipped or inserted: a result or one RemoteError."""
    good = _answer(1, _result_message())
    i = data.draw(st.integers(0, len(good) - 1))
    how = data.draw(st.sampled_from(["flip", "insert", "cut"]))
    if how == "flip":
        bad = good[:i] + bytes([good[i] ^ data.draw(st.integers(1, 255))]) + good[i + 1 :]
    elif how == "insert":
        bad = good[:i] + data.draw(st.binary(min_size=1, max_size=8)) + good[i:]
    else:
        bad = good[:i]

    def answer(stream: int) -> bytes:
        if stream == 1:
            return bad
        return _answer(stream, b"", "5")

    url = fake(_SETTINGS, answer)
    from store.remote.reapi_lookup import Lookup

    lookup = Lookup(url, connect_timeout=5, timeout=5)
    try:
        found = lookup.get_action_results([("ab" * 32, 10), ("cd" * 32, 20)])
    except RemoteError as e:
        assert str(e).startswith("GetActionResult")
    else:
        assert len(found) == 2
    finally:
        lookup.close()


@requires_toolchain
@pytest.mark.e2e
def test_a_garbage_server_costs_one_warning_and_misses(
    tmp_path: Path, fake: Callable[[bytes, Callable[[int], bytes]], str]
) -> None:
    url = fake(_SETTINGS, lambda s: _answer(s, b"\x12\x7f\x00"))
    a = Machine(tmp_path, "a")
    done = a.link(url)
    found = warnings(done.stderr)
    assert len(found) == 1, done.stderr
    assert found[0].startswith(f"cached-dist: warning: remote {url}: GetActionResult: INTERNAL: "
                               "malformed answer (a length beyond the message)")  # fmt: skip
    assert a.compiled == 5 and stats(a.cache)["remote_errors"] == 1
    assert a.output() == uncached(a.project)


def test_a_write_without_grpcio_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening the tier and its lookups need no grpcio; a write says what is missing."""
    import sys

    from store.remote.reapi import ReapiStorage

    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc raises ImportError
    monkeypatch.delitem(sys.modules, "store.remote.reapi_grpc", raising=False)
    tier = ReapiStorage("unix:/nonexistent/casd.sock", connect_timeout=1, timeout=1)
    with pytest.raises(RemoteError) as e:
        tier.put_many([("k" * 32, b"value")])
    assert str(e.value) == "client library missing (grpc); install cached-dist[reapi]"
    tier.close()
