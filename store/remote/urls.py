"""What every remote backend and the sharded tier share: the error they raise and the URL
words (scheme, redaction, password); apart from the package's ``__init__``, which opens
backends, so that a backend and the sharded tier import it without a cycle."""

from __future__ import annotations

import os

#: A password for URLs that carry none (kept out of command lines and config files).
PASSWORD_ENV = "CACHED_DIST_REMOTE_PASSWORD"


class RemoteError(Exception):
    """The remote cannot be used (unreachable, timed out, refused, full); message redacted."""


def plain(error: BaseException) -> str:
    """An error as a user reads it in a warning: the system's words for an OSError
    (``Connection refused``), a client library's own message otherwise; the exception's
    class only when it says nothing else."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error).strip() or type(error).__name__


def scheme(url: str) -> str:
    if url[:5].lower() == "unix:":
        return "unix"  # unix:PATH, like Bazel's (and gRPC's) Unix socket targets
    return url.partition("://")[0].lower() if "://" in url else ""


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
