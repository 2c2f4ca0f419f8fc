"""Statistics shared by every process using the store, persisted in their own small database.

Kept apart from the index so that quarantining a damaged index keeps the counts (including the
corruption it just counted), and so that the hot read path does not open it at all.
"""

from __future__ import annotations

import os
from typing import Any

from .dbopen import open_cache
from .fsutil import Modes

#: Integer counters; time_saved is kept in microseconds so diskcache's atomic incr applies.
COUNTERS = (
    "hits",
    "misses",
    "stores",
    "evictions",
    "corruptions",
    "bytes_stored",
    "bytes_served",
    "time_saved_us",
    "size",
)


class Stats:
    """Atomic counters (diskcache incr inside one sqlite transaction per batch)."""

    def __init__(self, root: str, modes: Modes) -> None:
        self.cache: Any
        self.cache, _ = open_cache(
            os.path.join(root, "stats"), modes, eviction_policy="none", size_limit=1 << 62
        )

    def add(self, **deltas: int) -> None:
        """Apply several counter deltas at once, atomically with respect to other processes."""
        deltas = {k: v for k, v in deltas.items() if v}
        if not deltas:
            return
        with self.cache.transact():
            for name, delta in deltas.items():
                self.cache.incr(name, delta, default=0)

    def set(self, name: str, value: int) -> None:
        self.cache.set(name, int(value))

    def get(self, name: str) -> int:
        value = self.cache.get(name, 0)
        return int(value) if isinstance(value, int) else 0

    def all(self) -> dict[str, int]:
        return {name: self.get(name) for name in COUNTERS}

    def close(self) -> None:
        self.cache.close()
