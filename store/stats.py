"""Statistics shared by every process using the store, persisted in their own small database.

Plain sqlite (one upsert transaction per batch) rather than a second diskcache: a cached link
records once, and opening diskcache costs ~5 ms where sqlite needs well under one. Kept apart
from the index so that quarantining a damaged index keeps the counts, including the corruption
just counted, and so that the hot read path does not open it at all.
"""

from __future__ import annotations

import os

from .dbopen import BUSY_TIMEOUT, quarantine, wrong_kind
from .fsutil import Modes
from .sql import sqlite3

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

#: Integer counters; time_saved is kept in microseconds so increments stay exact integers.
COUNTERS = (
    "hits",
    "misses",
    "stores",
    "evictions",
    "corruptions",
    "bytes_stored",
    "bytes_original",
    "bytes_served",
    "time_saved_us",
    "size",
)
_DB = "stats.db"
_UPSERT = (
    "INSERT INTO counters (name, value) VALUES (?, ?)"
    " ON CONFLICT(name) DO UPDATE SET value = value + excluded.value"
)


#: Connections inherited across fork: never used nor closed in the child (closing one could
#: make sqlite checkpoint and delete the WAL the parent still uses), just kept alive.
_INHERITED: list[sqlite3.Connection] = []


class Stats:
    """Atomic counters: each batch is one IMMEDIATE transaction, so concurrent adds never race."""

    def __init__(self, root: str, modes: Modes) -> None:
        self.dir = os.path.join(root, "stats")
        self._modes = modes
        self._pid = os.getpid()
        self.rebuilt = False  # found damaged and moved aside: the counts restarted
        try:
            if wrong_kind(self.dir, _DB):  # a directory where the database belongs, ...
                raise sqlite3.DatabaseError("not a database file")
            modes.makedirs(self.dir)
            self._con = self._connect(modes)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError:
            aside = quarantine(self.dir, _DB)  # damaged: counts restart, the store goes on
            modes.makedirs(self.dir)
            if aside is not None:  # what links left pending is not the database's damage
                from . import tally

                try:
                    os.rename(tally.pending_dir(aside), tally.pending_dir(self.dir))
                except OSError:
                    pass
            self._con = self._connect(modes)
            self.rebuilt = True
        try:
            self.fold()
        except sqlite3.OperationalError:
            pass  # busy, or no room to write: the files wait for the next fold; reads work

    def fold(self) -> None:
        """Adds the counts links left in pending files (store/tally.py), removing the files in
        the same transaction: each is counted once, whoever folds."""
        from . import tally

        try:
            if all(name.startswith(".") for name in os.listdir(tally.pending_dir(self.dir))):
                return  # nothing pending (a temporary file is a writer's, or stale)
        except OSError:
            return
        self._write([], [], fold=True)

    def _connect(self, modes: Modes) -> sqlite3.Connection:
        path = os.path.join(self.dir, _DB)
        # In the store's mode (sqlite gives its -wal and -shm files the same); never a
        # symbolic link, which sqlite would follow out of the cache.
        modes.create_empty(path)
        with modes.umask():  # sqlite makes the -wal and -shm files at the first statement
            con = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
            try:
                if con.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    con.execute("PRAGMA journal_mode=WAL")
                con.execute("PRAGMA synchronous=NORMAL")
                con.execute(
                    "CREATE TABLE IF NOT EXISTS counters"
                    " (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID"
                )
                con.execute("SELECT count(*) FROM counters").fetchone()
            except BaseException:
                con.close()
                raise
        return con

    @property
    def con(self) -> sqlite3.Connection:
        """This process's connection (a forked child opens its own)."""
        if self._pid != os.getpid():
            _INHERITED.append(self._con)
            self._con = self._connect(self._modes)
            self._pid = os.getpid()
        return self._con

    def add(self, **deltas: int) -> None:
        """Apply several counter deltas at once, atomically with respect to other processes."""
        rows = [(k, int(v)) for k, v in deltas.items() if v]
        if rows:
            self._write(rows, [])

    def update(self, *, set_values: dict[str, int], add: dict[str, int]) -> None:
        """Set some counters and add to others in one transaction (an eviction pass's result)."""
        self._write([(k, v) for k, v in add.items() if v], list(set_values.items()))

    def _write(
        self, adds: list[tuple[str, int]], sets: list[tuple[str, int]], fold: bool = False
    ) -> None:
        """One transaction; with ``fold``, the pending files are read, removed and added in it."""

        def work(con: sqlite3.Connection) -> None:
            added = adds
            if fold:
                from . import tally

                added = adds + [(k, v) for k, v in tally.take(self.dir).items() if v]
            if sets:
                con.executemany("INSERT OR REPLACE INTO counters (name, value) VALUES (?, ?)", sets)
            if added:
                con.executemany(_UPSERT, added)

        self._transaction(work)

    def zero(self, keep: tuple[str, ...] = ("size",)) -> None:
        """Every counter, the pending files' included, back to 0, but ``keep`` (``size`` is
        what the store holds now, which eviction reads): ccache's ``--zero-stats``."""
        from . import tally

        def work(con: sqlite3.Connection) -> None:
            pending = tally.take(self.dir)  # counted, then zeroed: dropped but for ``keep``
            kept = [(k, v) for k, v in pending.items() if k in keep and v]
            marks = ",".join("?" * len(keep))
            con.execute(f"UPDATE counters SET value = 0 WHERE name NOT IN ({marks})", keep)
            if kept:
                con.executemany(_UPSERT, kept)

        self._transaction(work)

    def _transaction(self, work: Callable[[sqlite3.Connection], None]) -> None:
        """``work`` in one write transaction (BEGIN IMMEDIATE), rolled back if anything fails."""
        con = self.con
        con.execute("BEGIN IMMEDIATE")
        try:
            work(con)
            con.execute("COMMIT")
        except BaseException:
            try:
                con.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise

    def set(self, name: str, value: int) -> None:
        self._write([], [(name, int(value))])

    def get(self, name: str) -> int:
        row = self.con.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0]) if row else 0

    def all(self) -> dict[str, int]:
        values = dict.fromkeys(COUNTERS, 0)
        for name, value in self.con.execute("SELECT name, value FROM counters"):
            values[name] = int(value)  # the store's counters and its callers' own
        return values

    def close(self) -> None:
        self._con.close()
