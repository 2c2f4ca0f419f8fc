"""Maintenance passes: LRU eviction, collection of unreferenced blobs, reclaiming space after a
write failed for lack of it, and full verification with repair.

They scan the blob directory and the index, so they run only when the size counter crosses the
limit (then evict down to a low watermark, so scans stay rare), after a write found the disk
full (see RECLAIM_FLAG), or on explicit trim/verify/clear.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

from .blobs import Blobs
from .index import Index
from .manifest import Manifest
from .stats import Stats

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .blobs import BlobInfo
    from .fsutil import Modes

#: After crossing the limit, evict down to this fraction of it.
LOW_WATERMARK = 0.9
#: Blobs younger than this are never collected as unreferenced: their put may still be writing
#: its manifest.
GRACE = 600.0
#: Temporary files older than this belong to killed writers.
STALE_TEMP = 3600.0
#: Left (when it can be) by a write that failed for lack of space or inodes: the store may
#: then hold what no counter knows of (the blobs of a put whose entry could not be written,
#: a sqlite log grown to its largest, counts not added). The store's next writer runs a
#: reclaim pass (``evict(..., room=True)``) before it writes, whatever the size counter says.
RECLAIM_FLAG = os.path.join("locks", "reclaim")
#: What a reclaim pass leaves free on the file system: this fraction of what the blobs take
#: (or of how many there are, for inodes), at least RESERVE_BYTES / RESERVE_INODES, at most a
#: quarter of the file system.
RESERVE_FRACTION = 0.1
RESERVE_BYTES = 256 << 10
RESERVE_INODES = 64
#: The least a file takes on disk (a block; a tmpfs page): what removing a small one frees.
_BLOCK = 4096
#: Blob names below blobs/ab/ and row names below rows/ab/: the rest of a 32-digit hex digest.
_NAME_LENGTH = 30


@dataclass(frozen=True)
class VerifyReport:
    """What Store.verify found: every blob re-hashed, every entry checked against its blobs,
    the databases and the store's own paths checked. ``repaired`` counts damage other than
    corrupt blobs and entries (a directory where a file belongs, a database that is not one,
    ...) that was removed or moved aside (Store.verify adds the databases); ``problem``
    says why something could not be checked (None: everything was)."""

    blobs_checked: int = 0
    blobs_corrupt: int = 0
    bytes_checked: int = 0
    entries_checked: int = 0
    entries_dropped: int = 0
    repaired: int = 0
    problem: str | None = None

    @property
    def damaged(self) -> bool:
        return bool(self.blobs_corrupt or self.entries_dropped or self.repaired)


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


def flag_reclaim(root: str, modes: Modes) -> bool:
    """Leaves RECLAIM_FLAG (an empty file: no data block needed); False if it cannot."""
    try:
        modes.create_empty(os.path.join(root, RECLAIM_FLAG))
    except OSError:
        return False
    return True


def reclaim_flagged(root: str) -> bool:
    return os.path.lexists(os.path.join(root, RECLAIM_FLAG))


def unflag_reclaim(root: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(root, RECLAIM_FLAG))


#: What a process SIGKILLed while breaking a stale marker leaves beside it: its own marker
#: made aside, or the old one exchanged aside (filelock's ``.break.``/``.restore.`` names), or
#: lease.py's probe of the file system (``.probe.``). A takeover lasts microseconds.
_LEASE_LEFTOVER = re.compile(r".+\.lock\.(?:break|restore|probe)\.[0-9]+\.[0-9a-f]+(?:\.2)?")


def sweep_lease_leftovers(directory: str, older_than: float) -> int:
    """Removes the files killed breakers of stale markers left in ``directory`` (claims/,
    locks/) once ``older_than`` seconds old; nothing else there. Returns how many."""
    import time

    from .repair import sweep

    now = time.time()
    return sweep(
        directory,
        lambda entry: (
            _LEASE_LEFTOVER.fullmatch(entry.name) is not None
            and entry.is_file(follow_symlinks=False)
            and now - entry.stat(follow_symlinks=False).st_mtime > older_than
        ),
    )


def checkpoint_databases(root: str, modes: Modes) -> None:
    """Truncates the index's and the statistics' sqlite logs (see dbopen.checkpoint)."""
    from .dbopen import checkpoint

    with modes.umask():  # sqlite may make the -wal and -shm files
        checkpoint(os.path.join(root, "index", "cache.db"))
        checkpoint(os.path.join(root, "stats", "stats.db"))


def _on_disk(size: int) -> int:
    return max(_BLOCK, -(-size // _BLOCK) * _BLOCK)


def shortfall(root: str, infos: list[BlobInfo]) -> tuple[int, int]:
    """(bytes, inodes) the file system lacks of the room a reclaim pass leaves free, given
    the blobs ``infos``; (0, 0) when it has that room or cannot tell."""
    try:
        fs = os.statvfs(root)
    except OSError:
        return 0, 0
    held = sum(_on_disk(b.size) for b in infos)
    want = max(RESERVE_BYTES, int(held * RESERVE_FRACTION))
    want = min(want, fs.f_blocks * fs.f_frsize // 4)
    short_bytes = max(0, want - fs.f_bavail * fs.f_frsize)
    short_inodes = 0
    if fs.f_files:  # 0: a file system without an inode limit
        want_inodes = min(max(RESERVE_INODES, int(len(infos) * RESERVE_FRACTION)), fs.f_files // 4)
        short_inodes = max(0, want_inodes - fs.f_favail)
    return short_bytes, short_inodes


def short_of_room(root: str) -> str | None:
    """None when the file system holding ``root`` has a reclaim's room; else what it has
    left, for a message ("12 KiB free", "0 inodes free")."""
    short_bytes, short_inodes = shortfall(root, [])
    if not short_bytes and not short_inodes:
        return None
    fs = os.statvfs(root)
    if short_inodes:
        return f"{fs.f_favail} inodes free"
    return f"{fs.f_bavail * fs.f_frsize // 1024} KiB free"


def _make_room(blobs: Blobs, root: str) -> set[str]:
    """Removes least recently used blobs until the file system has a reclaim's room, without
    the index: for when the index cannot even be opened for lack of room (diskcache's open
    writes). Their entries read as misses, and are dropped by the pass that follows."""
    infos = sorted(blobs.scan(), key=lambda b: b.mtime)
    short_bytes, short_inodes = shortfall(root, infos)
    removed: set[str] = set()
    for info in infos:
        if short_bytes <= 0 and short_inodes <= 0:
            break
        blobs.remove(info.digest)
        removed.add(info.digest)
        short_bytes -= _on_disk(info.size)
        short_inodes -= 1
    return removed


def evict(
    blobs: Blobs, index: Index, stats: Stats | None, target: int, *, grace: float,
    modes: Modes, tidy: bool = False, room: bool = False,
) -> int:  # fmt: skip
    """Bring blob bytes to at most `target`: stale temporaries, then unreferenced blobs, then
    least recently used ones. Entries left without a blob are dropped. Returns bytes freed.

    ``tidy`` (trim, clear, a reclaim): also truncates the sqlite logs and removes empty
    fan-out directories. ``room`` (a reclaim after a write found the disk full): also drops
    the oldest memos and then least recently used blobs until the file system has room again
    (see shortfall); the size limit is not the only one a disk has. Files go first and the
    database's rows after, in one transaction: on a full disk the files make the room the
    database's log needs."""
    import time

    from .repair import prune_fan_out, sweep_fan_out

    root = os.path.dirname(blobs.dir)
    freed = blobs.sweep_temp(STALE_TEMP)
    sweep_fan_out(blobs.dir, _NAME_LENGTH)  # a directory where a blob belongs: never a blob
    if tidy:
        checkpoint_databases(root, modes)
        for name in ("claims", "locks"):
            sweep_lease_leftovers(os.path.join(root, name), STALE_TEMP)
    removed: set[str] = set()
    try:
        used, entries = referenced(index)
    except Exception:
        if not room:
            raise
        removed = _make_room(blobs, root)
        checkpoint_databases(root, modes)
        used, entries = referenced(index)  # still failing: the caller keeps the flag
    now = time.time()
    infos = sorted(blobs.scan(), key=lambda b: b.mtime)
    total = sum(b.size for b in infos)
    short_bytes, short_inodes = shortfall(root, infos) if room else (0, 0)
    evictions = 0
    kept = []
    for info in infos:
        if info.digest not in used and now - info.mtime > grace:
            blobs.remove(info.digest, info.path)
            removed.add(info.digest)
            total -= info.size
            freed += info.size
            short_bytes -= _on_disk(info.size)
            short_inodes -= 1
        else:
            kept.append(info)
    memos: list[str] = []
    if short_bytes > 0 or short_inodes > 0:  # memos first: a block and an inode each
        with contextlib.suppress(Exception):
            memos = index.oldest_memos(max(-(-short_bytes // _BLOCK), short_inodes))
        for full_key in memos:
            index.rows.drop(full_key)  # its row goes below; meanwhile the file's value is right
        short_bytes -= len(memos) * _BLOCK
        short_inodes -= len(memos)
    for info in kept:
        if total <= target and short_bytes <= 0 and short_inodes <= 0:
            break
        blobs.remove(info.digest, info.path)
        removed.add(info.digest)
        total -= info.size
        freed += info.size
        short_bytes -= _on_disk(info.size)
        short_inodes -= 1
        evictions += 1
    if room:
        checkpoint_databases(root, modes)  # room now: the log's pages go into the database
    dead = [
        Index.entry_row(key)
        for key, manifest in entries
        if manifest is None or any(d in removed for d, _ in manifest.outputs.values())
    ]
    with contextlib.suppress(Exception):
        index.drop_rows(dead + memos)
    index.reconcile()  # the files of rows diskcache culled since the last pass
    if stats is not None:
        # Rescanning corrects any drift of the shared counter (racing puts, killed writers).
        stats.update(set_values={"size": total}, add={"evictions": evictions})
    if tidy:
        prune_fan_out(blobs.dir)
        prune_fan_out(index.rows.dir)
        checkpoint_databases(root, modes)
    return freed


def repair_top(root: str) -> int:
    """What is in the place of one of the store's own directories (a file, a symbolic link:
    links refuse such a cache, see store._not_its_own) is removed, the link itself and never
    what it leads to; the databases' directories are moved aside as a damaged database is.
    Returns how many."""
    from .dbopen import quarantine
    from .layout import LAYOUT
    from .repair import remove

    repaired = 0
    for name in LAYOUT:
        path = os.path.join(root, name)
        if not os.path.lexists(path) or (os.path.isdir(path) and not os.path.islink(path)):
            continue
        if name in ("index", "stats") and not os.path.islink(path):
            quarantine(path, "cache.db" if name == "index" else "stats.db")
            repaired += not os.path.lexists(path)
        else:
            repaired += remove(path)
    return repaired


def repair_layout(root: str) -> int:
    """Damage to the store's own paths, removed (or, for the databases' directories, moved
    aside as a damaged database is): a file where one of its directories belongs, anything
    but a file where a blob, a row or a lock marker belongs. Returns how many."""
    from .repair import remove, sweep_entries, sweep_fan_out

    repaired = repair_top(root)
    # A link in the place of a database, which sqlite would follow: links refuse to open it.
    for directory, db in (("index", "cache.db"), ("stats", "stats.db")):
        for suffix in ("", "-wal", "-shm"):
            path = os.path.join(root, directory, db + suffix)
            if os.path.islink(path):
                repaired += remove(path)
    for name in ("blobs", "rows"):
        repaired += sweep_fan_out(os.path.join(root, name), _NAME_LENGTH)
    for name in ("claims", "locks"):
        repaired += sweep_entries(os.path.join(root, name))
    return repaired


def verify(blobs: Blobs, index: Index) -> VerifyReport:
    """Re-hash every blob, removing corrupt ones; drop entries that decode badly or miss a
    blob; repair the store's paths and check the index database. A blob that cannot be read
    or an index that cannot be is the report's ``problem``: the check was not complete."""
    root = os.path.dirname(blobs.dir)
    repaired = repair_layout(root)
    problem: str | None = None
    try:
        index.check()  # a damaged database is moved aside (counted by the caller's on_damage)
    except Exception as error:
        problem = f"cannot check the index database: {_describe(error)}"
    checked = corrupt = nbytes = 0
    for info in list(blobs.scan()):
        try:
            result = blobs.check(info.digest, info.path)
        except OSError as error:
            problem = problem or f"cannot read blob {info.path}: {_describe(error)}"
            continue
        if result is None:
            continue
        checked += 1
        nbytes += info.size
        if not result:
            corrupt += 1
    entries_checked = dropped = 0
    try:
        for key, raw in list(index.entries()):
            entries_checked += 1
            manifest = Manifest.decode(key, raw)
            filed = index.get_entry(key) if manifest is not None else raw  # its row file first
            if filed != raw and Manifest.decode(key, filed) is None:
                manifest = None  # a lookup would find a damaged (or another key's) manifest there
            outputs = manifest.outputs.values() if manifest is not None else ()
            if manifest is None or not all(blobs.present(d, s) for d, s in outputs):
                index.drop_entry(key)
                dropped += 1
        index.reconcile()
    except Exception as error:
        problem = problem or f"cannot read the index: {_describe(error)}"
    return VerifyReport(checked, corrupt, nbytes, entries_checked, dropped, repaired, problem)


def _describe(error: BaseException) -> str:
    from .problems import classify, describe

    return describe(error, classify(error))
