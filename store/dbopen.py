"""Open a diskcache database, quarantining it when it is damaged so the store keeps working."""

from __future__ import annotations

import errno
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
    if not wrong_kind(directory):
        modes.makedirs(directory)
        try:
            cache = _open(directory, modes, settings)
            return cache, False
        except sqlite3.OperationalError:
            if not wrong_kind(directory):
                raise  # read-only, locked, full: not damage, the caller degrades
        except sqlite3.DatabaseError:
            pass
    quarantine(directory)
    modes.makedirs(directory)
    return _open(directory, modes, settings), True


def _open(directory: str, modes: Modes, settings: dict[str, Any]) -> diskcache.Cache:
    import diskcache  # here, not at the top: a cached link reads through index.RowReader

    db = os.path.join(directory, "cache.db")
    # Made in the store's mode (sqlite gives its -wal and -shm files the same, made inside
    # the store's umask: diskcache's open runs statements), and never opened through a
    # symbolic link (sqlite would follow one, out of the cache).
    modes.create_empty(db)
    with modes.umask():
        cache = diskcache.Cache(directory, timeout=BUSY_TIMEOUT, disk=confined_disk(),
                                **{**INLINE, **settings})  # fmt: skip
        try:
            # diskcache's open only touches the schema; make sqlite read a data page as well.
            cache._sql(PROBE_SQL).fetchall()
        except BaseException:
            cache.close()
            raise
    return cache


#: Every value stays in its row: diskcache would write a large one to a file of its own,
#: in a directory it makes, both with the umask's mode.
INLINE = {"disk_min_file_size": 1 << 62}

_confined: type[diskcache.Disk] | None = None


def confined_disk() -> type[diskcache.Disk]:
    """diskcache's Disk, reading and removing only what the store writes. Every member of a
    group-shared cache can write its database: a row whose value or key is a pickle would
    run code when read, and a row's file name leads wherever it says (an absolute one, or
    ../) when its value is read or the row removed. So only values stored in their rows are
    read (any other reads as absent), keys that are not strings as a value no caller takes,
    and only a file name of diskcache's own form is removed (from caches made before every
    value was kept in its row), inside the index's directory."""
    global _confined
    if _confined is not None:
        return _confined
    import re

    import diskcache
    from diskcache.core import MODE_RAW

    from .fsutil import open_dir

    own_name = re.compile(r"[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{28}\.val\Z")

    class Confined(diskcache.Disk):  # type: ignore[misc]
        def get(self, key: Any, raw: bool) -> Any:
            return super().get(key, raw) if raw else Confined  # never a str: ignored

        def fetch(self, mode: int, filename: str | None, value: Any, read: bool) -> Any:
            if mode != MODE_RAW or read:
                raise OSError("a value outside its row")  # diskcache: absent
            return super().fetch(mode, filename, value, read)

        def remove(self, file_path: str) -> None:
            if not isinstance(file_path, str) or not own_name.match(file_path):
                return
            top, middle, name = file_path.split("/")
            try:
                fd = open_dir(os.path.join(self._directory, top))
            except OSError:
                return
            try:
                inner = open_dir(middle, dir_fd=fd)
                try:
                    os.unlink(name, dir_fd=inner)
                finally:
                    os.close(inner)
            except OSError:
                pass
            finally:
                os.close(fd)

    _confined = Confined
    return Confined


def wrong_kind(directory: str, db_name: str = "cache.db") -> bool:
    """Whether a database's place holds something sqlite can never open: ``directory`` is
    not a directory, or the database or its -wal or -shm file is a directory, a FIFO, ...
    sqlite reports that as an I/O error, not as damage. (A symbolic link is not this kind of
    damage: the store refuses to open through one, see fsutil.own_file, and verify removes
    it.)"""
    import stat

    try:
        if not stat.S_ISDIR(os.stat(directory).st_mode):
            return True
    except OSError:
        return False
    for suffix in ("", "-wal", "-shm"):
        try:
            mode = os.lstat(os.path.join(directory, db_name + suffix)).st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode) and not stat.S_ISLNK(mode):
            return True
    return False


def quarantine(
    directory: str, db_name: str = "cache.db", seen: os.stat_result | None = None
) -> str | None:
    """Move a damaged database directory aside (kept for inspection, out of every reader's way);
    returns where it went, None if it was not moved.

    `seen` is the database file the caller found damaged; if another process already replaced
    it, the fresh one is left alone.
    """
    db = os.path.join(directory, db_name)
    try:
        current = os.stat(db)
    except FileNotFoundError:
        if not os.path.lexists(directory) or os.path.isdir(directory):
            return None
        current = None  # a file where the directory belongs: moved aside too
    except NotADirectoryError:
        current = None
    if (
        seen is not None
        and current is not None
        and (current.st_ino, current.st_dev) != (seen.st_ino, seen.st_dev)
    ):
        return None
    aside = f"{directory}.damaged-{int(time.time())}-{os.getpid()}"
    for n in range(1, 100):
        try:
            os.rename(directory, aside)
            return aside
        except FileNotFoundError:
            return None
        except OSError as error:  # one moved aside in this second already
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                raise
            aside = f"{directory}.damaged-{int(time.time())}-{os.getpid()}-{n}"
    return None


def db_stat(directory: str) -> os.stat_result | None:
    """Identity of the database file, so a later quarantine can check it is still the same one."""
    try:
        return os.stat(os.path.join(directory, "cache.db"))
    except OSError:
        return None


def checkpoint(db: str, timeout: float = 2.0) -> bool:
    """Copies a WAL database's log into it and truncates the log to zero bytes (sqlite's
    ``wal_checkpoint(TRUNCATE)``): the log otherwise keeps the largest size it ever had,
    which on a small file system can be most of it. False when it could not (readers
    active past ``timeout``, no room to grow the database, not a database)."""
    import stat

    try:
        if not stat.S_ISREG(os.lstat(db).st_mode):
            return False
    except OSError:
        return False
    try:
        con = sqlite3.connect(db, timeout=timeout, isolation_level=None)
    except sqlite3.Error:
        return False
    try:
        row = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return row is not None and row[0] == 0
    except sqlite3.Error:
        return False
    finally:
        con.close()
