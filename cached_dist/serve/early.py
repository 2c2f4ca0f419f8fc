"""The early worker of a served link: a forked process that decodes most of the link's per-link
shards while the link checks its job file and opens the store, and the standby the warm
server forks ahead of the link to be that worker (docs/design.md, "Shards decoded from the
start" and "That worker forked before the link").

Process plumbing around the shard key (keys/shard_key.py), which decodes what this module
hands it; the forking itself is procs/forked.py.
"""

from __future__ import annotations

import os

import xxhash

from ..keys import shard_key
from ..keys.digests import Digests

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from procs.forked import Plan, Standby, Worker

    from ..jobfile import Job
    from ..keys.shard_key import Decoded

#: The least shards that name a regular archive's members (per-link names: decoded on every
#: link) for an early worker: two shares of 64 jobs, each worth a process with the native
#: decoder (reading a shard and the modules it names costs about as much as decoding it,
#: ~0.1 ms a job in all; a worker's start and results cost a few milliseconds).
EARLY_MIN_JOBS = 128


class Early:
    """A forked worker that works out the digest of every module the link's jobs name, then
    decodes some of its per-link shards (:func:`start_early`)."""

    def __init__(self, worker: Worker, share: list[Job], members: set[str]) -> None:
        self.worker = worker
        self.share = share
        self.members = members  # the link's per-link member names (per_link_members), judged once
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
    from procs.forked import start

    first, work, learned = _early_work(jobs, share)
    worker = start(work, learned, first, then)
    return Early(worker, share, members) if worker is not None else None


def _early_plan(jobs: Sequence[Job], parallel: int) -> tuple[list[Job], set[str]] | None:
    """The early worker's share of the jobs and the link's per-link member names, when an
    early worker is worth it (:func:`start_early`)."""
    from ..bitcode.native import NATIVE

    if not NATIVE or parallel < 2:
        return None
    members = shard_key.per_link_members(shard_key.named_modules(jobs))
    if not members:
        return None
    picked = [j for j in jobs if j.shard is not None and shard_key.names_any(members, j)]
    if len(picked) < EARLY_MIN_JOBS:
        return None
    return [job for i, job in enumerate(picked) if i % 3 < 2], members


def _early_work(
    jobs: Sequence[Job], share: list[Job]
) -> tuple[Callable[[], object], Callable[[], list[Decoded]], Callable[[], object]]:
    """The early worker's first message (its share's job indices, then the digest of every
    module the jobs name), its work (decoding its share) and what it learned on the way."""
    digests = Digests()
    paths = shard_key.ModulePaths(digests)
    sent: list[Any] = [0, {}]  # how many digests and which identities went first

    def first() -> object:
        for path in shard_key.named_modules(jobs):
            try:  # noqa: SIM105 - contextlib imports collections: ~1 ms of a full hit
                digests.of(path)
            except OSError:
                pass  # this process finds out itself, and says so in its own words
        sent[:] = [digests.mark(), dict(digests.identities)]
        return ([job.index for job in share], digests.since(0),
                list(digests.identities.items()))  # fmt: skip

    def work() -> list[Decoded]:
        return [shard_key.decode_task((job.index, "", None, job), paths) for job in share]

    def learned() -> object:
        # The identities not sent first, or other now: a file read twice (a shard also named
        # as a module) counts as last read.
        before = sent[1]
        return digests.since(sent[0]), [(path, seen) for path, seen in digests.identities.items()
                                        if before.get(path) != seen]  # fmt: skip

    return first, work, learned


def standby_plan(message: Any, then: Callable[[Any], Any] | None) -> Plan | None:
    """What a standby (procs.forked.standby, forked by a warm server's spare before its link
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
    for _ in range(EARLY_MIN_JOBS):
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


def _learned(sent: Any, digests: Digests) -> tuple[set[str], set[str]] | None:
    """Takes into ``digests`` the module digests a worker sent with the identities of the
    files it read (``(digests, identities)``): only those of files it read as the job-file
    checks found them. Returns their paths and the paths of all files it read (None if
    ``sent`` is not that)."""
    try:
        learned, identities = sent
        read = {str(path): tuple(seen) for path, seen in identities}
        same = {path for path, seen in read.items() if digests.examined_as(path, seen)}
        digests.learn((str(path), str(d)) for path, d in learned if path in same)
    except (ValueError, TypeError, IndexError):
        return None
    return same, set(read)


def _revive(value: Any) -> Decoded:
    """One of the worker's results (marshalled) as :func:`shard_key.decode_task` gave it."""
    return None if value is None else (str(value[0]), bool(value[1]))
