"""The action index: action key -> manifest, plus the small string memo, in one diskcache."""

from __future__ import annotations

import os
import sqlite3

import diskcache

from .dbopen import db_stat, open_cache, quarantine
from .fsutil import Modes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any, TypeVar

    T = TypeVar("T")
_ENTRY = "a:"
_MEMO = "m:"


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
        self.cache, rebuilt = open_cache(self.dir, modes, **self._settings)
        if rebuilt:
            self._rebuilt = True
            on_damage("index database was unreadable; moved it aside and started an empty one")
        self._seen = db_stat(self.dir)

    def _run(self, op: Callable[[diskcache.Cache], T]) -> T:
        try:
            return op(self.cache)
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError:
            if self._rebuilt:
                raise
        # Damaged while in use: quarantine it (unless another process already did) and retry once.
        self._rebuilt = True
        self.cache.close()
        quarantine(self.dir, "cache.db", self._seen)
        self.cache, _ = open_cache(self.dir, self._modes, **self._settings)
        self._seen = db_stat(self.dir)
        self._on_damage("index database is damaged; moved it aside and started an empty one")
        return op(self.cache)

    def get_entry(self, key: str) -> Any:
        return self._run(lambda c: c.get(_ENTRY + key))

    def has_entry(self, key: str) -> bool:
        return self._run(lambda c: (_ENTRY + key) in c)

    def set_entry(self, key: str, text: str) -> None:
        self._run(lambda c: c.set(_ENTRY + key, text))

    def drop_entry(self, key: str) -> None:
        self._run(lambda c: c.delete(_ENTRY + key))

    def get_memo(self, namespace: str, key: str) -> Any:
        return self._run(lambda c: c.get(f"{_MEMO}{namespace}:{key}"))

    def set_memo(self, namespace: str, key: str, value: str) -> None:
        self._run(lambda c: c.set(f"{_MEMO}{namespace}:{key}", value))

    def entries(self) -> Iterator[tuple[str, Any]]:
        """All (action key, raw manifest) pairs; for maintenance passes, not the hot path."""
        keys: list[Any] = self._run(lambda c: list(c.iterkeys()))
        for full in keys:
            if isinstance(full, str) and full.startswith(_ENTRY):
                yield full[len(_ENTRY) :], self._get(full)

    def _get(self, full_key: str) -> Any:
        return self._run(lambda c: c.get(full_key))

    def count_entries(self) -> int:
        return sum(1 for k in self._run(lambda c: list(c.iterkeys())) if str(k).startswith(_ENTRY))

    def volume(self) -> int:
        return int(self._run(lambda c: c.volume()))

    def clear(self) -> None:
        self._run(lambda c: c.clear())

    def close(self) -> None:
        self.cache.close()
