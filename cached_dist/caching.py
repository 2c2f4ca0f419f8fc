"""A link through the cache: key every job, serve hits, compile misses once across links.

Single-flight across concurrent links: a miss is claimed in the store before it is compiled;
a job whose key another process has claimed is compiled by nobody here until that process
has finished its own batch: then it is read from the store (or, if the holder died or took
too long, compiled here). No step waits while holding a claim, so links cannot deadlock.

A cache problem never fails a link: the store degrades to misses, and a job whose key cannot
be computed is simply compiled and not stored.
"""

from __future__ import annotations

import time

from . import toolchain
from .digests import Digests
from .distributor import Outcome, Summary, dispatch, raise_failures, run_plain
from .jobfile import Job, JobFile
from .key import KEY_FORMAT, job_key
from .log import Log
from .options import Options
from .shard_key import ShardKeys

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Sequence

    from store import Store

# Longest time one link waits, in total, for other links' compilations of keys it needs;
# past it the remaining jobs are compiled here. Dead holders are detected in about a second.
WAIT_BOUND = 600.0


class Keyed:
    __slots__ = ("job", "key", "toolchain")

    def __init__(self, job: Job, key: str | None, toolchain: str = "") -> None:
        self.job = job
        self.key = key  # None: cannot be cached (an input unreadable, compiler missing)
        self.toolchain = toolchain


def output_roles(job: Job) -> dict[str, str]:
    return {f"output{i}": path for i, path in enumerate(job.outputs)}


def open_store(options: Options, log: Log) -> Store | None:
    from store import Store

    def warn(message: str) -> None:
        log.warn(f"cache {options.cache_dir}: {message}")

    try:
        store = Store(
            options.cache_dir, max_size=options.max_size, group_shared=options.group_shared,
            warn=warn,
        )  # fmt: skip
    except Exception as e:  # the store promises not to raise; belt and braces
        warn(f"unusable ({e}); linking without the cache")
        return None
    return store if store.usable else None


def compute_keys(job_file: JobFile, store: Store, log: Log, shard_keys: ShardKeys) -> list[Keyed]:
    digests = Digests()
    shard_keys.prepare(job_file.jobs, digests)
    identities: dict[str, str | None] = {}
    keyed = []
    for job in job_file.jobs:
        compiler = job_file.command(job)[0]
        if compiler not in identities:
            try:
                identities[compiler] = toolchain.identity(compiler, store)
            except OSError:
                identities[compiler] = None  # the runner will report the missing compiler
        ident = identities[compiler]
        key = None
        if ident is not None:
            try:
                key = job_key(job_file, job, digests, ident, shard_keys)
            except OSError as e:
                log.detail(f"not cacheable: {job.primary_output}: {e}")
        keyed.append(Keyed(job, key, ident or ""))
    return keyed


class CachedLink:
    def __init__(self, job_file: JobFile, options: Options, log: Log, store: Store) -> None:
        self.job_file = job_file
        self.options = options
        self.log = log
        self.store = store
        self.summary = Summary(len(job_file.jobs))
        self.time_saved = 0.0
        self.bytes_served = 0
        self.counters: dict[str, int] = {}  # extra statistics: shards, verification

    def serve(self, k: Keyed) -> bool:
        """Copies a stored result to the job's outputs; False is a miss."""
        if k.key is None:
            return False
        manifest = self.store.get(k.key)
        if manifest is None or len(manifest.outputs) != len(k.job.outputs):
            return False
        if not self.store.materialize(manifest, output_roles(k.job)):
            return False
        self.summary.hits += 1
        self.bytes_served += sum(size for _, size in manifest.outputs.values())
        self.time_saved += float(manifest.meta.get("duration", 0.0) or 0.0)
        self.log.detail(f"hit  {k.key} {k.job.module}")
        return True

    def compile(self, batch: Sequence[Keyed]) -> Outcome:
        """Compiles ``batch`` and stores every job whose outputs all exist afterwards."""
        if not batch:
            return Outcome()
        for k in batch:
            self.log.detail(f"miss {k.key or '(not cacheable)'} {k.job.module}")
        outcome = dispatch(self.job_file, [k.job for k in batch], self.options, self.log)
        done = {j.index for j in outcome.compiled}
        for k in batch:
            if k.key is not None and k.job.index in done:
                self.store.put(
                    k.key, output_roles(k.job), duration=outcome.durations.get(k.job.index, 0.0),
                    toolchain=k.toolchain, key_version=KEY_FORMAT,
                )  # fmt: skip
        self.summary.compiled += len(outcome.compiled)
        self.summary.fallback += outcome.fallback
        return outcome

    def run(self, keyed: list[Keyed]) -> None:
        misses = [k for k in keyed if not self.serve(k)]
        if self.options.verify_hits > 0 and len(misses) < len(keyed):
            from .verify_hits import verify_hits

            missed = {id(k) for k in misses}
            hits = [k for k in keyed if id(k) not in missed]
            self.counters.update(verify_hits(self.job_file, hits, self.options, self.log,
                                             self.store))  # fmt: skip
        mine, theirs, claims = [], [], []
        try:
            for k in misses:
                if k.key is None:
                    mine.append(k)
                    continue
                claim = self.store.claim(k.key, wait=0)
                if claim.acquired:
                    claims.append(claim)
                    mine.append(k)
                elif claim.reason == "entry" and self.serve(k):
                    continue
                elif claim.reason in ("unusable", "error"):
                    mine.append(k)
                else:
                    theirs.append(k)
            first = self.compile(mine)
        finally:
            for claim in claims:
                claim.release()
        raise_failures(first.failures)
        late = self.await_others(theirs)
        raise_failures(self.compile(late).failures)

    def await_others(self, theirs: list[Keyed]) -> list[Keyed]:
        """Waits for keys other links are compiling; returns those left for us to compile."""
        left = []
        deadline = time.monotonic() + WAIT_BOUND
        for k in theirs:
            assert k.key is not None
            with self.store.claim(k.key, wait=max(0.0, deadline - time.monotonic())):
                pass  # released at once: compiling it while holding could deadlock two links
            if not self.serve(k):
                left.append(k)
        return left


def run_cached(job_file: JobFile, options: Options, log: Log) -> Summary:
    store = open_store(options, log)
    if store is None:
        return run_plain(job_file, options, log)
    link = CachedLink(job_file, options, log, store)
    shard_keys = ShardKeys(store, options.jobs)
    try:
        try:
            keyed = compute_keys(job_file, store, log, shard_keys)
        except Exception as e:  # a bug in keying must not cost the user the link
            if options.debug:
                raise
            log.warn(f"cache: cannot compute keys ({type(e).__name__}: {e}); linking without it")
            return run_plain(job_file, options, log)
        log.detail(
            f"shards: {shard_keys.decoded} decoded, {shard_keys.memoized} memoized, "
            f"{shard_keys.inexact} not canonical (can only hit byte-identical shards)"
        )
        link.run(keyed)
    finally:
        counters = {
            "shards_decoded": shard_keys.decoded,
            "shards_memoized": shard_keys.memoized,
            "shards_not_canonical": shard_keys.inexact,
            **link.counters,
        }
        store.record(
            hits=link.summary.hits, misses=link.summary.compiled, time_saved=link.time_saved,
            bytes_served=link.bytes_served, **counters,
        )  # fmt: skip
    return link.summary
