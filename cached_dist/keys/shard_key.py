"""The shard ingredient of the key: canonical summary shards, memoized and decoded in parallel.

A shard names modules by path and values by per-link ids (see docs/shards.md); its canonical
form (:mod:`cached_dist.bitcode.shard`, computed by the C extension when it is built, see
:mod:`cached_dist.bitcode.native`) does not. Decoding still costs something, so:

- the canonical digest is memoized in the store under the raw shard's digest plus the job's
  own path -> content map (what the canonical form depends on): byte-identical shards, as
  with thin archives or no archives, are never decoded twice; shards of jobs that name a
  regular archive member (a per-link name) are neither looked up nor stored, as their memo
  key could never come again;
- the shards left to decode are split across forked workers when there are enough of them;
  those of a regular archive's members (decoded on every link) from the moment the job file
  is loaded (:func:`start_early`), while this process checks the job file and opens the store.
"""

from __future__ import annotations

import os

import xxhash

from ..jobfile import Job
from .digests import Digests

# The least work worth a forked worker (store.forked.workers_for): a fork and its results cost
# ~3 ms. The pure-Python decoder does ~2 MB/s; with the native one, reading a shard and the
# modules it names costs about as much as decoding it, ~0.1 ms a job in all.
PARALLEL_MIN_BYTES = 64 * 1024
PARALLEL_MIN_JOBS_NATIVE = 64  # per worker: 128 jobs make two
ESTIMATED_SHARD = 4096  # a shard not read yet, for the threshold above
#: With the native decoder, shards are decoded here unless there are at least this many bytes
#: of them to decode: 1 MB takes it ~25 ms, about one round trip to a remote tier over a WAN,
#: and asking a remote for shard digests is a round trip of its own (the results' lookup needs
#: the digests first). The pure-Python decoder (~1.4 MB/s) always asks.
SHARED_MIN_BYTES = 1 << 20


TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, Protocol

    from store.forked import Plan, Standby, Worker

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
        self, memo: Memo, parallel: int, shared: SharedMemo | None = None,
        early: Early | None = None, hold: bool = False,
    ) -> None:  # fmt: skip
        self.memo = memo
        self.shared = shared  # asked, in one batch, for what the local memo lacks
        # Whether what was decoded waits for share_held() to go to ``shared``: a warm
        # server's child writes nothing anywhere before its link is its own.
        self.hold = hold
        self.held: list[tuple[str, str]] = []
        self.early = early  # a worker decoding some per-link shards of the jobs begin() gets
        self.parallel = max(1, parallel)
        self.digests: dict[int, str] = {}
        self.decoded = 0  # shards decoded in this link
        self.memoized = 0  # shards whose canonical digest came from the memo
        self.inexact = 0  # shards that fell back to the raw form (can only miss)
        # The early worker, the link's module paths and the worker's share, for finish().
        self._later: tuple[Early, ModulePaths, list[Task]] | None = None

    def prepare(self, jobs: Sequence[Job], digests: Digests) -> None:
        """Looks up the memo for every job (one batch); decodes the rest, in parallel when
        worth it."""
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
            members = _members(_named(jobs))
        for job in jobs:
            if job.shard is None:
                self.digests[job.index] = "none"
                continue
            if members and _names_any(members, job):
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
        learned = self._record(todo, self._decode_all(todo, paths))
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
            self._record(later, [done[t[0]] if t[0] in done else _decode_task(t, paths)
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

    def _decode_all(self, todo: list[Task], paths: ModulePaths) -> list[Decoded]:
        """Each task's (digest, exact), None for one that cannot be read; split across
        forked workers when there is enough work (and no early worker is at it)."""
        if not todo:
            return []
        from ..bitcode.native import NATIVE

        if NATIVE:
            work, least = len(todo), PARALLEL_MIN_JOBS_NATIVE
        else:
            work = sum(len(t[2] or b"") or ESTIMATED_SHARD for t in todo)
            least = PARALLEL_MIN_BYTES
        # Not worth a worker (no fork, no import), or the early worker has the other core.
        if self.parallel < 2 or work < 2 * least or self.early is not None:
            return [_decode_task(t, paths) for t in todo]
        from store.forked import workers_for

        workers = workers_for(work, least, min(self.parallel, len(todo)))
        return _decode_forked(todo, paths, workers)


class Early:
    """A forked worker that works out the digest of every module the link's jobs name, then
    decodes some of its per-link shards (:func:`start_early`)."""

    def __init__(self, worker: Worker, share: list[Job], members: set[str]) -> None:
        self.worker = worker
        self.share = share
        self.members = members  # the link's per-link member names (_members), judged once
        self.same: set[str] = set()  # what modules() found the worker read as checked
        self.lost = False  # it works on other jobs than these (a standby that read another file)

    def modules(self, digests: Digests) -> None:
        """Takes the module digests the worker sends first into ``digests`` (see
        :meth:`take` for which), so that this process reads none of those files itself.
        The worker names the jobs it decodes first: if they are not :attr:`share`, nothing
        it sends is taken."""
        sent = self.worker.first()
        try:
            indices, *learned = sent
            self.lost = list(indices) != [job.index for job in self.share]
        except (ValueError, TypeError):
            self.lost = True
        found = None if self.lost else _learned(learned, digests)
        if found is not None:
            self.same = found[0]

    def take(self, digests: Digests) -> dict[int, Decoded]:
        """The worker's results by job index ({} if it failed), and the module digests it
        worked out into ``digests``: only those of files it read as the job-file checks
        found them (``digests`` holds their stat), and only the results of jobs all of whose
        files it read so. It read them before the checks: a file replaced meanwhile would
        otherwise be keyed by content nobody compiles."""
        if self.lost:
            return {}
        sent: list[Any] = []
        done = self.worker.collect(_revive, sent.append, len(self.share))
        found = _learned(sent[0], digests) if done is not None else None
        if done is None or found is None:
            return {}
        same = (self.same - found[1]) | found[0]  # as last read
        return {job.index: result for job, result in zip(self.share, done, strict=True)
                if job.shard in same and job.module in same
                and same.issuperset(job.imports)}  # fmt: skip

    def cancel(self) -> None:
        """Stops the worker if its results were not taken (the link went another way) or it
        is placing outputs nobody waits for; else lets it end (it waits for an order)."""
        self.worker.cancel()


def start_early(
    jobs: Sequence[Job], parallel: int, then: Callable[[Any], Any] | None = None,
    standby: Standby | None = None,
) -> Early | None:  # fmt: skip
    """Starts a forked worker, when a link has enough shards that name a regular archive's
    members (per-link names: never memoized, so every link decodes them) for two processes;
    None otherwise. The worker first works out the digest of every module the jobs name, and
    sends them (this process then reads none of them), then decodes two in three of those
    shards. Reading and decoding touches nothing, so it may begin before the job file is
    checked. Meanwhile this process checks the job file, opens the store, decodes the other
    third and keys and looks up those jobs (compute_keys): about as long as the worker takes
    (docs/design.md, "Shards decoded from the start"). With ``then``, the worker then waits
    for one order (``Early.worker.order``), such as placing some outputs.

    With a ``standby`` told of this job file already (:func:`standby_plan`), that process
    is the worker, and none is forked."""
    planned = _early_plan(jobs, parallel)
    if planned is None:
        return None
    share, members = planned
    if standby is not None and standby.told:
        return Early(standby.worker, share, members)
    from store.forked import start

    first, work, learned = _early_work(jobs, share)
    worker = start(work, learned, first, then)
    return Early(worker, share, members) if worker is not None else None


def _early_plan(jobs: Sequence[Job], parallel: int) -> tuple[list[Job], set[str]] | None:
    """The early worker's share of the jobs and the link's per-link member names, when an
    early worker is worth it (:func:`start_early`)."""
    from ..bitcode.native import NATIVE

    if not NATIVE or parallel < 2:
        return None
    members = _members(_named(jobs))
    if not members:
        return None
    picked = [j for j in jobs if j.shard is not None and _names_any(members, j)]
    if len(picked) < 2 * PARALLEL_MIN_JOBS_NATIVE:
        return None
    return [job for i, job in enumerate(picked) if i % 3 < 2], members


def _early_work(
    jobs: Sequence[Job], share: list[Job]
) -> tuple[Callable[[], object], Callable[[], list[Decoded]], Callable[[], object]]:
    """The early worker's first message (its share's job indices, then the digest of every
    module the jobs name), its work (decoding its share) and what it learned on the way."""
    digests = Digests()
    paths = ModulePaths(digests)
    sent: list[Any] = [0, {}]  # how many digests and which identities went first

    def first() -> object:
        for path in _named(jobs):
            try:  # noqa: SIM105 - contextlib imports collections: ~1 ms of a full hit
                digests.of(path)
            except OSError:
                pass  # this process finds out itself, and says so in its own words
        sent[:] = [digests.mark(), dict(digests.identities)]
        return ([job.index for job in share], digests.since(0),
                list(digests.identities.items()))  # fmt: skip

    def work() -> list[Decoded]:
        return [_decode_task((job.index, "", None, job), paths) for job in share]

    def learned() -> object:
        # The identities not sent first, or other now: a file read twice (a shard also named
        # as a module) counts as last read.
        before = sent[1]
        return digests.since(sent[0]), [(path, seen) for path, seen in digests.identities.items()
                                        if before.get(path) != seen]  # fmt: skip

    return first, work, learned


def standby_plan(message: Any, then: Callable[[Any], Any] | None) -> Plan | None:
    """What a standby (store.forked.standby, forked by a warm server's spare before its link
    comes) does as a link's early worker, told by :func:`standby_message`: it reads the job
    file the link read, from the link's working directory, and works out the same share
    (Early.modules checks it does). None, and it ends, if the directory is not the link's, the
    file is not what the link read, or no early worker would pay."""
    from .. import jobfile
    from ..errors import CachedDistError

    try:
        cwd, identity, path, digest, parallel = message
        os.chdir(str(cwd))
        here = os.stat(".")
        if [here.st_dev, here.st_ino] != list(identity):
            return None

        def same(raw: bytes) -> None:
            if xxhash.xxh3_128_hexdigest(raw) != digest:
                raise ValueError("another job file")

        jobs = jobfile.load(str(path), same).jobs
    except (ValueError, TypeError, OSError, CachedDistError):
        return None
    planned = _early_plan(jobs, int(parallel))
    if planned is None:
        return None
    first, work, learned = _early_work(jobs, planned[0])
    return work, learned, first, then


def may_start_early(raw: bytes) -> bool:
    """Whether a job file of these bytes may have enough jobs for an early worker
    (:func:`start_early`), judged before it is parsed: LLD's job file names "outputs" once a
    job. A served link of fewer tells its standby nothing, which then costs it nothing.

    As ``raw.count`` would say, but only as far as the last occurrence needed: the link
    tells its standby after this, and a 3,000-job file is ~4 MB (its count: ~1.8 ms)."""
    at, name = -len(_OUTPUTS), _OUTPUTS
    find = raw.find
    for _ in range(2 * PARALLEL_MIN_JOBS_NATIVE):
        at = find(name, at + len(name))  # after the last one, as count() goes on
        if at < 0:
            return False
    return True


_OUTPUTS = b'"outputs"'


def standby_message(raw: bytes, path: str, parallel: int) -> object:
    """What tells a standby of a link whose job file at ``path`` (from this process's working
    directory) read ``raw`` (:func:`standby_plan`)."""
    here = os.stat(".")
    return (os.getcwd(), [here.st_dev, here.st_ino], path, xxhash.xxh3_128_hexdigest(raw),
            parallel)  # fmt: skip


def _named(jobs: Sequence[Job]) -> set[str]:
    """Every module the jobs name, once: each job names the modules it imports again."""
    named: set[str] = set()
    for job in jobs:  # set methods, not a tuple a job: ~0.1 ms less for 301 jobs
        named.add(job.module)
        named.update(job.imports)
    return named


def _names_any(paths: set[str], job: Job) -> bool:
    """Whether the job's module or one of its imports is in ``paths`` (the module first:
    most jobs of a regular archive are one of its members)."""
    return job.module in paths or not paths.isdisjoint(job.imports)


def _members(named: set[str]) -> set[str]:
    """The per-link member names among these module paths."""
    return {p for p in named if per_link_member(p)}


def _learned(sent: Any, digests: Digests) -> tuple[set[str], set[str]] | None:
    """Takes into ``digests`` the module digests a worker sent with the identities of the
    files it read (``(digests, identities)``): only those of files it read as the job-file
    checks found them. Returns their paths and the paths of all files it read (None if
    ``sent`` is not that)."""
    try:
        learned, identities = sent
        read = {str(path): tuple(seen) for path, seen in identities}
        same = {path for path, seen in read.items() if digests.examined_as(path, seen)}
        _learner(digests)([(path, d) for path, d in learned if path in same])
    except (ValueError, TypeError, IndexError):
        return None
    return same, set(read)


def _learner(digests: Digests) -> Callable[[Any], None]:
    """What takes in the module digests a worker sends back (:meth:`Digests.since`)."""
    return lambda learned: digests.learn((str(p), str(d)) for p, d in learned)


def _revive(value: Any) -> Decoded:
    return None if value is None else (str(value[0]), bool(value[1]))


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


def _decode_task(task: Task, paths: ModulePaths) -> Decoded:
    """Reads (if not yet read) and decodes one shard; None if it or a module is unreadable."""
    _, _, data, job = task
    try:
        if data is None:
            data = paths.digests.read(job.shard or "")
        lookup, own = paths.lookup(job)
    except OSError:
        return None
    return _decode(data, lookup, own, paths.digests.known if own is not None else None)


def _decode_forked(todo: list[Task], paths: ModulePaths, workers: int) -> list[Decoded]:
    """``todo`` over forked workers (:func:`store.forked.split`), each reading its shards and
    the modules they name, and decoding; a worker sends back the module digests it worked
    out too, which the key needs here."""
    from store.forked import split

    digests = paths.digests
    mark = digests.mark()

    def work(share: Sequence[int]) -> list[Decoded]:
        return [_decode_task(todo[i], paths) for i in share]

    return split(work, len(todo), workers, _revive, lambda: digests.since(mark),
                 _learner(digests))  # fmt: skip
