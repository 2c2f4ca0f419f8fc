"""sqlite3 for the hot path: its C module ``_sqlite3`` where the interpreter has one.

``import sqlite3`` costs ~2 ms of a cached link that spends ~30 ms of its own: its
``dbapi2`` imports ``datetime`` to register adapters this store never uses. The classes and
``connect`` are the very same objects, so an error raised through either is caught by both.
"""

try:
    import _sqlite3 as sqlite3
except ImportError:  # pragma: no cover - an interpreter that only ships the package
    import sqlite3  # type: ignore[no-redef]

__all__ = ["sqlite3"]
