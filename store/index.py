"""The action index: action key -> manifest, plus the small string memo, in one diskcache.

Every row is also kept as a file (store/rows.py), read first: a link whose rows are all there
never imports sqlite. The database is opened when a row is not (a miss, or a row stored
before the files existed, which is then copied to its file) and for every write.
"""

from __future__ import annotations

import os
import stat
import time

from .fsutil import not_ours
from .rows import Rows

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any, TypeVar

    import diskcache

    from .fsutil import Modes

    T = TypeVar("T")
_ENTRY = "a:"
_MEMO = "m:"
_PACK = "p:"  # packs (store/pack.py): row files only, never in the database

#: diskcache's mode for a value stored inline in its row (diskcache.core.MODE_RAW; a str of
#: under min_file_size is kept so). Stable since diskcache 1.0; pyproject pins it below 6.
_MODE_RAW = 1
_FALLBACK = object()  # a row the direct reader does not interpret: ask diskcache
_BATCH = 900  # keys per query: below sqlite's oldest limit on bound parameters (999)


class RowReader:
    """Reads rows straight from diskcache's ``Cache`` table, for the hot path only.

    A cached link only reads the index, but ``import diskcache`` costs ~8 ms and opening a
    ``diskcache.Cache`` rewrites every settings row (~5 ms), a third of a cached link's own
    time. Rows this reader does not interpret, and every sqlite error, go to diskcache.
    """

    _SQL = (
        "SELECT mode, value FROM Cache WHERE key = ? AND raw = 1"
        " AND (expire_time IS NULL OR expire_time > ?)"
    )
    _SQL_MANY = (
        "SELECT key, mode, value FROM Cache WHERE key IN ({}) AND raw = 1"
        " AND (expire_time IS NULL OR expire_time > ?)"
    )

    def __init__(self, db: str, timeout: float) -> None:
        from .dbopen import PROBE_SQL
        from .sql import sqlite3

        self.con = sqlite3.connect(db, timeout=timeout, isolation_level=None)
        try:
            columns = {row[1] for row in self.con.execute("PRAGMA table_info(Cache)")}
            if not {"key", "raw", "expire_time", "mode", "value"} <= columns:
                raise sqlite3.DatabaseError("not a diskcache database of the known layout")
            self.con.execute(PROBE_SQL).fetchall()  # as dbopen._open: damage shows up now
        except BaseException:
            self.con.close()
            raise

    def get(self, full_key: str) -> object:
        """The str value, None when absent, or _FALLBACK."""
        row = self.con.execute(self._SQL, (full_key, time.time())).fetchone()
        if row is None:
            return None
        mode, value = row
        return value if mode == _MODE_RAW and isinstance(value, str) else _FALLBACK

    def get_many(self, full_keys: Sequence[str]) -> dict[str, object]:
        """:meth:`get` for many keys in a few queries: the found ones only."""
        found: dict[str, object] = {}
        now = time.time()
        for start in range(0, len(full_keys), _BATCH):
            chunk = full_keys[start : start + _BATCH]
            sql = self._SQL_MANY.format(",".join("?" * len(chunk)))
            for key, mode, value in self.con.execute(sql, (*chunk, now)):
                ok = mode == _MODE_RAW and isinstance(value, str)
                found[key] = value if ok else _FALLBACK
        return found

    def close(self) -> None:
        self.con.close()


def _exists(db: str) -> bool:
    """Whether the database file is there; OSError if something else is in its place (a
    symbolic link, which sqlite would follow out of the cache)."""
    try:
        st = os.lstat(db)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise not_ours(db, "file")
    return True  # a directory or FIFO there is damage: moved aside at open (dbopen.wrong_kind)


class RowFileError(OSError):
    """A row written to the database whose file could not be written (Index._put_rows)."""


def index_budget(max_size: int) -> int:
    """Bytes the index database may take before diskcache culls its oldest rows."""
    return max(4 << 20, max_size // 16)


class Index:
    """Rows are immutable strings; diskcache culls least-recently-stored rows past its budget.

    Reads take no lock (sqlite WAL readers never block). A database sqlite reports as damaged is
    quarantined and replaced once per process, and the operation retried on the fresh one.
    """

    def __init__(
        self, root: str, modes: Modes, max_size: int, on_damage: Callable[[str], None]
    ) -> None:
        self.dir = os.path.join(root, "index")
        self._modes = modes
        self._settings: dict[str, Any] = {
            "size_limit": index_budget(max_size),
            "eviction_policy": "least-recently-stored",
            "cull_limit": 10,
            "statistics": 0,
            "tag_index": 0,
        }
        self._on_damage = on_damage
        self._rebuilt = False
        self._cache: diskcache.Cache | None = None
        self._reader: RowReader | None = None
        self._seen: os.stat_result | None = None
        self.rows = Rows(root, modes)
        # The database is only read when a row file is missing: opened then, not here.
        self._db = os.path.join(self.dir, "cache.db")
        self._direct = _exists(self._db)
        if not self._direct:
            self._open()

    def _open(self) -> diskcache.Cache:
        from .dbopen import db_stat, open_cache
        from .layout import tag

        self._cache, rebuilt = open_cache(self.dir, self._modes, **self._settings)
        if rebuilt:
            self._rebuilt = True
            self._on_damage(
                "index database was unreadable; moved it aside and started an empty one"
            )
        self._seen = db_stat(self.dir)
        tag(os.path.dirname(self.dir), self._modes)  # a writer's open: the store is one
        return self._cache

    @property
    def writing(self) -> bool:
        """Whether this process has opened the diskcache (writes are cheap from now on)."""
        return self._cache is not None

    @property
    def cache(self) -> diskcache.Cache:
        """The diskcache, opened on first need: writes, maintenance, rows RowReader skips."""
        return self._cache if self._cache is not None else self._open()

    def _row_reader(self) -> RowReader | None:
        """The direct reader, opened on the first read a row file could not answer (None
        once diskcache is open, or when the database is not one it reads)."""
        if self._direct and self._cache is None:
            self._direct = False
            from .dbopen import BUSY_TIMEOUT
            from .sql import sqlite3

            try:
                if not stat.S_ISREG(os.lstat(self._db).st_mode):  # sqlite would block on a FIFO
                    raise OSError("not a regular file")
                with self._modes.umask():  # it may make the -wal and -shm files
                    self._reader = RowReader(self._db, BUSY_TIMEOUT)
                self._seen = os.stat(self._db)
            except (sqlite3.Error, OSError):
                self._reader = None  # damaged, locked, odd, gone: diskcache's open deals with it
        return self._reader

    def _read(self, full_key: str) -> Any:
        value = self.rows.get(full_key)
        if value is not None:
            return value
        value = self._read_db(full_key)
        if isinstance(value, str):
            self._backfill([(full_key, value)])
        return value

    def _read_db(self, full_key: str) -> Any:
        reader = self._row_reader()
        if reader is not None:
            from .sql import sqlite3

            try:
                value = reader.get(full_key)
                if value is not _FALLBACK:
                    return value
            except sqlite3.Error:
                self._reader = None
                reader.close()
        return self._run(lambda c: c.get(full_key))

    def _read_many(self, full_keys: Sequence[str]) -> dict[str, Any]:
        """:meth:`_read` for many keys: the row files, then the database (in a few queries
        when the direct reader can) for the keys without one; the found ones only."""
        found: dict[str, Any] = self.rows.get_many(full_keys)
        if len(found) == len(full_keys):
            return found
        rest = [k for k in full_keys if k not in found]
        from_db = self._read_many_db(rest)
        self._backfill([(k, v) for k, v in from_db.items() if isinstance(v, str)])
        found.update(from_db)
        return found

    def _read_many_db(self, full_keys: Sequence[str]) -> dict[str, Any]:
        reader = self._row_reader()
        if reader is not None:
            from .sql import sqlite3

            try:
                found: dict[str, Any] = reader.get_many(full_keys)
            except sqlite3.Error:
                self._reader = None
                reader.close()
            else:
                for key, value in found.items():
                    if value is _FALLBACK:
                        found[key] = self._get(key)
                return {k: v for k, v in found.items() if v is not None}
        return {k: v for k in full_keys if (v := self._read_db(k)) is not None}

    def _backfill(self, items: list[tuple[str, str]]) -> None:
        """Row files for rows read from the database (stored before the files existed, or
        whose file was lost): the next link reads them without it. Best effort: a
        read-only cache still serves.

        A row dropped (or replaced) after it was read must not come back as its file, which
        is read before the database from then on. So once the files are in place the rows
        are read again, and a file whose row is gone or changed is taken back. A drop deletes
        the row before its file (drop_entry): if that unlink came before our rename, its
        delete came before our second read, which sees it; if after, it removed our file.
        A process killed between rename and second read leaves a file for reconcile.
        """
        written: list[tuple[str, str]] = []
        try:
            for full_key, value in items:
                self.rows.put(full_key, value)
                written.append((full_key, value))
        except OSError:
            pass
        if not written:
            return
        from .sql import sqlite3

        now: dict[str, Any] = {}
        try:
            now = self._read_many_db([full_key for full_key, _ in written])
        except (sqlite3.Error, OSError):
            pass  # unconfirmed: taken back below; the rows read before still stand
        finally:
            for full_key, value in written:
                if now.get(full_key) != value:
                    self.rows.discard(full_key, value)

    def _run(self, op: Callable[[diskcache.Cache], T]) -> T:
        from .sql import sqlite3

        try:
            return op(self.cache)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError:
            if self._rebuilt:
                raise
        # Damaged while in use: quarantine it (unless another process already did) and retry once.
        from .dbopen import db_stat, open_cache, quarantine

        self._rebuilt = True
        self.close()
        quarantine(self.dir, "cache.db", self._seen)
        self._cache, _ = open_cache(self.dir, self._modes, **self._settings)
        self._seen = db_stat(self.dir)
        self._on_damage("index database is damaged; moved it aside and started an empty one")
        return op(self.cache)

    def get_entry(self, key: str) -> Any:
        return self._read(_ENTRY + key)

    def get_entries(self, keys: Sequence[str]) -> dict[str, Any]:
        """Raw manifests of the keys found (one query per 900 keys, not one per key)."""
        n = len(_ENTRY)
        return {k[n:]: v for k, v in self._read_many([_ENTRY + k for k in keys]).items()}

    def has_entry(self, key: str) -> bool:
        return self._read(_ENTRY + key) is not None

    def _put_rows(self, items: Sequence[tuple[str, str]]) -> None:
        """The files of rows just written to the database. A path that damage blocks (a
        directory where a row file belongs, a file for rows/ab/) is cleared and the write
        tried once more. A file that still cannot be written is RowFileError: the row is in
        the database (a read finds it there), so its writer must not take back what it names;
        no older file of these rows is left to answer instead."""
        for n, (full_key, value) in enumerate(items):
            try:
                try:
                    self.rows.put(full_key, value)
                except OSError as error:
                    from .repair import blocked_paths, make_way

                    root = os.path.dirname(self.dir)
                    blocked = blocked_paths(root, error)
                    if not any([make_way(root, p, directory) for p, directory in blocked]):
                        raise
                    self.rows.put(full_key, value)
            except OSError as error:
                for rest_key, _ in items[n:]:
                    self.rows.drop(rest_key)
                raise RowFileError(error.errno, error.strerror, error.filename) from error

    def set_entry(self, key: str, text: str) -> None:
        self._run(lambda c: c.set(_ENTRY + key, text))
        self._put_rows([(_ENTRY + key, text)])

    def set_entries(self, items: list[tuple[str, str]]) -> None:
        """Several entries in one transaction (one commit, not one per entry)."""

        def write(c: diskcache.Cache) -> None:
            with c.transact():
                for key, text in items:
                    c.set(_ENTRY + key, text)

        self._run(write)
        self._put_rows([(_ENTRY + key, text) for key, text in items])

    def drop_entry(self, key: str) -> None:
        """The row, then its file: the other order lets a reader that misses the file copy
        the row back to it before the row goes (see _backfill)."""
        try:
            self._run(lambda c: c.delete(_ENTRY + key))
        finally:
            self.rows.drop(_ENTRY + key)

    def get_pack(self, name: str) -> bytes | None:
        """A pack's bytes from its row file (store/pack.py); None when there is none: the
        database has no packs, so a missing one costs no sqlite."""
        return self.rows.get_bytes(_PACK + name)

    def set_pack(self, name: str, data: bytes) -> None:
        """Writes a pack's row file (OSError to the caller). The next maintenance pass
        removes it with the other row files the database lacks."""
        self.rows.put_bytes(_PACK + name, data)

    def get_memo(self, namespace: str, key: str) -> Any:
        return self._read(f"{_MEMO}{namespace}:{key}")

    def get_memos(self, namespace: str, keys: Sequence[str]) -> dict[str, Any]:
        """:meth:`get_memo` for many keys at once: the found ones only."""
        prefix = f"{_MEMO}{namespace}:"
        n = len(prefix)
        return {k[n:]: v for k, v in self._read_many([prefix + k for k in keys]).items()}

    def set_memo(self, namespace: str, key: str, value: str) -> None:
        self._run(lambda c: c.set(f"{_MEMO}{namespace}:{key}", value))
        self._put_rows([(f"{_MEMO}{namespace}:{key}", value)])

    def set_memos(self, namespace: str, items: list[tuple[str, str]]) -> None:
        """Many memo writes in one transaction: one commit (one fsync) per link, not per key."""

        def write(c: diskcache.Cache) -> None:
            with c.transact():
                for key, value in items:
                    c.set(f"{_MEMO}{namespace}:{key}", value)

        self._run(write)
        self._put_rows([(f"{_MEMO}{namespace}:{key}", value) for key, value in items])

    def entries(self) -> Iterator[tuple[str, Any]]:
        """All (action key, raw manifest) pairs; for maintenance passes, not the hot path."""
        keys: list[Any] = self._run(lambda c: list(c.iterkeys()))
        for full in keys:
            if isinstance(full, str) and full.startswith(_ENTRY):
                yield full[len(_ENTRY) :], self._get(full)

    def _get(self, full_key: str) -> Any:
        return self._run(lambda c: c.get(full_key))

    def oldest_memos(self, count: int) -> list[str]:
        """The row keys of the ``count`` oldest-stored memos (a reclaim short of room drops
        them first: each file takes a block and an inode, and a memo costs less to learn
        again than an entry's compile)."""
        if count <= 0:
            return []
        end = _MEMO[:-1] + chr(ord(_MEMO[-1]) + 1)

        def oldest(c: diskcache.Cache) -> list[str]:
            sql = ("SELECT key FROM Cache WHERE raw = 1 AND key >= ? AND key < ?"
                   " ORDER BY store_time LIMIT ?")  # fmt: skip
            return [str(row[0]) for row in c._sql(sql, (_MEMO, end, count)).fetchall()]

        return self._run(oldest)

    def drop_rows(self, full_keys: Sequence[str]) -> None:
        """Drops many rows (entries as ``a:KEY``) in one transaction, then their files: one
        commit, where drop_entry costs one each (on a full disk the log's growth counts)."""
        if not full_keys:
            return

        def drop(c: diskcache.Cache) -> None:
            with c.transact():
                for full_key in full_keys:
                    c.delete(full_key)

        try:
            self._run(drop)
        finally:
            for full_key in full_keys:
                self.rows.drop(full_key)

    @staticmethod
    def entry_row(key: str) -> str:
        return _ENTRY + key

    def count_entries(self) -> int:
        reader = self._row_reader() if self._cache is None else None
        if reader is not None:  # diskcache's open writes: on a full disk only this reads
            from .sql import sqlite3

            try:
                row = reader.con.execute(
                    "SELECT COUNT(*) FROM Cache WHERE raw = 1 AND key >= ? AND key < ?",
                    (_ENTRY, _ENTRY[:-1] + chr(ord(_ENTRY[-1]) + 1)),
                ).fetchone()
                return int(row[0])
            except sqlite3.Error:
                pass
        return sum(1 for k in self._run(lambda c: list(c.iterkeys())) if str(k).startswith(_ENTRY))

    def check(self) -> None:
        """sqlite's quick check of the whole database (verify's, not the hot path's: it reads
        every page); one that fails it is moved aside and replaced by an empty one, as on any
        damage found in use (``on_damage`` says so)."""
        from .sql import sqlite3

        def quick_check(c: diskcache.Cache) -> None:
            rows = c._sql("PRAGMA quick_check").fetchall()
            if [tuple(r) for r in rows] != [("ok",)]:
                raise sqlite3.DatabaseError(f"quick_check: {rows[0][0] if rows else '?'}")

        self._rebuilt = False  # this check may rebuild even if an earlier failure did
        self._run(quick_check)

    def volume(self) -> int:
        return int(self._run(lambda c: c.volume()))

    def clear(self) -> None:
        self._run(lambda c: c.clear())  # the rows before their files, as drop_entry
        self.rows.keep_only(set())

    def reconcile(self) -> int:
        """Removes the row files of rows the database no longer has (culled by diskcache
        past its budget, or dropped by a process that died before removing the file)."""
        keys: list[Any] = self._run(lambda c: list(c.iterkeys()))
        return self.rows.keep_only({k for k in keys if isinstance(k, str)})

    def close(self) -> None:
        """Closes both connections; the next read or write opens diskcache (not the reader)."""
        cache, self._cache = self._cache, None
        reader, self._reader = self._reader, None
        for db in (cache, reader):
            if db is not None:
                db.close()
