"""The Store facade: every public method degrades to a miss or a no-op instead of raising."""

from __future__ import annotations

import errno
import os
import stat
import time

from .blobs import ZST, Blobs, Outcome
from .fsutil import Modes, unlink_quietly, write_all
from .index import Index
from .layout import LAYOUT
from .manifest import Manifest, valid_key
from .placing import place
from .problems import Problems

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from .claims import Claim
    from .maintenance import VerifyReport
    from .placing import Helper, Plan
    from .problems import Warn
    from .stats import Stats

DEFAULT_MAX_SIZE = 5 * 2**30
#: Outputs for a helper, which is forked already and costs only its order and its answer
#: (~0.3 ms for 150 outputs).
HELPER_MIN_OUTPUTS = 32
#: Outputs from which copies are made in a stage (Blobs.stage) and renamed to their outputs.
#: Below it a stage's own cost (a directory made and removed, a few system calls) is about
#: what it can save; from 33 outputs (lua) up it costs nothing measurable, and on the
#: 300-module link it halves the distributor's time (docs/benchmarks/full-hit.md).
STAGE_MIN_OUTPUTS = 16
#: Tries of a put whose paths damage blocks: each clears one blocked path (tmp/, blobs/ab/,
#: the blob's own), see store/repair.py.
_ATTEMPTS = 4


def _helped(
    helper: Helper, work: Callable[[Sequence[int]], list[Any]], count: int,
    order: Callable[[list[int]], object], revive: Callable[[Any], Any],
) -> list[Any]:  # fmt: skip
    """``work`` over ``range(count)``: every other item by ``helper`` (given ``order`` of
    them), the rest here meanwhile; what the helper could not do is done here."""
    theirs, mine = list(range(0, count, 2)), list(range(1, count, 2))
    if not helper.order(order(theirs)):
        return work(range(count))
    results: list[Any] = [None] * count
    for i, value in zip(mine, work(mine), strict=True):
        results[i] = value
    answer = helper.answer()
    try:
        done = [revive(value) for value in answer]
        if len(done) != len(theirs):
            raise ValueError("not one result per item")
    except (TypeError, ValueError, IndexError):
        done = work(theirs)  # placing twice is placing once: each output is replaced whole
    for i, value in zip(theirs, done, strict=True):
        results[i] = value
    return results


def _not_its_own(root: str) -> str | None:
    """Why the store must not use the cache at ``root``: one of its own directories is not a
    directory (a symbolic link, a file), which it would write through to wherever that leads
    (every member of a group-shared cache can put one there). None when there is none. Once
    per Store: one directory listing, whatever the cache holds."""
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.name in LAYOUT and not entry.is_dir(follow_symlinks=False):
                what = "a symbolic link" if entry.is_symlink() else "a file"
                return (f"{entry.name} is {what}, not a directory the cache made; caching is "
                        "off until it is removed")  # fmt: skip
    return None


def _read_only(path: str) -> bool:
    """Whether `path` sits on a read-only mount or cannot be written by this user."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY) or not os.access(path, os.W_OK)
    except OSError:
        return False


class Store:
    """A content-addressed store that concurrent processes and hosts may share.

    Blobs are files named by their XXH3-128 digest; the index (diskcache) maps action keys to
    manifests. Reads take no lock; every byte served is re-hashed. Problems (damaged index,
    read-only or full disk, permissions) are reported once through `warn` and turn into misses.

    It is also the first tier of the storage protocol (store/tier.py): get_many and put_many
    move whole entries in and out as byte values, for remote tiers behind it.
    """

    claims = False  # single-flight here is per machine: see claim()
    round_trips = 0

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_size: int = DEFAULT_MAX_SIZE,
        group_shared: bool = False,
        hard_link: bool = False,
        compression_level: int = 0,
        warn: Warn | None = None,
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.max_size = int(max_size)
        self.group_shared = group_shared
        self.hard_link = hard_link  # serve outputs as hard links to the (verified) blobs
        self._modes = Modes(group_shared)
        self._problems = Problems(warn)
        # zstd level of new blobs (0: plain). A hard-linking store keeps its blobs plain: it
        # serves the stored file itself. Either reads both forms (store/blobs.py).
        self.compression_level = 0 if hard_link else max(0, int(compression_level))
        self._blobs = Blobs(self.root, self._modes, self.compression_level)
        self._stats_db: Stats | None = None
        self._stats_failed = False
        self._index: Index | None = None
        self._reclaim_checked = False  # whether this process looked for RECLAIM_FLAG yet
        # At most one reclaim pass between two stores that succeed: a pass that could not
        # make room is not repeated for every put that fails after it.
        self._reclaimed = False
        #: Why the store could not be opened, or why the last clear(), trim(), verify() or
        #: stats() could not do all of its work (None: it did), for a caller that must say
        #: so (a command's exit status). Not also given to ``warn``.
        self.failure: str | None = None
        self._why_unusable = "the cache is unusable"
        #: Unusable because one of the cache's own directories is a symbolic link or a file:
        #: links leave it alone (caching off, see _not_its_own); clear, trim and verify remove
        #: it, as they remove any damage to the store's paths, and then open the cache.
        self.repairable = False
        self._repairs = 0  # damage repaired on the way by this process, for verify()
        self._why_no_stats = "cannot open the statistics database"
        # Packs read (store/pack.py): name -> (its raw manifests, the keys it answered).
        self._packs: dict[str, tuple[dict[str, Any], set[str]]] = {}
        self._from_pack: dict[str, Manifest] = {}  # what packs answered, by key
        try:
            self._modes.makedirs(self.root)
            odd = _not_its_own(self.root)
            if odd is not None:
                self._problems.report("not-its-own", odd)
                self.failure = self._why_unusable = odd
                self.repairable = True  # by clear, trim and verify (see _open_repaired)
                return
            self._index = Index(self.root, self._modes, self.max_size, self._index_damaged)
        except Exception as error:
            self._why_unusable = f"cannot open the cache: {_describe(error)}"
            if _read_only(self.root):
                self._why_unusable = "the cache is read-only"
                self._problems.report(
                    "read-only", f"the cache at {self.root} is read-only; caching is off"
                )
            else:  # the path once: an OSError naming the cache's own path says it already
                named = isinstance(error, OSError) and error.filename == self.root
                where = "" if named else f" at {self.root}"
                self._problems.error(f"cannot open the cache{where}", error)
            self.failure = self._why_unusable

    # -- state --------------------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """False once the store degraded to pass-through (every get a miss, every put a no-op)."""
        return self._index is not None

    def _disable(self) -> None:
        index, self._index = self._index, None
        if index is not None:
            try:
                index.close()
            except Exception:
                pass

    def _fail(self, what: str, error: BaseException, *, report: bool = True) -> None:
        """Report once per kind (unless the caller says it otherwise: ``failure``); a damaged
        index that could not be rebuilt disables the store. A write that found no room leaves
        RECLAIM_FLAG and reclaims (once per process)."""
        if report:
            kind = self._problems.error(what, error)
        else:
            from .problems import classify

            kind = classify(error)
        if kind in ("index-damaged", "internal"):
            self._disable()
        elif not report:
            return  # a maintenance pass's own failure: it is the caller's to say, not to retry
        elif kind == "disk-full" or (kind in ("io", "index-io") and self._room_left() is not None):
            self._out_of_room()  # (sqlite says "disk I/O error" when it cannot map its memory)

    def _room_left(self) -> str | None:
        """None, or what is left on a file system short of room (maintenance.short_of_room)."""
        from .maintenance import short_of_room

        try:
            return short_of_room(self.root)
        except OSError:
            return None

    def _failed(self, error: BaseException) -> str:
        """``failure`` for an error: what it says, and how little room is left if so."""
        left = self._room_left()
        return _describe(error) + (f" ({left} on the cache's file system)" if left else "")

    def _out_of_room(self) -> None:
        """Something could not be written for lack of space (or inodes): what the store holds
        may now differ from what its counter says (see maintenance.RECLAIM_FLAG). Flag it for
        the next writer and reclaim here, unless nothing was stored since the last pass."""
        from .maintenance import flag_reclaim

        flag_reclaim(self.root, self._modes)
        self._reclaim()

    def _before_write(self) -> None:
        """The first write of a process runs the reclaim pass a full disk asked for."""
        if self._reclaim_checked:
            return
        self._reclaim_checked = True
        from .maintenance import reclaim_flagged

        if reclaim_flagged(self.root):
            self._reclaim()

    def _reclaim(self) -> None:
        """A reclaim pass: stale temporaries, unreferenced blobs, sqlite logs truncated, room
        made on the file system, the size counter recounted (maintenance.evict's ``room``)."""
        if self._reclaimed or self._index is None:
            return
        self._reclaimed = self._reclaim_checked = True
        from .maintenance import GRACE, LOW_WATERMARK, flag_reclaim, unflag_reclaim

        unflag_reclaim(self.root)  # a write failing from now on flags it again
        target = int(self.max_size * LOW_WATERMARK)
        done: int | None = None
        try:
            done = self._maintain(lambda: self._evict(target, GRACE, tidy=True, room=True), 0.0)
        except Exception as error:
            self._problems.error("cannot reclaim space in the cache", error)
        if done is None:  # busy elsewhere or failed: the next writer tries
            flag_reclaim(self.root, self._modes)

    def _open_repaired(self) -> None:
        """For clear, trim and verify on a cache this store refused (``repairable``): what is
        in the place of one of its directories is removed (a link itself, never what it leads
        to; the databases' directories moved aside), and the cache opened."""
        if self._index is not None or not self.repairable:
            return
        from .maintenance import repair_top

        self._repairs += repair_top(self.root)
        odd = _not_its_own(self.root)
        if odd is not None:
            self.failure = self._why_unusable = odd
            return
        try:
            self._index = Index(self.root, self._modes, self.max_size, self._index_damaged)
        except Exception as error:
            self.failure = self._why_unusable = f"cannot open the cache: {_describe(error)}"
            return
        self.repairable = False

    def _index_damaged(self, message: str) -> None:
        self._repairs += 1
        self._problems.report("index-damaged", message)
        self._count(corruptions=1)

    def _stats(self) -> Stats | None:
        """Open the statistics database on first use; the hot read path never needs it."""
        if self._stats_db is None and not self._stats_failed:
            try:
                from .stats import Stats

                self._stats_db = Stats(self.root, self._modes)
            except Exception as error:
                self._stats_failed = True
                self._why_no_stats = f"cannot open the statistics database: {_describe(error)}"
                self._problems.error("cannot open the statistics database", error)
            else:
                if self._stats_db.rebuilt:
                    self._repairs += 1
                    self._problems.report(
                        "stats-damaged",
                        "statistics database was unreadable; moved it aside and started"
                        " counting afresh",
                    )
        return self._stats_db

    def _count(self, **deltas: int) -> None:
        stats = self._stats()
        if stats is not None:
            try:
                stats.add(**deltas)
            except Exception as error:
                if self._problems.error("cannot update statistics", error) == "disk-full":
                    self._out_of_room()  # the size counter missed this

    # -- reading ------------------------------------------------------------------------

    def get(self, key: str) -> Manifest | None:
        """The manifest stored for `key`, or None (a miss) if absent, damaged or evicted."""
        index = self._index
        if index is None or not valid_key(key):
            return None
        try:
            raw = index.get_entry(key)
            if raw is None:
                return None
            manifest = self._decoded(index, key, raw)
            if manifest is None:
                return None
            if not all(self._blobs.present(d, s) for d, s in manifest.outputs.values()):
                index.drop_entry(key)  # a blob was evicted: the entry is dead
                return None
            return manifest
        except Exception as error:
            self._fail("cannot read the cache index", error)
            return None

    def lookup(self, keys: Sequence[str], pack: str | None = None) -> dict[str, Manifest]:
        """The manifests stored for ``keys`` (the found ones), in one pass over the index: a
        link's first look at its keys (in one batch, or a few as they are computed). Blobs
        are not checked here as in get(): materialize() finds an evicted one, and drops its
        entry then. ``pack``: a name the caller gives every link of one target, whose pack
        (store/pack.py, written by keep_pack) answers first, read once per Store."""
        index = self._index
        if index is None:
            return {}
        found: dict[str, Manifest] = {}
        try:
            keys = [k for k in keys if valid_key(k)]
            if pack is not None:
                keys = self._unpack(index, pack, keys, found)
            for key, raw in index.get_entries(keys).items():
                manifest = self._decoded(index, key, raw)
                if manifest is not None:
                    found[key] = manifest
        except Exception as error:
            self._fail("cannot read the cache index", error)
        return found

    def _unpack(
        self, index: Index, name: str, keys: Sequence[str], found: dict[str, Manifest]
    ) -> list[str]:
        """Puts into ``found`` what pack ``name`` holds of ``keys``; returns the others."""
        held = self._packs.get(name)
        if held is None:
            from .pack import decode, row_name

            data = index.get_pack(row_name(name))
            held = self._packs[name] = (decode(data) if data is not None else {}, set())
        from .pack import manifest

        raw, answered = held
        rest: list[str] = []
        for key in keys:
            found_here = manifest(key, raw[key]) if key in raw else None
            if found_here is None:
                rest.append(key)
            else:
                found[key] = self._from_pack[key] = found_here
                answered.add(key)
        return rest

    def keep_pack(self, name: str, manifests: Sequence[Manifest]) -> None:
        """Writes pack ``name`` (see lookup): the manifests a link placed from here, unless
        lookup() took exactly those from it. Best effort: a pack only spares reads."""
        index = self._index
        if index is None:
            return
        raw, answered = self._packs.get(name, ({}, set()))
        if len(raw) == len(answered) and answered == {m.key for m in manifests}:
            return  # as it is (every key it holds was asked for and placed)
        from .pack import encode, row_name

        try:
            index.set_pack(row_name(name), encode(manifests))
        except (OSError, ValueError):
            pass  # a read-only or full cache, or metadata marshal cannot carry: no pack

    def _decoded(self, index: Index, key: str, raw: object) -> Manifest | None:
        """The manifest in an index row; None for a damaged one (or one naming another key),
        which is dropped and counted, or one of an older format, dropped only."""
        manifest = Manifest.decode(key, raw)
        if manifest is None:
            index.drop_entry(key)
            if not Manifest.other_format(raw):
                self._count(corruptions=1)
        return manifest

    def materialize(self, manifest: Manifest, dests: Mapping[str, str]) -> bool:
        """Write each requested role's blob to its destination, verified; False means a miss."""
        return self.materialize_many([(manifest, dests)])[0] is not None

    def materialize_many(
        self,
        items: Sequence[tuple[Manifest, Mapping[str, str]]],
        *,
        helper: Helper | None = None,
    ) -> list[float | None]:
        """:meth:`materialize` for many entries: for each, the seconds its outputs took to
        place, or None for a miss. With a ``helper`` (a process forked earlier that waits for
        an order, :mod:`.placing`), half goes to it, from 2 * HELPER_MIN_OUTPUTS. Entries are
        dropped, damage counted and problems reported here."""
        if self._index is None:
            return [None] * len(items)
        plans: list[tuple[int, str, int, str]] = []  # (item, digest, size, destination)
        unplaceable: set[int] = set()
        for n, (manifest, dests) in enumerate(items):
            for role, dest in dests.items():
                ref = manifest.outputs.get(role)
                if ref is None:
                    unplaceable.add(n)
                    break
                plans.append((n, ref[0], ref[1], os.fspath(dest)))
        hard_link = self.hard_link
        stage, staged = self._stage(plans) if plans and not hard_link else (None, set())
        rows: list[Plan] = [
            (digest, size, dest,
             stage if stage is not None and (os.path.dirname(dest) or ".") in staged else None)
            for _, digest, size, dest in plans
        ]  # fmt: skip
        blobs = self._blobs

        def work(share: Sequence[int]) -> list[Any]:
            return place(blobs, hard_link, [rows[j] for j in share])

        def revive(value: Any) -> Any:
            outcome, took = value
            if outcome not in (Outcome.OK, Outcome.MISSING, Outcome.CORRUPT):
                errno_, text, name = outcome
                outcome = [int(errno_), str(text), name if name is None else str(name)]
            return [outcome, float(took)]

        try:
            if helper is not None and len(plans) >= 2 * HELPER_MIN_OUTPUTS:
                order = (self.root, self.group_shared, hard_link)
                placed = _helped(helper, work, len(plans), lambda share: (
                    *order, [rows[j] for j in share]), revive)  # fmt: skip
            else:
                placed = work(range(len(plans)))
        except Exception as error:  # the store promises not to raise: all misses, then
            self._fail("cannot copy a cached output", error)
            return [None] * len(items)
        finally:
            if stage is not None:
                self._blobs.unstage(stage)
        took: list[float | None] = [0.0] * len(items)
        for n in unplaceable:
            took[n] = None
        for (n, digest, size, _), (outcome, seconds) in zip(plans, placed, strict=True):
            if took[n] is None:
                continue  # one of its outputs already failed
            if outcome == Outcome.OK:
                took[n] = (took[n] or 0.0) + seconds
                continue
            took[n] = None
            if isinstance(outcome, list):
                self._fail("cannot copy a cached output", OSError(*outcome))
                continue
            self._drop_placed(items[n][0])
            if outcome == Outcome.CORRUPT:
                self._problems.report(
                    "corrupt-blob", f"blob {digest} was damaged; removed it (a miss)"
                )
                self._count(corruptions=1, size=-size)
        return took

    def _stage(self, plans: Sequence[tuple[int, str, int, str]]) -> tuple[str | None, set[str]]:
        """A stage for the copies (Blobs.stage) and the output directories it serves: those on
        its file system (a copy is renamed to its output) whose new files take the creator's
        group (not setgid). None for fewer than STAGE_MIN_OUTPUTS outputs, in a group-shared
        cache and where the stage itself is setgid (a cache under a setgid directory): a
        copy made in it would take that group, not the one the output's directory gives."""
        if self._modes.group_shared or len(plans) < STAGE_MIN_OUTPUTS:
            return None, set()
        stage = self._blobs.stage()
        if stage is None:
            return None, set()
        try:
            st = os.stat(stage)
        except OSError:
            st = None
        if st is None or st.st_mode & stat.S_ISGID:  # under a setgid directory: its group
            self._blobs.unstage(stage)
            return None, set()
        device = st.st_dev
        staged = set()
        for directory in {os.path.dirname(p[3]) or "." for p in plans}:
            try:
                st = os.stat(directory)
                if st.st_dev == device and not st.st_mode & stat.S_ISGID:
                    staged.add(directory)
            except OSError:
                continue
        if not staged:
            self._blobs.unstage(stage)
            return None, set()
        return stage, staged

    def drop(self, key: str) -> None:
        """Forget the entry for `key` (its blobs go when nothing else refers to them)."""
        if self._index is not None and valid_key(key):
            self._drop(key)

    def _drop_placed(self, manifest: Manifest) -> None:
        """Drops the entry of a manifest whose blob was missing or damaged; one a pack gave
        only while its row still says the same (a row stored since is another's to judge)."""
        key = manifest.key
        if self._from_pack.get(key) is manifest:
            index = self._index
            try:
                raw = index.get_entry(key) if index is not None else None
            except Exception:
                raw = None
            if raw is None or Manifest.decode(key, raw) != manifest:
                return
        self._drop(key)

    def _drop(self, key: str) -> None:
        index = self._index
        if index is not None:
            try:
                index.drop_entry(key)
            except Exception as error:
                self._fail("cannot update the cache index", error)

    # -- the storage protocol (store/tier.py) ----------------------------------------------

    def get_many(
        self, keys: Sequence[str], *, level: int = 0, signing_key: bytes | None = None
    ) -> list[bytes | None]:
        """Each key's entry as one value (store.entry), for another tier, compressed at
        ``level`` (0: not) and signed with ``signing_key`` when given; None for a miss or an
        entry whose blobs are gone or damaged (re-hashed as they are encoded)."""
        from . import entry

        values: list[bytes | None] = []
        for key in keys:
            manifest = self.get(key)
            value = None
            if manifest is not None:
                try:
                    data: dict[str, bytes] = {}
                    for role, (digest, size) in manifest.outputs.items():
                        blob = self._blobs.read_verified(digest, size)
                        if blob is None:
                            raise ValueError("a blob is gone or damaged")
                        data[role] = blob
                    value = entry.encode(key, data, manifest.meta, manifest.outputs,
                                         level=level, signing_key=signing_key)  # fmt: skip
                except (OSError, ValueError):
                    value = None  # evicted meanwhile, or a damaged blob: a miss
            values.append(value)
        return values

    def put_many(self, items: Sequence[tuple[str, bytes]], release: str | None = None) -> None:
        """Imports entries from another tier, in one index transaction; a value that does
        not decode as the value of its key is skipped. (The disk store's claims are its own:
        ``release`` is for claiming tiers and ignored.)"""
        from . import entry

        index = self._index
        if index is None:
            return
        self._before_write()
        for attempt in range(_ATTEMPTS):
            published: list[tuple[str, os.stat_result]] = []
            try:
                rows: list[tuple[str, str]] = []
                new_bytes = original = 0
                for key, value in items:
                    if not valid_key(key):
                        continue
                    try:
                        outputs, meta = entry.decode(value, key)
                    except entry.Refused:
                        continue
                    refs: dict[str, tuple[str, int]] = {}
                    for role, (digest, data) in outputs.items():
                        _, size, stored = self._ingested(self._importer(data, digest), published)
                        refs[role] = (digest, size)
                        new_bytes += stored
                        original += size if stored else 0
                    manifest = Manifest(key, refs, {**meta, "created": time.time()})
                    rows.append((key, manifest.encode()))
                if not rows:
                    return
                index.set_entries(rows)  # blobs first, entries last, as in put()
            except Exception as error:
                self._withdraw(published, error)
                if attempt < _ATTEMPTS - 1 and self._make_way(error):
                    continue
                self._fail("cannot store in the cache", error)
                return
            break
        self._reclaimed = False
        self._count(stores=len(rows), bytes_stored=new_bytes, bytes_original=original,
                    size=new_bytes)  # fmt: skip
        self._maybe_evict()

    # -- writing ------------------------------------------------------------------------

    def put(
        self,
        key: str,
        outputs: Mapping[str, str],
        *,
        duration: float,
        toolchain: str,
        key_version: int,
        meta: Mapping[str, Any] | None = None,
    ) -> bool:
        """Copy the outputs in (never moving or linking the sources) and record the entry;
        ``meta`` adds JSON-able fields to the entry's metadata (e.g. a compiler's messages, or
        ``wall``: the share of its link's wall time the compile accounted for)."""
        index = self._index
        if index is None or not valid_key(key) or not outputs:
            return False
        self._before_write()
        for attempt in range(_ATTEMPTS):
            published: list[tuple[str, os.stat_result]] = []
            try:
                refs: dict[str, tuple[str, int]] = {}
                new_bytes = original = 0
                for role, source in outputs.items():

                    def ingest(source: str = os.fspath(source)) -> tuple[str, int, int]:
                        return self._blobs.ingest(source)

                    digest, size, stored = self._ingested(ingest, published)
                    refs[role] = (digest, size)
                    new_bytes += stored
                    original += size if stored else 0
                fields: dict[str, Any] = {
                    **(meta or {}),
                    "created": time.time(),
                    "duration": float(duration),
                    "toolchain": str(toolchain),
                    "key_version": int(key_version),
                }
                # Blobs first, entry last: an entry never names a blob that is not yet in place.
                index.set_entry(key, Manifest(key, refs, fields).encode())
            except Exception as error:
                self._withdraw(published, error)
                if attempt < _ATTEMPTS - 1 and self._make_way(error):
                    continue  # damage blocked a path: cleared, tried once more
                self._fail("cannot store in the cache", error)
                return False
            break
        self._reclaimed = False
        self._count(stores=1, bytes_stored=new_bytes, bytes_original=original, size=new_bytes)
        self._maybe_evict()
        return True

    def _ingested(
        self, ingest: Callable[[], tuple[str, int, int]],
        published: list[tuple[str, os.stat_result]],
    ) -> tuple[str, int, int]:  # fmt: skip
        """Runs ``ingest`` (one blob in: digest, size, bytes newly stored): a new blob's file
        is noted in ``published``, for _withdraw; for one already there, a check that it is
        a regular file, since a blob path taken by anything else (a directory) would be
        trusted by every later put of it."""
        digest, size, stored = ingest()
        path = self._blobs.path(digest)
        if not stored:
            try:
                regular = stat.S_ISREG(os.lstat(path).st_mode)
            except OSError:
                regular = True  # evicted meanwhile, or compressed: Blobs._publish checked it
            if regular:
                return digest, size, stored
            from .repair import remove

            if not remove(path):
                raise IsADirectoryError(errno.EISDIR, "not a regular file", path)
            digest, size, stored = ingest()
            if not stored:
                return digest, size, stored  # another put's, published meanwhile
        path += ZST if self._blobs.level else ""
        try:
            published.append((path, os.stat(path)))
        except OSError:
            pass
        return digest, size, stored

    def _importer(self, data: bytes, digest: str) -> Callable[[], tuple[str, int, int]]:
        """An ingest for _ingested of bytes whose digest was checked (put_many)."""
        return lambda: (digest, *self._blobs.ingest_bytes(data, digest))

    def _withdraw(
        self, published: Sequence[tuple[str, os.stat_result]], error: BaseException
    ) -> None:
        """Removes the blobs a failed put published, which no entry names: left, they would
        be bytes no counter knows of, collected by no pass the counter starts (on a full disk,
        for good). One another put found in place since (its publish refreshed the mtime,
        and its entry names it) is left to that put; all are left when the entry was written
        and only its row file was not (``error`` an index.RowFileError)."""
        from .index import RowFileError

        if isinstance(error, RowFileError):
            return
        for path, seen in published:
            try:
                now = os.stat(path)
                if (now.st_ino, now.st_dev, now.st_mtime_ns) == (
                    seen.st_ino, seen.st_dev, seen.st_mtime_ns,
                ):  # fmt: skip
                    os.unlink(path)
            except OSError:
                pass

    def _make_way(self, error: BaseException) -> bool:
        """Clears damage that blocked a write (see store/repair.py); True if there was some."""
        from .repair import blocked_paths, make_way

        blocked = blocked_paths(self.root, error)
        return any([make_way(self.root, path, directory) for path, directory in blocked])

    def _maybe_evict(self) -> None:
        stats = self._stats()
        if stats is None:
            return
        try:
            if stats.get("size") <= self.max_size:
                return
            from .maintenance import GRACE, LOW_WATERMARK

            self._maintain(lambda: self._evict(int(self.max_size * LOW_WATERMARK), GRACE), 0.0)
        except Exception as error:
            self._problems.error("cannot evict from the cache", error)

    def _evict(self, target: int, grace: float, *, tidy: bool = False, room: bool = False) -> int:
        from .maintenance import evict

        assert self._index is not None
        return evict(self._blobs, self._index, self._stats(), target, grace=grace,
                     modes=self._modes, tidy=tidy, room=room)  # fmt: skip

    def _maintain(self, work: Callable[[], int], wait: float) -> int | None:
        """Run a maintenance pass under the store-wide maintenance lease; skip (None) when it
        is busy and `wait` is 0 (someone else is already evicting), else run after `wait`
        regardless. A lease that cannot be taken at all (no room for its marker, damage at
        its path that cannot be cleared, ...) is reported and the pass runs without it, as
        after a wait: every step tolerates a concurrent pass, and on a full disk the pass is
        what makes room."""
        from .claims import claim
        from .repair import make_way

        path = os.path.join(self.root, "locks", "maintenance.lock")
        held: Claim | None = None
        for attempt in range(2):
            try:
                self._modes.makedirs(os.path.dirname(path))
                held = claim(path, self._modes.file, wait, lambda: False)
                break
            except Exception as error:
                if attempt == 0 and make_way(self.root, path):
                    self._repairs += 1  # damage at the lock's path: verify reports it
                    continue
                from .problems import classify

                self._problems.report(  # of its kind: a full disk is said once
                    classify(error),
                    f"cannot take the maintenance lock {path}: "
                    f"{getattr(error, 'strerror', None) or _describe(error)}; "
                    "went on without it",
                )
        if held is None:
            return work()
        with held:
            if not held.acquired and wait <= 0:
                return None
            return work()

    # -- claims -------------------------------------------------------------------------

    def claim(self, key: str, *, wait: float) -> Claim:
        """Single-flight: acquire the right to compute `key`, waiting at most `wait` seconds.

        acquired=False means: an entry appeared (read it), the wait ran out or the store is
        degraded (compute without the claim). A dead holder's claim is taken over.
        """
        from .claims import Claim, claim, claim_path  # not before a link has a miss

        if self._index is None or not valid_key(key):
            return Claim(False, "unusable")
        try:
            path = claim_path(self.root, key)
            self._modes.makedirs(os.path.dirname(path))
            return claim(path, self._modes.file, wait, lambda: self._has(key))
        except Exception as error:
            self._problems.error("cannot take a claim", error)
            return Claim(False, "error")

    def _has(self, key: str) -> bool:
        index = self._index
        try:
            return index is not None and index.has_entry(key)
        except Exception:
            return False

    # -- writes behind the caller --------------------------------------------------------

    def write_behind(
        self, memos: Sequence[tuple[str, str, str]], entries: Sequence[tuple[str, bytes]]
    ) -> None:
        """Stores ``memos`` (namespace, key, value) and ``entries`` (key, value from another
        tier) in a detached process (see store/behind.py) and returns at once; writes them
        here when this process already opened the index for writing (then it is cheap) or
        when no process can be started."""
        index = self._index
        if index is None or not (memos or entries):
            return
        if not index.writing:
            import marshal

            from . import behind

            work = (self.max_size, self.group_shared, list(memos), list(entries),
                    self.compression_level)  # fmt: skip
            try:
                with self._blobs.temp_file() as (fd, path):
                    write_all(fd, marshal.dumps(work))
            except OSError:
                path = ""
            if path:
                if behind.start(self.root, self._modes, path):
                    return
                unlink_quietly(path)
        self.write_now(memos, entries)

    def write_now(
        self, memos: Sequence[tuple[str, str, str]], entries: Sequence[tuple[str, bytes]]
    ) -> None:
        """:meth:`write_behind`'s work, here: memos by namespace, then the entries, one
        transaction each."""
        by_namespace: dict[str, list[tuple[str, str]]] = {}
        for namespace, key, value in memos:
            by_namespace.setdefault(namespace, []).append((key, value))
        for namespace, items in by_namespace.items():
            self.memo_put_many(namespace, items)
        if entries:
            self.put_many(entries)

    def settle(self) -> None:
        """Waits (bounded) for the writes running behind other processes, so that what they
        store is seen here; a link calls it before its first miss is final."""
        if self._index is not None:
            from . import behind

            behind.settle(self.root, self._modes)

    # -- statistics ---------------------------------------------------------------------

    def record(
        self,
        *,
        hits: int = 0,
        misses: int = 0,
        time_saved: float = 0.0,
        bytes_served: int = 0,
        **counters: int,
    ) -> None:
        """One batched, atomic statistics update per link; `counters` are the caller's own
        (integer) counters, kept and reported by stats() beside the store's."""
        if self._index is None:
            return
        deltas = {
            "hits": hits,
            "misses": misses,
            "time_saved_us": round(time_saved * 1e6),
            "bytes_served": bytes_served,
            **counters,
        }
        if self._stats_db is None and not self._stats_failed:
            # Not opened by this process (a link that only read): a file, folded in later.
            from . import tally

            if tally.leave(os.path.join(self.root, "stats"), self._modes, deltas):
                return
        self._count(**deltas)

    def stats(self) -> dict[str, int | float]:
        """Counters shared by every process, plus current entries, size and limit (zeros for
        what cannot be read; ``failure`` then says why)."""
        from .stats import COUNTERS

        self.failure = None
        self.settle()
        counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        entries = 0
        stats = self._stats() if self._index is not None else None
        if self._index is None:
            self.failure = self._why_unusable
        elif stats is None:
            self.failure = self._why_no_stats
        try:
            if stats is not None:
                try:
                    stats.fold()  # what links left pending since this process opened it
                except Exception as error:  # a full disk: read what the database has
                    self._problems.error("cannot add the counts links left pending", error)
                counts = stats.all()
            if self._index is not None:
                entries = self._index.count_entries()
        except Exception as error:
            self._fail("cannot read statistics", error, report=False)
            self.failure = f"cannot read statistics: {self._failed(error)}"
        result: dict[str, int | float] = {
            k: v for k, v in counts.items() if k not in ("time_saved_us", "size")
        }
        result["time_saved"] = counts["time_saved_us"] / 1e6
        result["entries"] = entries
        result["size"] = max(0, counts["size"])
        result["max_size"] = self.max_size
        return result

    def zero_stats(self) -> bool:
        """Every statistics counter back to 0 (not ``size``: what the store holds); False
        when the statistics cannot be written."""
        if self._index is None:
            return False
        self.settle()  # a writer still running would add counts from before
        stats = self._stats()
        if stats is None:
            return False
        try:
            stats.zero()
        except Exception as error:
            self._problems.error("cannot zero the statistics", error)
            return False
        return True

    # -- maintenance --------------------------------------------------------------------

    def clear(self) -> bool:
        """Remove every entry, memo and blob (statistics are kept); False (and ``failure``
        says why) if that could not be done."""
        self.failure = None
        self._open_repaired()
        if self._index is None:
            self.failure = self._why_unusable
            return False
        self.settle()  # else a writer still running would put entries back afterwards
        from .maintenance import checkpoint_databases, flag_reclaim, repair_layout, unflag_reclaim

        def work() -> int:
            index = self._index
            assert index is not None
            repair_layout(self.root)
            # The files first: on a full disk sqlite cannot even map its shared memory, let
            # alone log the deletions, until they are gone.
            for info in list(self._blobs.scan()):
                self._blobs.remove(info.digest)
            index.rows.keep_only(set())
            checkpoint_databases(self.root, self._modes)
            left = next(iter(self._blobs.scan()), None)
            if left is not None:
                os.unlink(left.path)  # says why it could not be removed (read-only, ...)
            try:
                index.clear()
            except Exception:
                # Still no room for sqlite (or its database is beyond use): the database goes
                # with its rows, and the next writer starts a fresh one.
                index.close()
                for suffix in ("", "-wal", "-shm"):
                    try:
                        os.unlink(os.path.join(self.root, "index", "cache.db" + suffix))
                    except FileNotFoundError:
                        pass
                flag_reclaim(self.root, self._modes)  # the size counter: the next writer's
                return 0
            freed = self._evict(0, 0.0, tidy=True)
            stats = self._stats()
            if stats is not None:
                stats.set("size", 0)
            unflag_reclaim(self.root)
            return freed

        try:
            self._maintain(work, 30.0)
        except Exception as error:
            self.failure = self._failed(error)
            self._fail("cannot clear the cache", error, report=False)
        return self.failure is None

    def trim(self, max_size: int | None = None) -> int:
        """Evict least recently used blobs until at most `max_size` bytes remain; bytes freed.
        Also what a reclaim does (unreferenced blobs, stale temporaries, sqlite logs, and room
        on the file system if a write found it full). ``failure`` says why it could not."""
        self.failure = None
        self._open_repaired()
        if self._index is None:
            self.failure = self._why_unusable
            return 0
        from .maintenance import (
            GRACE,
            flag_reclaim,
            reclaim_flagged,
            repair_layout,
            shortfall,
            unflag_reclaim,
        )

        target = self.max_size if max_size is None else int(max_size)
        self.settle()
        # A write found the disk full, or it is now: trim makes room as a reclaim does.
        room = reclaim_flagged(self.root) or shortfall(self.root, []) != (0, 0)

        def work() -> int:
            repair_layout(self.root)
            if room:
                unflag_reclaim(self.root)
            return self._evict(target, GRACE, tidy=True, room=room)

        try:
            return self._maintain(work, 30.0) or 0
        except Exception as error:
            if room:
                flag_reclaim(self.root, self._modes)
            self.failure = self._failed(error)
            self._fail("cannot trim the cache", error, report=False)
            return 0

    def evict_older_than(self, age: float) -> int:
        """Evict every entry not used for ``age`` seconds (store/age.py); bytes freed."""
        if self._index is None:
            return 0
        from .age import evict_older_than

        self.settle()

        def work() -> int:
            assert self._index is not None
            return evict_older_than(self._blobs, self._index, self._stats(), age)

        try:
            return self._maintain(work, 30.0) or 0
        except Exception as error:
            self.failure = self._failed(error)
            self._fail("cannot trim the cache", error, report=False)
            return 0

    def verify(self) -> VerifyReport:
        """Re-hash every blob; drop corrupt blobs and the entries that refer to them; repair
        the store's paths and databases. The report's ``problem`` (and ``failure``) says what
        could not be checked."""
        from dataclasses import replace

        from .maintenance import VerifyReport, verify

        self.failure = None
        repairs = self._repairs
        self._open_repaired()
        if self._index is None:
            self.failure = self._why_unusable
            return VerifyReport(repaired=self._repairs - repairs, problem=self.failure)
        self.settle()
        report = VerifyReport()

        def work() -> int:
            nonlocal report
            assert self._index is not None
            report = verify(self._blobs, self._index)
            # The statistics database, opened afresh: one that is not a database is moved aside.
            self._close_stats()
            self._stats_failed = False
            if self._stats() is None:
                report = replace(report, problem=report.problem or self._why_no_stats)
            return 0

        try:
            self._maintain(work, 30.0)
        except Exception as error:
            self._fail("cannot verify the cache", error, report=False)
            report = replace(report, problem=report.problem or self._failed(error))
        report = replace(report, repaired=report.repaired + self._repairs - repairs)
        left = self._room_left() if report.problem is not None else None
        if left is not None and "on the cache's file system" not in (report.problem or ""):
            report = replace(
                report, problem=f"{report.problem} ({left} on the cache's file system)"
            )
        if report.blobs_corrupt:
            self._count(corruptions=report.blobs_corrupt)
        self.failure = report.problem
        return report

    # -- memo ---------------------------------------------------------------------------

    def memo_get(self, namespace: str, key: str) -> str | None:
        """A small string remembered under (namespace, key), or None; evictable."""
        index = self._index
        if index is None:
            return None
        try:
            value = index.get_memo(namespace, key)
        except Exception as error:
            self._fail("cannot read the cache memo", error)
            return None
        return value if isinstance(value, str) else None

    def memo_get_many(self, namespace: str, keys: Sequence[str]) -> dict[str, str]:
        """:meth:`memo_get` for many keys in one pass over the index: the found ones."""
        index = self._index
        if index is None or not keys:
            return {}
        try:
            found = index.get_memos(namespace, keys)
        except Exception as error:
            self._fail("cannot read the cache memo", error)
            return {}
        return {k: v for k, v in found.items() if isinstance(v, str)}

    def memo_put(self, namespace: str, key: str, value: str) -> None:
        """Remember a small string; failures are reported once and otherwise ignored."""
        index = self._index
        if index is None:
            return
        try:
            index.set_memo(namespace, key, str(value))
        except Exception as error:
            self._fail("cannot write the cache memo", error)

    def memo_put_many(self, namespace: str, items: Sequence[tuple[str, str]]) -> None:
        """:meth:`memo_put` for many keys in one store transaction (one commit per link)."""
        index = self._index
        if index is None or not items:
            return
        try:
            index.set_memos(namespace, [(k, str(v)) for k, v in items])
        except Exception as error:
            self._fail("cannot write the cache memo", error)

    def close(self) -> None:
        """Close the databases (optional: they close with the process)."""
        self._close_stats()
        self._disable()

    def _close_stats(self) -> None:
        stats, self._stats_db = self._stats_db, None
        if stats is not None:
            try:
                stats.close()
            except Exception:
                pass

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(error: BaseException) -> str:
    """An error in a few words, for ``Store.failure``, as warnings put it."""
    from .problems import classify, describe

    return describe(error, classify(error))
