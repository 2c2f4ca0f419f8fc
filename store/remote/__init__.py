"""Remote storage for the store: byte values by action key on a server a team shares.

A backend is a tier of the storage protocol (store/tier.py): a small object speaking in
batches, so that a link pays one round trip for all of its lookups however many jobs it has.
Each also has ``url`` (redacted: safe to print). Transport problems raise :class:`RemoteError`
(whose message never contains credentials); absent values are ``None``, never errors. The
caller decides what a failure means (cached-dist: the remote is skipped for the rest of the
link). Backends are imported only when a URL of their scheme is opened, so a link that never
needs the remote imports no client library.

Values are opaque bytes here: a backend returns whatever the server holds under a key's name.
The caller decodes each with ``store.entry.decode(value, key)``, which refuses a value that
names another key (and any damaged one) before an output is written or promoted, so a server,
proxy or writer that mixes up names costs misses, never wrong outputs.
"""

from __future__ import annotations

from .urls import PASSWORD_ENV, RemoteError, password, plain, redact, scheme

__all__ = ["PASSWORD_ENV", "RemoteError", "check_url", "open_remote", "password", "plain",
           "redact", "scheme"]  # fmt: skip

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..tier import Tier


#: URL scheme -> "module:Class" of the backend.
SCHEMES = {
    "redis": "store.remote.redis:RedisStorage",
    "rediss": "store.remote.redis:RedisStorage",
    "http": "store.remote.http:HttpStorage",
    "https": "store.remote.http:HttpStorage",
    # REAPI v2 (store/remote/reapi.py): Bazel's --remote_cache URL forms
    "grpc": "store.remote.reapi:ReapiStorage",
    "grpcs": "store.remote.reapi:ReapiStorage",
    "unix": "store.remote.reapi:ReapiStorage",
}
#: The schemes of REAPI servers (which also take an instance name and headers).
REAPI_SCHEMES = ("grpc", "grpcs", "unix")


def check_url(url: str) -> str:
    """The URL if its scheme has a backend (each server's, for a sharded tier: URLs joined
    by '|', store/remote/shards.py); ValueError (with the URL redacted) otherwise."""
    if "|" in url:
        from .shards import parse

        for shard, _ in parse(url):
            check_url(shard)
        return url
    if scheme(url) not in SCHEMES:
        raise ValueError(
            f"not a remote storage URL: {redact(url)!r} (schemes: {', '.join(SCHEMES)})"
        )
    return url


def open_remote(url: str, *, connect_timeout: float, timeout: float, **settings: Any) -> Tier:
    """A backend for ``url``; RemoteError if its client library is missing. ``settings`` go
    to backends that take more (REAPI: instance_name, headers; Redis: expiry, the seconds a
    value lives unused, 0: forever)."""
    if "|" in url:
        from .shards import ShardedStorage, parse

        try:
            shards = parse(url)
        except ValueError as e:
            raise RemoteError(str(e)) from None
        backends = [open_remote(u, connect_timeout=connect_timeout, timeout=timeout,
                                **settings) for u, _ in shards]  # fmt: skip
        return ShardedStorage([u for u, _ in shards], backends, [w for _, w in shards])
    target = SCHEMES.get(scheme(url))
    if target is None:
        raise RemoteError(f"unsupported scheme in {redact(url)}")
    module_name, _, class_name = target.partition(":")
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise RemoteError(f"client library missing ({e.name}); install cached-dist[all]") from None
    cls = getattr(module, class_name)
    backend: Tier = cls(url, connect_timeout=connect_timeout, timeout=timeout, **settings)
    return backend
