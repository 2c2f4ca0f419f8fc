"""The resident Dask client's process: ``python -P -m cached_dist.runners.dask_service
ADDRESS SOCKET IDLE`` (started by :func:`.dask_resident.start`, detached).

It takes ``SOCKET.lock`` (another holder means another resident client: this one exits),
connects to the scheduler once, and serves each link that connects to ``SOCKET`` in a thread:
greet, read the shipment, run :func:`.dask.dispatch`, send each outcome as it comes. A link
that goes away mid-batch has its tasks cancelled. It exits after IDLE seconds without a
link (``--dask-resident-idle`` of the link that started it), or when its scheduler has been
gone for LOST_EXIT seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
import threading
import time

from .dask import dispatch, open_client
from .dask_resident import PROTOCOL, receive, send
from .shipment import Shipment

TYPE_CHECKING = False
if TYPE_CHECKING:
    from distributed import Client

LOST_EXIT = 10.0
_REQUEST_TIMEOUT = 60.0  # a link that greets and sends nothing is dropped after this


class _Links:
    """How many links are being served, and since when none has been."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.idle_since = time.monotonic()

    def begin(self) -> None:
        with self.lock:
            self.active += 1

    def end(self) -> None:
        with self.lock:
            self.active -= 1
            self.idle_since = time.monotonic()

    def idle_for(self) -> float:
        with self.lock:
            return 0.0 if self.active else time.monotonic() - self.idle_since


def serve(conn: socket.socket, client: Client, links: _Links) -> None:
    """One link: its shipment in, each job's outcome out as it ends."""
    try:
        conn.settimeout(_REQUEST_TIMEOUT)
        send(conn, ("hello", os.getpid(), PROTOCOL))
        request = receive(conn)
        if not isinstance(request, dict) or request.get("protocol") != PROTOCOL:
            return
        shipment = Shipment()
        shipment.contents = request["contents"]
        shipment.specs = request["specs"]
        deadline = time.monotonic() + float(request["left"])
        conn.settimeout(None)  # the link bounds the batch; a send to a dead link fails at once

        def detail(text: str) -> None:
            send(conn, ("detail", text))

        events = dispatch(client, shipment, float(request["timeout"]), deadline, detail)
        try:
            for index, outcome in events:
                send(conn, ("job", index, outcome))
            send(conn, ("end",))
        finally:
            events.close()  # a link gone mid-batch: its tasks are cancelled
    except Exception:  # this link's problem: the link reports it, the others go on
        pass
    finally:
        conn.close()
        links.end()


def main(argv: list[str]) -> int:
    address, path, idle_text = argv
    idle = float(idle_text)
    os.chdir("/")  # never keep the first link's directory busy (an unmount, a removal)
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another resident client serves this address
    client, _ = open_client(address)
    if client is None:
        return 1
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # left by a killed one
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    server.settimeout(1.0)
    links = _Links()
    lost_since: float | None = None
    try:
        while True:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                now = time.monotonic()
                if links.idle_for() > idle:
                    return 0
                if client.status == "running":
                    lost_since = None
                elif lost_since is None:
                    lost_since = now
                elif now - lost_since > LOST_EXIT:
                    return 0
                continue
            links.begin()
            threading.Thread(target=serve, args=(conn, client, links), daemon=True).start()
    finally:
        for leftover in (path, path + ".lock"):  # while the lock is still held
            with contextlib.suppress(OSError):
                os.unlink(leftover)
        server.close()
        with contextlib.suppress(Exception):
            client.close(timeout=2)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
