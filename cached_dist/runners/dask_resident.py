"""A resident Dask client: distributed imported and connected once, for the links that follow.

A link that compiles on Dask in-process spends ~0.5-0.7 s before its first task can start
(importing distributed, connecting, listing the workers): 13-20% of a cold lua or leveldb link
on our 2-core machine. So the first link that reaches a scheduler starts a resident client in
the background (:mod:`.dask_service`, detached), and the links after it hand it their jobs
over a Unix socket: they send the shipment (the specs, each distinct input once) and get each
job's outcome back as it ends, exactly as :func:`.dask.dispatch` yields it in-process.

There is one per user, scheduler address, version of this code and set of ``DASK_*``
environment variables (the socket's name says which), in a directory only the user can
enter; it serves concurrent links, a thread each. This module is the link's side and the
wire format; a link that finds no resident client answering within HELLO_TIMEOUT works
in-process, and one whose resident client stops mid-link compiles the rest locally
(:class:`ResidentLost`).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import stat
import struct
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from .shipment import Shipment

PROTOCOL = 1
#: A resident client that does not greet a link within this many seconds is not used.
HELLO_TIMEOUT = 1.0
#: How long past the link's --dask-timeout it waits for the last outcomes before giving up.
GRACE = 5.0
_HEADER = struct.Struct("!Q")


class ResidentLost(Exception):
    """The resident client stopped answering mid-link (killed, crashed, or hung)."""


def socket_path(address: str) -> str | None:
    """Where the resident client for ``address`` listens, or None when there is no private
    directory to put it in (then every link works in-process)."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(base):
        directory = os.path.join(base, "cached-dist")
    else:
        directory = f"/tmp/cached-dist-{os.geteuid()}"
    with contextlib.suppress(FileExistsError, OSError):
        os.mkdir(directory, 0o700)
    try:
        st = os.lstat(directory)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None  # someone else's, or open to others: never trust what listens there
    import xxhash

    from .. import __version__

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        code = [str(os.stat(os.path.join(here, name)).st_mtime_ns)
                for name in ("dask.py", "dask_resident.py", "dask_service.py")]  # fmt: skip
    except OSError:
        return None
    # Dask's own settings from the environment (TLS credentials, timeouts) are the first
    # link's in a resident client: links with other ones use another.
    dask_env = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("DASK_"))
    stamp = "\0".join([address, str(PROTOCOL), __version__, *code, *dask_env])
    name = xxhash.xxh3_64_hexdigest(stamp.encode("utf-8", "surrogateescape"))
    path = os.path.join(directory, f"dask-{name}.sock")
    return path if len(path.encode()) < 100 else None  # sun_path holds 108 bytes


def send(sock: socket.socket, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)))
    sock.sendall(data)


def receive(sock: socket.socket) -> Any:
    (size,) = _HEADER.unpack(_read(sock, _HEADER.size))
    return pickle.loads(_read(sock, size))


def _read(sock: socket.socket, size: int) -> bytearray:
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the connection was closed")
        got += n
    return data


class Resident:
    """A link's connection to the resident client (process ``pid``)."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.sock = sock
        self.pid = pid

    def run(
        self, shipment: Shipment, timeout: float, deadline: float, detail: Callable[[str], None]
    ) -> Iterator[tuple[int, dict[str, Any] | str]]:
        """Has the resident client dispatch ``shipment``; yields (job index, outcome) as
        :func:`.dask.dispatch` does. ResidentLost if it stops answering."""
        try:
            send(self.sock, {"protocol": PROTOCOL, "contents": shipment.contents,
                             "specs": shipment.specs, "timeout": timeout,
                             "left": deadline - time.monotonic()})  # fmt: skip
            while True:
                self.sock.settimeout(max(0.1, deadline + GRACE - time.monotonic()))
                message = receive(self.sock)
                if message[0] == "end":
                    return
                if message[0] == "detail":
                    detail(str(message[1]))
                    continue
                _, index, outcome = message
                yield index, outcome
        except (OSError, EOFError, pickle.UnpicklingError, struct.error, ValueError,
                IndexError, TypeError) as e:  # fmt: skip
            raise ResidentLost(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__) from None

    def close(self) -> None:
        self.sock.close()


def connect(address: str) -> Resident | None:
    """The resident client for ``address``, if one is there and greets within HELLO_TIMEOUT."""
    path = socket_path(address)
    if path is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(HELLO_TIMEOUT)
    try:
        sock.connect(path)
        hello = receive(sock)
    except (OSError, EOFError, pickle.UnpicklingError, struct.error, ValueError):
        sock.close()  # none there, or one left by a killed process: work in-process
        return None
    if not (isinstance(hello, tuple) and len(hello) == 3 and hello[0] == "hello"
            and hello[2] == PROTOCOL):  # fmt: skip
        sock.close()
        return None
    return Resident(sock, int(hello[1]))


def start(address: str, idle: float) -> None:
    """Starts a resident client for ``address`` that exits after ``idle`` seconds without a
    link, in the background (best effort: at worst the next link works in-process again)."""
    path = socket_path(address)
    if path is None:
        return
    from procs.detached import spawn

    with contextlib.suppress(OSError):
        spawn("cached_dist.runners.dask_service", [address, path, repr(idle)])
