"""Redis (and Valkey) as remote storage, with claims for cross-machine single-flight.

Values live at ``cached-dist:v1:<key>``, without expiry by default: eviction is the server's
business (``maxmemory-policy allkeys-lru``). With ``expiry`` (``--remote-expiry``) each value
is stored with that time to live (``SET ... PX``), and a lookup refreshes it on each value it
finds (``GETEX ... PX`` in place of MGET, pipelined: still one round trip), so values not used
for that long go. A claim is ``cached-dist:claim:<key>`` holding a random
token with a lease (``SET NX PX``); its holder renews it while compiling and deletes it when the
value is stored. A holder that dies stops renewing, so its claim expires and another machine
takes the key over. Every batch is one pipeline: one round trip, whatever its size.

The lookup (MGET) goes over a minimal RESP exchange (resp.py): a link served from the remote
then never imports the redis package, whose import alone costs more than the link. Claims and
uploads use the redis package, imported when first needed (the link compiles then anyway).
"""

from __future__ import annotations

import contextlib
import threading
from urllib.parse import unquote, urlsplit

from .urls import RemoteError, password, plain, redact

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    import redis

    from .resp import Connection

VALUE = "cached-dist:v1:"
CLAIM = "cached-dist:claim:"
# 1: claimed; 2: the value exists already (read it); 0: another machine holds the claim.
# ARGV[3] == '1': the caller found the value damaged, so its existence does not count.
_CLAIM = """
if ARGV[3] ~= '1' and redis.call('exists', KEYS[2]) == 1 then return 2 end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class RedisStorage:
    """Pooled connections (the uploader and the lease renewer run beside the link), no
    retries (a failure is final for the link), every operation bounded by timeouts."""

    claims = True

    def __init__(
        self, url: str, *, connect_timeout: float, timeout: float, expiry: float = 0
    ) -> None:
        self.url = redact(url)
        self.round_trips = 0
        self._expiry_ms = max(0, round(expiry * 1000))
        self._full_url = url
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        parts = urlsplit(url)
        try:
            self._host = parts.hostname or "localhost"
            self._port = parts.port or 6379
            path = parts.path.strip("/")
            self._db = int(path) if path else 0
        except ValueError as e:
            raise RemoteError(f"bad URL: {e}") from None
        self._tls = parts.scheme.lower() == "rediss"
        self._user = unquote(parts.username) if parts.username else None
        self._secret = password(unquote(parts.password) if parts.password else None) or ""
        self._resp: Connection | None = None
        self._client: redis.Redis | None = None
        self._lock = threading.Lock()

    def _describe(self, error: BaseException) -> str:
        if isinstance(error, TimeoutError) or type(error).__name__ == "TimeoutError":
            text = f"timed out (after {self._timeout:g} s)"
        else:
            text = plain(error)
        return text.replace(self._secret, "***") if self._secret else text

    # -- the hot lookup, over resp.py -------------------------------------------------------

    def _call(self, commands: list[list[bytes | str | int]]) -> list[object]:
        from .resp import Connection, ReplyError

        self.round_trips += 1
        try:
            prelude: list[list[bytes | str | int]] = []
            if self._resp is None:
                if self._secret:
                    user = [self._user] if self._user else []
                    prelude.append(["AUTH", *user, self._secret])
                if self._db:
                    prelude.append(["SELECT", self._db])
                self._resp = Connection(
                    self._host, self._port, tls=self._tls,
                    connect_timeout=self._connect_timeout, timeout=self._timeout,
                )  # fmt: skip
            replies = self._resp.call_many(prelude + commands)
        except (OSError, ValueError) as e:
            self._drop_resp()
            raise RemoteError(self._describe(e)) from None
        for reply in replies:
            if isinstance(reply, ReplyError):
                self._drop_resp()
                raise RemoteError(self._describe(reply))
        return replies[len(prelude) :]

    def _drop_resp(self) -> None:
        if self._resp is not None:
            self._resp.close()
            self._resp = None

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        if self._expiry_ms:  # each found value's time to live starts again
            ttl = self._expiry_ms
            values = self._call([["GETEX", VALUE + k, "PX", ttl] for k in keys])
        else:
            (values,) = self._call([["MGET", *(VALUE + k for k in keys)]])  # type: ignore[assignment]
        if not isinstance(values, list) or len(values) != len(keys):
            raise RemoteError("MGET: unexpected reply")
        return [v if isinstance(v, bytes) else None for v in values]

    # -- claims and uploads, over the redis package ----------------------------------------

    def _pipeline(self) -> redis.client.Pipeline:
        with self._lock:  # one client for every thread: a second one, dropped, would close
            return self._client_locked().pipeline(transaction=False)  # the first's sockets

    def _client_locked(self) -> redis.Redis:
        if self._client is None:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            extra = {"password": self._secret} if self._secret else {}
            try:
                self._client = redis.Redis.from_url(
                    self._full_url, socket_connect_timeout=self._connect_timeout,
                    socket_timeout=self._timeout, retry=Retry(NoBackoff(), 0),
                    retry_on_timeout=False, **extra,
                )  # fmt: skip
            except (ValueError, redis.RedisError) as e:
                raise RemoteError(self._describe(e)) from None
        return self._client

    def _run(self, pipe: redis.client.Pipeline) -> list[object]:
        import redis

        self.round_trips += 1
        try:
            results: list[object] = pipe.execute(raise_on_error=False)
        except (redis.RedisError, OSError, ValueError) as e:
            raise RemoteError(self._describe(e)) from None
        return results

    def _check(self, results: list[object]) -> None:
        for result in results:
            if isinstance(result, Exception):
                raise RemoteError(self._describe(result))

    def put_many(self, items: Sequence[tuple[str, bytes]], release: str | None = None) -> None:
        """Stores the values, then gives up the claims ``release`` (a token) holds on their
        keys, all in one trip (each release goes through even if its SET was refused)."""
        if not items:
            return
        pipe = self._pipeline()
        for key, value in items:
            pipe.set(VALUE + key, value, px=self._expiry_ms or None)
            if release is not None:
                pipe.eval(_RELEASE, 1, CLAIM + key, release)
        self._check(self._run(pipe))

    def claim_many(
        self, keys: Sequence[str], token: str, lease_ms: int, contested: Collection[str] = ()
    ) -> list[bool]:
        """For each key: True if claimed; False if another machine holds it or its value
        appeared meanwhile (the caller polls get_many for those). A key in ``contested`` has
        a value the caller could not use (damaged): it is claimed as if it had none."""
        if not keys:
            return []
        pipe = self._pipeline()
        for k in keys:
            pipe.eval(_CLAIM, 2, CLAIM + k, VALUE + k, token, lease_ms, int(k in contested))
        results = self._run(pipe)
        self._check(results)
        return [r == 1 for r in results]

    def renew(self, keys: Sequence[str], token: str, lease_ms: int) -> None:
        if keys:
            pipe = self._pipeline()
            for k in keys:
                pipe.eval(_RENEW, 1, CLAIM + k, token, lease_ms)
            self._check(self._run(pipe))

    def release(self, keys: Sequence[str], token: str) -> None:
        if keys:
            pipe = self._pipeline()
            for k in keys:
                pipe.eval(_RELEASE, 1, CLAIM + k, token)
            self._check(self._run(pipe))

    def close(self) -> None:
        self._drop_resp()
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
