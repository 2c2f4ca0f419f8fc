"""Age eviction: entries not used for a while go, whatever the cache's size (ccache's
``--evict-older-than``).

A blob's mtime is its clock: set when it is stored, refreshed by a hit that places it (at
most once a minute, store/blobs.py ``TOUCH_AFTER``). Blobs whose clock is older than the
cut-off are removed, then every entry that names one of them (an entry whose objects are
not all there is a miss anyway). Runs under the store's maintenance lease, like trim.
"""

from __future__ import annotations

import contextlib
import time

from .blobs import Blobs
from .index import Index
from .maintenance import referenced
from .stats import Stats


def evict_older_than(blobs: Blobs, index: Index, stats: Stats | None, age: float) -> int:
    """Removes what was not used in the last ``age`` seconds; bytes freed."""
    cutoff = time.time() - age
    removed: set[str] = set()
    freed = evictions = total = 0
    for info in list(blobs.scan()):
        if info.mtime < cutoff:
            blobs.remove(info.digest, info.path)
            removed.add(info.digest)
            freed += info.size
            evictions += 1
        else:
            total += info.size
    _, entries = referenced(index)
    for key, manifest in entries:
        if manifest is not None and any(d in removed for d, _ in manifest.outputs.values()):
            with contextlib.suppress(Exception):
                index.drop_entry(key)
    index.reconcile()
    if stats is not None:
        stats.update(set_values={"size": total}, add={"evictions": evictions})
    return freed
