"""A link through the cache: key every job, serve hits, compile misses once across links.

Single-flight across concurrent links: a miss is claimed in the store before it is compiled.
Results stream from the runner: each is stored and its claim released the moment the job
finishes, so a link waiting for that key is served at once, not after the holder's batch.
A link first compiles what it claimed, then polls the keys other links hold: each is read
as soon as it is stored, or taken over (claimed and compiled here) if its holder gave up or
died. No link waits while holding a claim, so links cannot deadlock.

A cache problem never fails a link: the store degrades to misses, and a job whose key cannot
be computed is simply compiled and not stored.

With ``--remote-storage``, a ``Tiers`` object (link/tiers.py) stands behind the local store:
the link hands it the local misses (one batch), the keys it claimed (one batch), each stored
result and each released claim; everything remote is contained there.
"""

from __future__ import annotations

import os
import sys
import time

from ..keys.compute import Keyed, compute_keys
from ..keys.key import KEY_FORMAT
from ..keys.shard_key import ShardKeys
from .summary import Progress, Summary
from .writes import LinkWrites

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from store import Claim, Store
    from store.manifest import Manifest
    from store.placing import Helper

    from ..jobfile import Job, JobFile
    from ..log import Log
    from ..options import Options
    from ..runners import Result
    from ..serve.early import Early
    from ..serve.handoff import Handoff
    from .checkouts import SourcePaths
    from .tiers import Tiers

# Longest time one link waits, in total, for other links' compilations of keys it needs;
# past it the remaining jobs are compiled here. Dead holders are detected in about a second.
WAIT_BOUND = 600.0
_POLL_MIN, _POLL_MAX = 0.02, 0.25


def output_roles(job: Job) -> dict[str, str]:
    return {f"output{i}": path for i, path in enumerate(job.outputs)}


def open_store(options: Options, log: Log) -> Store | None:
    from store import Store

    def warn(message: str) -> None:
        log.warn(f"cache {options.cache_dir}: {message}")

    try:
        store = Store(
            options.cache_dir, max_size=options.max_size, group_shared=options.group_shared,
            hard_link=options.hard_link, compression_level=options.local_compression_level,
            warn=warn,
        )  # fmt: skip
    except Exception as e:  # the store promises not to raise; belt and braces
        warn(f"unusable ({e}); linking without the cache")
        return None
    return store if store.usable else None


class CachedLink:
    def __init__(
        self, job_file: JobFile, options: Options, log: Log, store: Store,
        writes: LinkWrites, tiers: Tiers | None = None, handoff: Handoff | None = None,
        helper: Helper | None = None,
    ) -> None:  # fmt: skip
        self.job_file = job_file
        self.helper = helper  # the early worker, which may place half of the hits' outputs
        self.handoff = handoff  # a warm server's child: only a full hit goes ahead
        self.remote_asked = False  # whether serve_all asked the remote tiers already
        self.tiers = tiers  # the remote tiers, None without --remote-storage
        self.writes = writes  # the link's memos and promotions, written at its end
        self.options = options
        self.log = log
        self.store = store
        self.summary = Summary(len(job_file.jobs))
        self.progress = Progress(self.summary, log, terminal=_stderr_is_terminal(),
                                 asked=options.progress)  # fmt: skip
        self.time_saved = 0.0
        self.wall_saved = 0.0  # over the hits whose entries recorded their wall-time share
        self.bytes_served = 0
        self.counters: dict[str, int] = {}  # extra statistics: shards, verification
        self.sources: SourcePaths | None = None  # modules' source paths, read on misses
        self.found: dict[str, Manifest] = {}  # what look_up() found
        self.asked: set[str] = set()  # the keys it looked up
        # The manifests of the link's target read in one go (store/pack.py), and kept for the
        # next link of it: every output placed from the local store (account()).
        self.pack = f"{os.getcwd()}\0{job_file.linker_output}" if job_file.linker_output else None
        self.placed: list[Manifest] = []

    def serve(self, k: Keyed, how: str = "local cache") -> bool:
        """Copies a stored result to the job's outputs; False is a miss."""
        if k.key is None:
            return False
        started = time.monotonic()
        manifest = self.store.get(k.key)
        if manifest is None or len(manifest.outputs) != len(k.job.outputs):
            return False
        if not self.store.materialize(manifest, output_roles(k.job)):
            return False
        self.account(k, manifest, how, time.monotonic() - started)
        return True

    def look_up(self, keyed: list[Keyed]) -> None:
        """Looks up a batch of keys (one pass over the index) for :meth:`serve_all`."""
        keys = [k.key for k in keyed if k.key is not None]
        self.asked.update(keys)
        self.found.update(self.store.lookup(keys, self.pack))

    def serve_all(self, keyed: list[Keyed]) -> list[Keyed]:
        """The link's first pass: every key looked up (most as they were computed, see
        compute_keys' on_keyed), every hit placed (half by a served link's early worker, when
        there are many); returns the misses."""
        self.look_up([k for k in keyed if k.key is not None and k.key not in self.asked])
        found = self.found
        ready = [k for k in keyed if (m := found.get(k.key or "")) is not None
                 and len(m.outputs) == len(k.job.outputs)]  # fmt: skip
        local = {k.job.index for k in ready}
        rest = [k for k in keyed if k.job.index not in local]
        if self.handoff is not None:  # nothing written yet: the client may still link itself
            # A full hit from the local store and the remote tiers together is served too:
            # the local misses are fetched and checked first, and the link committed to (or
            # handed back) before any output is written. What ShardKeys shares with the
            # remotes waits for the commit (see run_cached).
            if rest and self.tiers is not None and self.options.verify_hits <= 0:
                rest = self.fetch_remote(rest, first=True, gate=self._commit)
                self.remote_asked = True
            else:
                self._commit(not rest)
        placed = self.store.materialize_many(
            [(found[k.key or ""], output_roles(k.job)) for k in ready], helper=self.helper
        )
        missing = {k.job.index for k in rest}
        for k, took in zip(ready, placed, strict=True):
            if took is not None:
                self.account(k, found[k.key or ""], "local cache", took)
            else:
                missing.add(k.job.index)
        return [k for k in keyed if k.job.index in missing]

    def _commit(self, full_hit: bool) -> None:
        """A warm server's child: goes on with the link, or hands it back (serve/handoff.py)
        with the remotes that failed in its attempt, which the client's own run skips."""
        assert self.handoff is not None
        why, failed = "not a full hit from the local cache", ""
        if self.tiers is not None:
            why, failed = f"{why} and the remote tiers", self.tiers.failures()
        self.handoff.commit(full_hit and self.options.verify_hits <= 0, why, failed)

    def account(self, k: Keyed, manifest: Manifest, how: str, took: float) -> None:
        """Counts a hit placed from the local store, and says so with --verbose."""
        self.summary.hits += 1
        self.placed.append(manifest)
        printed = manifest.meta.get("diagnostics")
        if printed and isinstance(printed, str):  # what the compile printed, as it printed it
            self.log.passthrough(os.path.basename(k.job.module), printed)
        self.bytes_served += sum(size for _, size in manifest.outputs.values())
        self.time_saved += manifest.duration
        wall = manifest.wall
        if wall is not None:
            self.wall_saved += wall
        if self.log.verbose:
            self.log.detail(f"hit  {k.key} {k.job.module}: {how}, {1000 * took:.1f} ms")
        self.progress.update()

    def served_remotely(self, k: Keyed, size: int, meta: dict[str, Any]) -> None:
        """Accounts a hit a remote tier wrote out, as serve() does a local one."""
        self.summary.hits += 1
        self.summary.remote_hits += 1
        self.bytes_served += size
        duration, wall, printed = meta.get("duration"), meta.get("wall"), meta.get("diagnostics")
        if isinstance(duration, int | float):
            self.time_saved += duration
        if isinstance(wall, int | float):
            self.wall_saved += wall
        if printed and isinstance(printed, str):
            self.log.passthrough(os.path.basename(k.job.module), printed)
        self.progress.update()

    def fetch_remote(
        self, misses: list[Keyed], first: bool, gate: Callable[[bool], None] | None = None
    ) -> list[Keyed]:
        """Serves from the remote tiers what they hold; returns what is still missing."""
        if self.tiers is None or not misses:
            return misses
        return self.tiers.fetch(misses, self.served_remotely, first=first, gate=gate)

    def compile(self, batch: Sequence[Keyed], claims: dict[int, Claim]) -> None:
        """Compiles ``batch``; each job is stored and its claim released as it finishes.
        Raises JobsFailedError if some are still without outputs afterwards."""
        if not batch:
            return
        from store.placing import sweep_stale_temps

        from .diagnostics import why_not_stored
        from .dispatch import dispatch, raise_failures  # only when something must compile

        # What a link killed outright left beside its outputs (placing's temporary files):
        # swept where something is compiled, so a killed link's relink sweeps (placing sweeps
        # where it copies beside the outputs: store/placing.py).
        sweep_stale_temps([os.path.dirname(batch[0].job.primary_output)])

        by_index = {k.job.index: k for k in batch}
        # The batch's wall time, split among its jobs in the order they finish: what a hit
        # on each replaces (the sum of compile times overstates it by the parallelism).
        last = [time.monotonic()]

        def on_done(result: Result) -> None:
            now = time.monotonic()
            wall, last[0] = now - last[0], now
            k = by_index[result.job.index]
            key = k.key or f"(not cached: {k.reason})"
            self.log.detail(f"miss {key} {k.job.module}: compiled {result.by or 'here'}, "
                            f"{result.seconds:.2f} s")  # fmt: skip
            veto = why_not_stored(result.output) if result.output else None
            if veto is not None and k.key is not None:
                self.log.warn(f"not caching {k.job.primary_output}: {veto}")
            elif k.key is not None:
                meta: dict[str, object] = {"wall": wall}
                if result.output:
                    meta["diagnostics"] = result.output
                self.store.put(
                    k.key, output_roles(k.job), duration=result.seconds,
                    toolchain=k.toolchain, key_version=KEY_FORMAT, meta=meta,
                )  # fmt: skip
                if self.tiers is not None:
                    self.tiers.stored(k)
            claim = claims.pop(k.job.index, None)
            if claim is not None:
                claim.release()
            self.note_source(k.job)
            if result.cached:  # the runner's own cache had it (REAPI's cached_result)
                self.summary.hits += 1
                self.summary.remote_hits += 1
            else:
                self.summary.compiled += 1
                self.summary.compiled_remotely += result.remote
            self.progress.update()

        try:
            outcome = dispatch(self.job_file, [k.job for k in batch], self.options, self.log,
                               on_done)  # fmt: skip
        finally:
            for k in batch:
                claim = claims.pop(k.job.index, None)
                if claim is not None:
                    claim.release()
                if self.tiers is not None:
                    self.tiers.release(k)
        self.summary.fallback += outcome.fallback
        raise_failures(outcome.failures)

    def note_source(self, job: Job) -> None:
        """Reads a compiled job's source name (``stats`` counts those inside the checkout by
        absolute path: other checkouts will not share them), as the job ends, beside the
        compiles still running."""
        if self.sources is None:
            from .checkouts import SourcePaths

            self.sources = SourcePaths()
        self.sources.note(job)

    def count_sources(self) -> None:
        """The statistic of note_source's reads, once per link; never raises."""
        if self.sources is None:
            return
        try:
            found = len(self.sources.in_checkout(self.sources.compiled))
        except Exception:  # a hint must not cost a link
            return
        if found:
            self.counters["modules_absolute_source"] = found

    def hint_sources(self) -> None:
        """With --verbose: the line saying that modules were compiled by absolute path."""
        if self.sources is None:
            from .checkouts import SourcePaths

            self.sources = SourcePaths()
        try:
            hint = self.sources.hint(self.job_file.jobs)
        except Exception:  # a hint must not cost a link
            if self.options.debug:
                raise
            return
        if hint is not None:
            self.log.detail(hint)

    def run(self, keyed: list[Keyed]) -> None:
        misses = self.serve_all(keyed)
        if misses and self.writes.settle():  # an earlier link may still be storing them
            misses = [k for k in misses if not self.serve(k)]
        if self.options.verify_hits > 0 and len(misses) < len(keyed):
            from .verify import verify_hits

            missed = {id(k) for k in misses}
            hits = [k for k in keyed if id(k) not in missed]
            self.counters.update(verify_hits(self.job_file, hits, self.options, self.log,
                                             self.store))  # fmt: skip
            self.summary.verified = self.counters.get("hits_verified", 0)
            self.summary.mismatches = self.counters.get("hit_mismatches", 0)
        if not self.remote_asked:  # a warm server's child asked them already (serve_all)
            misses = self.fetch_remote(misses, first=True)
        claims: dict[int, Claim] = {}
        try:
            mine, theirs = self.claim_all(misses, claims)
            self.compile(mine, claims)
        finally:
            for claim in claims.values():
                claim.release()
        self.await_others(theirs)

    def claim_all(
        self, ks: list[Keyed], claims: dict[int, Claim], how: str = "local cache"
    ) -> tuple[list[Keyed], list[Keyed]]:
        """Claims ``ks`` locally, then what this link won on the remote tier (one batch):
        (mine, theirs); served keys are in neither."""
        mine, theirs = [], []
        for k in ks:
            verdict = self.try_claim(k, claims, how)
            if verdict == "mine":
                mine.append(k)
            elif verdict == "theirs":
                theirs.append(k)
        if self.tiers is not None and mine:
            elsewhere = self.tiers.claim(mine)
            if elsewhere:
                for k in mine:
                    if k.job.index in elsewhere:
                        claim = claims.pop(k.job.index, None)
                        if claim is not None:
                            claim.release()
                        theirs.append(k)
                mine = [k for k in mine if k.job.index not in elsewhere]
        return mine, theirs

    def try_claim(self, k: Keyed, claims: dict[int, Claim], how: str = "local cache") -> str:
        """Whose job it is: "mine" (compile it here), "theirs" (another link or machine is
        compiling it) or "served" (stored meanwhile, and now written out)."""
        if k.key is None:
            return "mine"
        claim = self.store.claim(k.key, wait=0)
        if claim.acquired:
            claims[k.job.index] = claim
            return "mine"
        if claim.reason == "entry" and self.serve(k, how):
            return "served"
        if claim.reason in ("unusable", "error", "entry"):
            return "mine"  # store degraded, or an entry that could not be served
        return "theirs"

    def await_others(self, theirs: list[Keyed]) -> None:
        """Polls the keys other links are compiling: each is served as soon as it is stored;
        one whose holder gave up or died is claimed and compiled here (a marker no holder
        vouches for is broken within seconds: store/lease.py). Past WAIT_BOUND, the rest are
        compiled here without claims. --verbose says how long it took."""
        if not theirs:
            return
        started = time.monotonic()
        try:
            self._await(theirs, started)
        finally:
            self.log.detail(f"waited {time.monotonic() - started:.1f} s for {len(theirs)} "
                            "keys other links held")  # fmt: skip

    def _await(self, theirs: list[Keyed], started: float) -> None:
        deadline = started + WAIT_BOUND
        poll = _POLL_MIN
        while theirs:
            claims: dict[int, Claim] = {}
            try:
                how = f"after waiting {time.monotonic() - started:.1f} s for another link"
                before = self.summary.hits
                mine, waiting = self.claim_all(self.fetch_remote(theirs, first=False), claims,
                                               how)  # fmt: skip
                if self.summary.hits > before:
                    self.summary.waited += self.summary.hits - before
                    self.summary.wait_seconds = time.monotonic() - started
                self.compile(mine, claims)
            finally:
                for claim in claims.values():
                    claim.release()
            if len(waiting) < len(theirs):
                poll = _POLL_MIN  # progress: keep up with a holder that streams results
            theirs = waiting
            if not theirs:
                return
            if time.monotonic() >= deadline:
                self.log.warn(f"waited {WAIT_BOUND:.0f} s for other links; compiling "
                              f"{len(theirs)} jobs here")  # fmt: skip
                self.compile(theirs, {})
                return
            time.sleep(poll)
            poll = min(poll * 1.5, _POLL_MAX)


def _stderr_is_terminal() -> bool:
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def run_cached(
    job_file: JobFile,
    options: Options,
    log: Log,
    examined: dict[str, os.stat_result] | None = None,
    handoff: Handoff | None = None,
    early: Early | None = None,
) -> Summary:
    """The link through the cache; ``examined``: the inputs' stat from the job-file checks;
    ``handoff``: see CachedLink.serve_all; ``early``: shards being decoded already."""
    store = open_store(options, log)
    if store is None:
        from .dispatch import run_plain

        if handoff is not None:
            handoff.commit(False, "the cache is unusable")
        return run_plain(job_file, options, log)
    writes = LinkWrites(store)
    tiers = None
    if options.remote_storage or options.remote_executor:
        from .tiers import Tiers

        tiers = Tiers(options, log, store, writes.promote, job_file)
    helper = early.worker if early is not None else None
    link = CachedLink(job_file, options, log, store, writes, tiers, handoff, helper)
    shard_keys = ShardKeys(writes, tiers, early, hold=handoff is not None)
    keyed: list[Keyed] = []
    try:
        try:
            keyed = compute_keys(job_file, writes, shard_keys, options.compiler_check, log.warn,
                                 examined, link.look_up)  # fmt: skip
        except Exception as e:  # a bug in keying must not cost the user the link
            if options.debug:
                raise
            if handoff is not None:
                handoff.commit(False, "keys could not be computed")
            log.warn(f"cache: cannot compute keys ({type(e).__name__}: {e}); linking without it")
            from .dispatch import run_plain

            return run_plain(job_file, options, log)
        inexact = shard_keys.inexact
        why = " (can only hit byte-identical shards)" if inexact else ""
        log.detail(f"shards: {shard_keys.decoded} decoded, {shard_keys.memoized} memoized, "
                   f"{inexact} not canonical{why}")  # fmt: skip
        if shard_keys.decoded and log.verbose:
            from ..bitcode.native import MISSING_NOTICE, NATIVE

            if not NATIVE:  # said once per link, and only when it cost something
                log.detail(f"shards: {MISSING_NOTICE}")
        link.run(keyed)
        if log.verbose:
            link.hint_sources()
    finally:
        link.progress.finish()
        if handoff is None or handoff.committed:  # a link handed back leaves no trace
            try:  # noqa: SIM105 - contextlib imports collections: ~1 ms of a full hit
                shard_keys.share_held()
            except Exception:  # a remote never fails a link
                pass
        remote = tiers.finish() if tiers is not None else {}
        link.summary.remote = remote  # for the stats log
        link.summary.remote_tier_hits = tiers.tier_hits if tiers is not None else []
        link.count_sources()
        if options.remote_executor and "cached_dist.runners.reapi" in sys.modules:
            from ..runners.reapi import COUNTERS

            remote = {**remote, **COUNTERS}
            COUNTERS.update(dict.fromkeys(COUNTERS, 0))  # a warm server's next link: afresh
        counters = {
            "shards_decoded": shard_keys.decoded,
            "shards_memoized": shard_keys.memoized,
            "shards_not_canonical": shard_keys.inexact,
            "jobs_not_cacheable": sum(1 for k in keyed if k.key is None),
            "wall_saved_us": round(link.wall_saved * 1e6),
            **link.counters,
            **remote,
        }
        if handoff is None or handoff.committed:  # a link handed back is the client's to do
            store.record(
                hits=link.summary.hits, misses=link.summary.compiled,
                time_saved=link.time_saved, bytes_served=link.bytes_served, **counters,
            )  # fmt: skip
            if link.pack is not None:
                store.keep_pack(link.pack, link.placed)
            writes.flush()
    link.summary.bytes_served = link.bytes_served
    return link.summary
