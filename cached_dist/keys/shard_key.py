"""The shard ingredient of the key: canonical summary shards, memoized, decoded once a link.

A shard names modules by path and values by per-link ids (see docs/shards.md); its canonical
form (:mod:`cached_dist.bitcode.shard`, computed by the C extension when it is built, see
:mod:`cached_dist.bitcode.native`) does not. Decoding still costs something, so:

- the canonical digest is memoized in the store under the raw shard's digest plus the job's
  own path -> content map (what the canonical form depends on): byte-identical shards, as
  with thin archives or no archives, are never decoded twice; shards of jobs that name a
  regular archive member (a per-link name) are neither looked up nor stored, as their memo
  key could never come again;
- the shards left to decode are decoded here, except in a warm server's child, where those
  of a regular archive's members (decoded on every link) are mostly decoded by the link's
  early worker from the moment the job file is loaded (serve/early.py), while this process
  checks the job file and opens the store.
"""

from __future__ import annotations

import os

import xxhash

from ..jobfile import Job
from .digests import Digests

#: With the native decoder, shards are decoded here unless there are at least this many bytes
#: of them to decode: 1 MB takes it ~25 ms, about one round trip to a remote tier over a WAN,
#: and asking a remote for shard digests is a round trip of its own (the results' lookup needs
#: the digests first). The pure-Python decoder (~1.4 MB/s) always asks.
SHARED_MIN_BYTES = 1 << 20


TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Protocol

    class Memo(Protocol):
        def memo_get(self, namespace: str, key: str) -> str | None: ...
        def memo_get_many(self, namespace: str, keys: Sequence[str]) -> dict[str, str]: ...
        def memo_put(self, namespace: str, key: str, value: str) -> None: ...
        def memo_put_many(self, namespace: str, items: Sequence[tuple[str, str]]) -> None: ...

    Task = tuple[int, str, bytes | None, Job]  # job index, memo key, shard (None: unread), job
    Decoded = tuple[str, bool] | None

    class SharedMemo(Protocol):
        """A memo other machines share (the remote tier): batched, best effort."""

        def memo_many(self, namespace: str, keys: Sequence[str]) -> dict[str, str]: ...
        def memo_share(self, namespace: str, items: Sequence[tuple[str, str]]) -> None: ...

    class Early(Protocol):
        """A worker decoding some of the link's per-link shards (serve/early.py): ``share``
        the jobs it decodes, ``members`` the link's per-link member names."""

        share: list[Job]
        members: set[str]

        def modules(self, digests: Digests) -> None: ...
        def take(self, digests: Digests) -> dict[int, Decoded]: ...


def spellings(path: str, cwd: str, normal_cwd: bool = False) -> tuple[str, ...]:
    """How a shard may spell a path: as given, normalized, absolute (``os.path.abspath``
    against ``cwd``, asked once per link, not once per path). ``normal_cwd``: ``cwd`` is its
    own normal form, so a path of one component is spelled without ``normpath`` (a regular
    archive's members, every module of such a link: ~1 us less a path)."""
    if normal_cwd and "/" not in path and path not in ("", ".", ".."):
        return (path, path, f"/{path}" if cwd == "/" else f"{cwd}/{path}")
    normal = os.path.normpath(path)
    return (path, normal, normal if os.path.isabs(path) else os.path.normpath(
        os.path.join(cwd, path)))  # fmt: skip


class ModulePaths:
    """Which content each spelling of a module path stands for, for every job of a link.

    A job's shard may name only the job's own module and imports, by any spelling of their
    paths (:func:`spellings`; the first of the job's paths to spell it wins). Jobs share most
    paths, so each distinct path is spelled and hashed once per link and a job's lookup is a
    dict probe plus a check that the path is its own; should two paths of different content
    spell alike (``a/../b`` through a symbolic link), every job gets its own table instead.
    """

    def __init__(self, digests: Digests) -> None:
        self.digests = digests
        self.by_spelling: dict[str, tuple[set[str], str]] = {}  # -> (paths spelled so, digest)
        self.known: set[str] = set()
        self.ambiguous = False
        self.cwd = os.getcwd()
        self.normal_cwd = os.path.normpath(self.cwd) == self.cwd

    def _add(self, path: str) -> None:
        digest = self.digests.of(path)  # OSError: the job is not cacheable
        for spelling in spellings(path, self.cwd, self.normal_cwd):
            found = self.by_spelling.get(spelling)
            if found is None:
                self.by_spelling[spelling] = ({path}, digest)
            else:
                found[0].add(path)
                if found[1] != digest:
                    self.ambiguous = True
        self.known.add(path)

    def lookup(self, job: Job) -> tuple[Callable[[str], str | None], frozenset[str] | None]:
        """``module_digest`` for the decoder (a path the job's shard names -> its content),
        and the job's own paths when a path among them maps to ``digests.known[path]``, as
        the decoder may then look it up there itself."""
        own = (job.module, *job.imports)
        if not self.known.issuperset(own):
            for path in own:
                if path not in self.known:
                    self._add(path)
        if self.ambiguous:
            return _table_lookup(job, self.digests, self.cwd), None
        # Not ambiguous: each own path's spelling as is maps to its own digest.
        paths = frozenset(own)
        by_spelling = self.by_spelling

        def module_digest(path: str) -> str | None:
            found = by_spelling.get(path)
            if found is None or paths.isdisjoint(found[0]):
                found = by_spelling.get(os.path.normpath(path))
                if found is None or paths.isdisjoint(found[0]):
                    return None
            return found[1]

        return module_digest, paths


def _table_lookup(job: Job, digests: Digests, cwd: str) -> Callable[[str], str | None]:
    """The job's own spelling -> content table, first path first (the general case)."""
    mapping: dict[str, str] = {}
    for path in (job.module, *job.imports):
        d = digests.of(path)
        for spelling in spellings(path, cwd):
            mapping.setdefault(spelling, d)

    def module_digest(path: str) -> str | None:
        return mapping.get(path) or mapping.get(os.path.normpath(path))

    return module_digest


def _decode(
    data: bytes, module_digest: Callable[[str], str | None],
    own: frozenset[str] | None = None, known: dict[str, str] | None = None,
) -> tuple[str, bool]:  # fmt: skip
    from ..bitcode.native import canonical_digest

    digest, exact, _ = canonical_digest(data, module_digest, own, known)
    return ("canon:" if exact else "raw:") + digest, exact


class ShardKeys:
    """Computes every job's shard digest for one link up front; then serves them to the key."""

    def __init__(
        self, memo: Memo, shared: SharedMemo | None = None, early: Early | None = None,
        hold: bool = False,
    ) -> None:  # fmt: skip
        self.memo = memo
        self.shared = shared  # asked, in one batch, for what the local memo lacks
        # Whether what was decoded waits for share_held() to go to ``shared``: a warm
        # server's child writes nothing anywhere before its link is its own.
        self.hold = hold
        self.held: list[tuple[str, str]] = []
        self.early = early  # a worker decoding some per-link shards of the jobs begin() gets
        self.digests: dict[int, str] = {}
        self.decoded = 0  # shards decoded in this link
        self.memoized = 0  # shards whose canonical digest came from the memo
        self.inexact = 0  # shards that fell back to the raw form (can only miss)
        # The early worker, the link's module paths and the worker's share, for finish().
        self._later: tuple[Early, ModulePaths, list[Task]] | None = None

    def prepare(self, jobs: Sequence[Job], digests: Digests) -> None:
        """Looks up the memo for every job (one batch); decodes the rest."""
        self.begin(jobs, digests)
        self.finish(digests)

    def begin(self, jobs: Sequence[Job], digests: Digests) -> list[Job]:
        """:meth:`prepare`, except for the shards of the early worker's share: returns those
        jobs (none without an early worker), whose digests :meth:`finish` takes from it. The
        link keys (and looks up) the other jobs meanwhile."""
        todo: list[Task] = []
        asked: list[Task] = []
        if self.early is not None:
            self.early.modules(digests)  # none of them read here, then
            members = self.early.members
        else:
            members = per_link_members(named_modules(jobs))
        for job in jobs:
            if job.shard is None:
                self.digests[job.index] = "none"
                continue
            if members and names_any(members, job):
                # The memo key holds this link's member names: it could never hit again. Its
                # shard is read where it is decoded (perhaps in a worker).
                todo.append((job.index, "", None, job))
                continue
            try:
                data = digests.read(job.shard)
                asked.append((job.index, _memo_key(data, job, digests), data, job))
            except OSError:
                continue  # the key computation will fail on it too: not cacheable
        if asked:
            known = self.memo.memo_get_many("shard", [t[1] for t in asked])
            for task in asked:
                found = known.get(task[1])
                if found is None:
                    todo.append(task)
                else:
                    self.digests[task[0]] = found
                    self.memoized += 1
        shareable = [t for t in todo if t[1]]  # per-link shards have no key another link knows
        shared = self.shared if self.shared and shareable and _worth_asking(shareable) else None
        if shared is not None:
            known = shared.memo_many("shard", [t[1] for t in shareable])
            for index, memo_key, _, _ in todo:
                found = known.get(memo_key)
                if found is not None:
                    self.digests[index] = found
                    self.memoized += 1
            self.memo.memo_put_many("shard", list(known.items()))
            todo = [t for t in todo if t[1] not in known]
        paths = ModulePaths(digests)
        later: list[Task] = []
        if self.early is not None:  # its share (per-link shards only: nothing to memoize)
            theirs = {job.index for job in self.early.share}
            later = [t for t in todo if t[0] in theirs]
            todo = [t for t in todo if t[0] not in theirs]
            self._later = (self.early, paths, later)
        learned = self._record(todo, [decode_task(t, paths) for t in todo])
        self.memo.memo_put_many("shard", learned)  # one transaction for the whole link
        if learned and shared is not None:
            if self.hold:
                self.held = learned
            else:
                shared.memo_share("shard", learned)
        return [t[3] for t in later]

    def finish(self, digests: Digests) -> None:
        """Takes the early worker's results for the jobs :meth:`begin` returned; decodes
        here those it could not give."""
        if self._later is None:
            return
        early, paths, later = self._later
        self._later = None
        if later:
            done = early.take(digests)
            self._record(later, [done[t[0]] if t[0] in done else decode_task(t, paths)
                                 for t in later])  # fmt: skip

    def _record(self, tasks: list[Task], decoded: list[Decoded]) -> list[tuple[str, str]]:
        """Keeps each task's digest; returns the (memo key, digest) pairs worth memoizing."""
        learned: list[tuple[str, str]] = []
        for (index, memo_key, _, _), result in zip(tasks, decoded, strict=True):
            if result is None:
                continue  # unreadable: the key computation fails on it too
            digest, exact = result
            self.digests[index] = digest
            self.decoded += 1
            if not exact:
                self.inexact += 1
            if memo_key:  # none for shards whose key can never come again
                learned.append((memo_key, digest))
        return learned

    def share_held(self) -> None:
        """Shares what :meth:`begin` held back (``hold``)."""
        if self.held and self.shared is not None:
            self.shared.memo_share("shard", self.held)
        self.held = []

    def __call__(self, job: Job, digests: Digests) -> str:
        """The :data:`cached_dist.keys.key.ShardDigest` for jobs given to :meth:`prepare`."""
        found = self.digests.get(job.index)
        if found is None:
            raise OSError(f"summary shard {job.shard} could not be read")
        return found


def named_modules(jobs: Sequence[Job]) -> set[str]:
    """Every module the jobs name, once: each job names the modules it imports again."""
    named: set[str] = set()
    for job in jobs:  # set methods, not a tuple a job: ~0.1 ms less for 301 jobs
        named.add(job.module)
        named.update(job.imports)
    return named


def names_any(paths: set[str], job: Job) -> bool:
    """Whether the job's module or one of its imports is in ``paths`` (the module first:
    most jobs of a regular archive are one of its members)."""
    return job.module in paths or not paths.isdisjoint(job.imports)


def per_link_members(named: set[str]) -> set[str]:
    """The per-link member names among these module paths."""
    return {p for p in named if per_link_member(p)}


def _worth_asking(todo: list[Task]) -> bool:
    """Whether to ask a shared memo for these shards (and tell it what was decoded): only
    when decoding them here would cost more than the round trip (see SHARED_MIN_BYTES)."""
    from ..bitcode.native import NATIVE

    return not NATIVE or sum(len(t[2] or b"") for t in todo) >= SHARED_MIN_BYTES


def per_link_member(path: str) -> bool:
    """Whether ``path`` is LLD's name for a regular archive member, new in every link: the
    member's module name, then ``.ORDINAL.PID.o`` (the linker's pid in hex). ld.lld's
    module name is ``libx.a(t2.o at 106)``; lld-link's runs the archive, member and offset
    together (``libb.libb.obj3016``): LLD writes either without a directory."""
    head, paren, tail = path.rpartition(")")
    if paren:
        member = " at " in head and "(" in head
        return member and tail.endswith(".o") and tail.count(".") == 3
    if path[-2:] != ".o" or "/" in path or "\\" in path:
        return False
    parts = path[:-2].rsplit(".", 2)  # lld-link's: ["libb.libb.obj3016", "2", "18AC"]
    if len(parts) != 3:
        return False
    module, ordinal, pid = parts
    return module[-1:].isdigit() and ordinal.isdigit() and pid != "" and not pid.strip(_HEX)


_HEX = "0123456789ABCDEF"


def _memo_key(data: bytes, job: Job, digests: Digests) -> str:
    """The raw shard and the content of every module it names, by the path it names."""
    h = xxhash.xxh3_128(data)
    of = digests.of
    for path in (job.module, *job.imports):
        h.update(b"\0" + path.encode("utf-8", "surrogateescape") + b"\0" + of(path).encode())
    return h.hexdigest()


def decode_task(task: Task, paths: ModulePaths) -> Decoded:
    """Reads (if not yet read) and decodes one shard; None if it or a module is unreadable."""
    _, _, data, job = task
    try:
        if data is None:
            data = paths.digests.read(job.shard or "")
        lookup, own = paths.lookup(job)
    except OSError:
        return None
    return _decode(data, lookup, own, paths.digests.known if own is not None else None)
