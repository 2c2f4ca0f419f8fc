"""Open a diskcache database, quarantining it when it is damaged so the store keeps working."""

from __future__ import annotations

import os
import time

from .sql import sqlite3

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import diskcache

    from .fsutil import Modes

#: Makes sqlite read a data page, not only the schema, so a damaged database shows at open.
PROBE_SQL = "SELECT rowid FROM Cache ORDER BY rowid DESC LIMIT 1"

#: sqlite busy timeout: writers queue this long for each other, then the operation is a miss.
BUSY_TIMEOUT = 10.0


def open_cache(directory: str, modes: Modes, **settings: Any) -> tuple[diskcache.Cache, bool]:
    """Return (cache, rebuilt). A database sqlite cannot read is moved aside and replaced by an
    empty one: the index is a cache, losing it costs misses, never wrong bytes.
    """
    modes.makedirs(directory)
    try:
        cache = _open(directory, modes, settings)
        return cache, False
    except sqlite3.OperationalError:
        raise  # read-only, locked, full: not damage, the caller degrades
    except sqlite3.DatabaseError:
        pass
    quarantine(directory)
    modes.makedirs(directory)
    return _open(directory, modes, settings), True


def _open(directory: str, modes: Modes, settings: dict[str, Any]) -> diskcache.Cache:
    import diskcache  # here, not at the top: a cached link reads through index.RowReader

    db = os.path.join(directory, "cache.db")
    if not os.path.exists(db):
        # Create it with the store's mode: sqlite gives its -wal and -shm files the same mode.
        try:
            os.close(os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, modes.file))
        except FileExistsError:
            pass
    cache = diskcache.Cache(directory, timeout=BUSY_TIMEOUT, **settings)
    try:
        # diskcache's open only touches the schema; make sqlite read a data page as well.
        cache._sql(PROBE_SQL).fetchall()
    except BaseException:
        cache.close()
        raise
    for suffix in ("", "-wal", "-shm"):
        modes.fix_path(db + suffix)
    return cache


def quarantine(
    directory: str, db_name: str = "cache.db", seen: os.stat_result | None = None
) -> None:
    """Move a damaged database directory aside (kept for inspection, out of every reader's way).

    `seen` is the database file the caller found damaged; if another process already replaced
    it, the fresh one is left alone.
    """
    db = os.path.join(directory, db_name)
    try:
        current = os.stat(db)
    except FileNotFoundError:
        return
    if seen is not None and (current.st_ino, current.st_dev) != (seen.st_ino, seen.st_dev):
        return
    aside = f"{directory}.damaged-{int(time.time())}-{os.getpid()}"
    try:
        os.rename(directory, aside)
    except FileNotFoundError:
        pass


def db_stat(directory: str) -> os.stat_result | None:
    """Identity of the database file, so a later quarantine can check it is still the same one."""
    try:
        return os.stat(os.path.join(directory, "cache.db"))
    except OSError:
        return None
