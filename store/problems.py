"""Report each kind of store problem once, then stay quiet: a link must not drown in warnings."""

from __future__ import annotations

import errno
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    Warn = Callable[[str], None]


def default_warn(message: str) -> None:
    """Write to stderr, the only channel a linker wrapper reliably shows."""
    # A closed or broken stderr must not break the link either.
    try:
        sys.stderr.write(f"store: warning: {message}\n")
    except (OSError, ValueError):
        pass


def classify(error: BaseException) -> str:
    """Name the kind of an error, so repeats of the same problem share one warning."""
    if isinstance(error, OSError):
        if error.errno == errno.EROFS:
            return "read-only"
        if error.errno in (errno.EACCES, errno.EPERM):
            return "permission"
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return "disk-full"
        return "io"
    from .sql import sqlite3  # only now: a link that reads no database never imports it

    if isinstance(error, sqlite3.OperationalError):
        text = str(error).lower()
        if "readonly" in text or "read-only" in text:
            return "read-only"
        if "full" in text:
            return "disk-full"
        if "locked" in text or "busy" in text:
            return "busy"
        return "index-io"
    if isinstance(error, sqlite3.DatabaseError):
        return "index-damaged"
    if type(error).__module__.startswith("diskcache"):
        return "busy"  # diskcache.Timeout: the database stayed locked past the busy timeout
    return "internal"


class Problems:
    """Remembers which problem kinds were already reported to the user."""

    def __init__(self, warn: Warn | None) -> None:
        self._warn: Warn = warn if warn is not None else default_warn
        self._seen: set[str] = set()

    def report(self, kind: str, message: str) -> None:
        """Call the warn hook the first time `kind` shows up; never raise."""
        if kind in self._seen:
            return
        self._seen.add(kind)
        # A faulty hook must not turn a warning into a failed link.
        try:
            self._warn(message)
        except Exception:
            pass

    def error(self, what: str, error: BaseException) -> str:
        """Report an exception caught while doing `what`; return its kind."""
        kind = classify(error)
        self.report(kind, f"{what}: {describe(error, kind)}; continuing without it")
        return kind


def describe(error: BaseException, kind: str) -> str:
    """The error as a user reads it: the system's words and the file for an OSError
    (``No space left on device: /c/tmp/x``), sqlite's message for the databases; the
    exception's class too only where it is a bug (kind ``internal``), for its report."""
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    if kind == "internal" or not str(error):
        return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return str(error)
