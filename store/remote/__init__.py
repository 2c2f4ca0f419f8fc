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

import os

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
#: A password for URLs that carry none (kept out of command lines and config files).
PASSWORD_ENV = "CACHED_DIST_REMOTE_PASSWORD"


class RemoteError(Exception):
    """The remote cannot be used (unreachable, timed out, refused, full); message redacted."""


def scheme(url: str) -> str:
    if url[:5].lower() == "unix:":
        return "unix"  # unix:PATH, like Bazel's (and gRPC's) Unix socket targets
    return url.partition("://")[0].lower() if "://" in url else ""


def check_url(url: str) -> str:
    """The URL if its scheme has a backend; ValueError (with the URL redacted) otherwise."""
    if scheme(url) not in SCHEMES:
        raise ValueError(
            f"not a remote storage URL: {redact(url)!r} (schemes: {', '.join(SCHEMES)})"
        )
    return url


def redact(url: str) -> str:
    """The URL with any password replaced by ***, for messages."""
    head, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    hidden = f"{user}:***" if colon else ("***" if user and not host else user)
    return f"{head}://{hidden}@{host}{slash}{path}"


def password(url_password: str | None) -> str | None:
    """The URL's password, else the one from the environment (None when neither is set)."""
    return url_password or os.environ.get(PASSWORD_ENV) or None


def open_remote(url: str, *, connect_timeout: float, timeout: float, **settings: Any) -> Tier:
    """A backend for ``url``; RemoteError if its client library is missing. ``settings`` go
    to backends that take more (REAPI: instance_name, headers)."""
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
