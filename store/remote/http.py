"""HTTP(S) servers as remote storage: GET, PUT and HEAD of one object per action key.

Objects live at ``<URL path>/<key[:2]>/<key>``, what a WebDAV server (nginx's dav module with
``create_full_put_path on``) stores as plain files. A batch of lookups is a set of concurrent
GETs on kept-alive connections, a few per thread, so it costs about one round trip. HTTP has
no atomic create-if-absent that servers agree on, so this backend offers no claims:
single-flight stays per machine. Nor does HTTP say how long an object may live: expiry by age
is the server's (docs/guide.md: a cron job that deletes files not read for a while).
"""

from __future__ import annotations

import base64
import http.client
import threading
from urllib.parse import unquote, urlsplit

from .urls import RemoteError, password, plain, redact

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

#: Concurrent requests per batch (each on its own kept-alive connection).
CONNECTIONS = 8


class HttpStorage:
    """Plain http.client connections, pooled, with a connect and an operation timeout."""

    claims = False

    def __init__(
        self, url: str, *, connect_timeout: float, timeout: float, expiry: float = 0
    ) -> None:
        self.url = redact(url)
        self.round_trips = 0
        self.requests = 0
        parts = urlsplit(url)
        if not parts.hostname:
            raise RemoteError("no host in the URL")
        self._https = parts.scheme.lower() == "https"
        try:
            self._port = parts.port or (443 if self._https else 80)
        except ValueError as e:
            raise RemoteError(str(e)) from None
        self._host = parts.hostname
        self._prefix = parts.path.rstrip("/")
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._headers: dict[str, str] = {}
        self._secret = password(unquote(parts.password) if parts.password else None) or ""
        if parts.username or self._secret:
            pair = f"{unquote(parts.username or '')}:{self._secret}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        self._pool: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    # -- connections ----------------------------------------------------------------------

    def _take(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._pool:
                return self._pool.pop()
        if self._https:
            import ssl

            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self._connect_timeout,
                context=ssl.create_default_context(),
            )  # fmt: skip
        return http.client.HTTPConnection(self._host, self._port, timeout=self._connect_timeout)

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._pool.append(conn)

    def _request(self, method: str, key: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = self._take()
        try:
            if conn.sock is None:
                conn.connect()  # under the connect timeout
                assert conn.sock is not None
                conn.sock.settimeout(self._timeout)
            conn.request(method, f"{self._prefix}/{key[:2]}/{key}", body, self._headers)
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise RemoteError(self._describe(e)) from None
        if response.will_close:
            conn.close()
        else:
            self._give_back(conn)
        return response.status, data

    def _describe(self, error: BaseException) -> str:
        if isinstance(error, TimeoutError):
            return f"timed out (after {self._timeout:g} s)"
        text = plain(error)
        return text.replace(self._secret, "***") if self._secret else text

    def _concurrently(self, count: int, work: Callable[[int], None]) -> None:
        """Runs work(0..count-1) on up to CONNECTIONS threads; re-raises the first error."""
        self.round_trips += 1
        self.requests += count
        errors: list[BaseException] = []

        def worker(first: int, step: int) -> None:
            for i in range(first, count, step):
                if errors:
                    return
                try:
                    work(i)
                except BaseException as e:
                    errors.append(e)
                    return

        threads = min(CONNECTIONS, count)
        if threads <= 1:
            worker(0, 1)
        else:
            started = [threading.Thread(target=worker, args=(t, threads), daemon=True)
                       for t in range(threads)]  # fmt: skip
            for t in started:
                t.start()
            for t in started:
                t.join()
        if errors:
            raise (
                errors[0]
                if isinstance(errors[0], RemoteError)
                else RemoteError(self._describe(errors[0]))
            )

    # -- operations -----------------------------------------------------------------------

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        values: list[bytes | None] = [None] * len(keys)

        def get(i: int) -> None:
            status, data = self._request("GET", keys[i])
            if status == 200:
                values[i] = data
            elif status not in (404, 410):
                raise RemoteError(f"GET answered HTTP {status}")

        if keys:
            self._concurrently(len(keys), get)
        return values

    def put_many(self, items: Sequence[tuple[str, bytes]], release: str | None = None) -> None:
        """Concurrent PUTs (no claims to release over HTTP)."""

        def put(i: int) -> None:
            key, value = items[i]
            status, _ = self._request("PUT", key, value)
            if status not in (200, 201, 204):
                raise RemoteError(f"PUT answered HTTP {status}")

        if items:
            self._concurrently(len(items), put)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()
