"""Maintenance passes: LRU eviction, collection of unreferenced blobs, and full verification.

They scan the blob directory and the index, so they run only when the size counter crosses the
limit (then evict down to a low watermark, so scans stay rare), or on explicit trim/verify.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from .blobs import Blobs
from .index import Index
from .manifest import Manifest
from .stats import Stats

#: After crossing the limit, evict down to this fraction of it.
LOW_WATERMARK = 0.9
#: Blobs younger than this are never collected as unreferenced: their put may still be writing
#: its manifest.
GRACE = 600.0
#: Temporary files older than this belong to killed writers.
STALE_TEMP = 3600.0


@dataclass(frozen=True)
class VerifyReport:
    """What Store.verify found: every blob re-hashed, every entry checked against its blobs."""

    blobs_checked: int = 0
    blobs_corrupt: int = 0
    bytes_checked: int = 0
    entries_checked: int = 0
    entries_dropped: int = 0


def referenced(index: Index) -> tuple[set[str], list[tuple[str, Manifest | None]]]:
    """Digests any entry refers to, plus every entry (None for one that does not decode)."""
    digests: set[str] = set()
    entries: list[tuple[str, Manifest | None]] = []
    for key, raw in index.entries():
        manifest = Manifest.decode(key, raw)
        entries.append((key, manifest))
        if manifest is not None:
            digests.update(d for d, _ in manifest.outputs.values())
    return digests, entries


def evict(blobs: Blobs, index: Index, stats: Stats | None, target: int, *, grace: float) -> int:
    """Bring blob bytes to at most `target`: stale temporaries, then unreferenced blobs, then
    least recently used ones. Entries left without a blob are dropped. Returns bytes freed."""
    import time

    freed = blobs.sweep_temp(STALE_TEMP)
    used, entries = referenced(index)
    now = time.time()
    infos = sorted(blobs.scan(), key=lambda b: b.mtime)
    total = sum(b.size for b in infos)
    removed: set[str] = set()
    evictions = 0
    kept = []
    for info in infos:
        if info.digest not in used and now - info.mtime > grace:
            blobs.remove(info.digest)
            removed.add(info.digest)
            total -= info.size
            freed += info.size
        else:
            kept.append(info)
    for info in kept:
        if total <= target:
            break
        blobs.remove(info.digest)
        removed.add(info.digest)
        total -= info.size
        freed += info.size
        evictions += 1
    for key, manifest in entries:
        if manifest is None or any(d in removed for d, _ in manifest.outputs.values()):
            with contextlib.suppress(Exception):
                index.drop_entry(key)
    index.reconcile()  # the files of rows diskcache culled since the last pass
    if stats is not None:
        # Rescanning corrects any drift of the shared counter (racing puts, killed writers).
        stats.update(set_values={"size": total}, add={"evictions": evictions})
    return freed


def verify(blobs: Blobs, index: Index) -> VerifyReport:
    """Re-hash every blob, removing corrupt ones; drop entries that decode badly or miss a blob."""
    checked = corrupt = nbytes = 0
    for info in list(blobs.scan()):
        result = blobs.check(info.digest)
        if result is None:
            continue
        checked += 1
        nbytes += info.size
        if not result:
            corrupt += 1
    entries_checked = dropped = 0
    for key, raw in list(_entries(index)):
        entries_checked += 1
        manifest = Manifest.decode(key, raw)
        filed = index.get_entry(key) if manifest is not None else raw  # its row file, read first
        if filed != raw and Manifest.decode(key, filed) is None:
            manifest = None  # a lookup would find a damaged (or another key's) manifest there
        if manifest is None or not all(blobs.present(d, s) for d, s in manifest.outputs.values()):
            index.drop_entry(key)
            dropped += 1
    index.reconcile()
    return VerifyReport(checked, corrupt, nbytes, entries_checked, dropped)


def _entries(index: Index) -> Iterator[tuple[str, object]]:
    yield from index.entries()
