"""Keys for every job of a job file, with each compiler's identity worked out once."""

from __future__ import annotations

import os

from . import toolchain
from .digests import Digests
from .key import NotCacheableError, Recipe

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..jobfile import Job, JobFile
    from .shard_key import ShardKeys
    from .toolchain import Memo

    Begun = tuple[Job, str | None, bytes | None, str]  # job, identity, key prefix, reason


class Keyed:
    """A job and its key; ``key`` None means it cannot be cached (and why, in ``reason``)."""

    __slots__ = ("job", "key", "reason", "toolchain")

    def __init__(self, job: Job, key: str | None, toolchain: str = "", reason: str = "") -> None:
        self.job = job
        self.key = key
        self.toolchain = toolchain
        self.reason = reason


def compute_keys(
    job_file: JobFile,
    memo: Memo,
    shard_keys: ShardKeys,
    compiler_check: str = "content",
    warn: Callable[[str], None] | None = None,
    examined: dict[str, os.stat_result] | None = None,
    on_keyed: Callable[[list[Keyed]], None] | None = None,
) -> list[Keyed]:
    """Every job's key, in job order; ``compiler_check`` is how the compiler is identified
    (see :mod:`.toolchain`); ``warn`` hears once about a check command that fails;
    ``examined``: inputs already ``stat``-ed by the job-file checks. ``on_keyed`` gets the
    keyed jobs as they are ready: those whose shards a forked worker decodes (see
    ShardKeys.begin) come last, so the caller can look up the others meanwhile."""
    digests = Digests(examined)
    later = shard_keys.begin(job_file.jobs, digests)
    recipe = Recipe(job_file, digests)
    identities: dict[str, str | None] = {}
    why_not: dict[str, str] = {}
    shared = job_file.common_args
    launched = launched_programs(shared)

    def begin_each(jobs: Sequence[Job]) -> list[Begun]:
        """Each job's toolchain identity and key prefix (Recipe.prefix: all of its key but
        the shard's digest), or why it has none."""
        begun: list[Begun] = []
        for job in jobs:
            compiler = shared[0] if shared else job_file.command(job)[0]
            if compiler not in identities:
                try:
                    identities[compiler] = _identity(compiler, launched, memo, compiler_check)
                except OSError:
                    identities[compiler] = None  # the runner will report the missing compiler
                except toolchain.CompilerCheckError as e:
                    identities[compiler] = None
                    why_not[compiler] = f"--compiler-check failed: {e}"
                    if warn is not None:
                        warn(f"{why_not[compiler]}; not caching jobs compiled by {compiler}")
            ident = identities[compiler]
            prefix = None
            reason = why_not.get(compiler, "no compiler") if ident is None else ""
            if ident is not None:
                try:
                    prefix = recipe.prefix(job, ident)
                except (OSError, NotCacheableError) as e:
                    reason = str(e)  # said once, on the job's "miss" line
            begun.append((job, ident, prefix, reason))
        return begun

    def finish_each(begun: list[Begun]) -> list[Keyed]:
        """The keys of begun jobs, now that their shards' digests are in."""
        keyed = []
        for job, ident, prefix, reason in begun:
            key = None
            if prefix is not None:
                try:
                    key = recipe.finish(prefix, shard_keys(job, digests))
                except OSError as e:
                    reason = str(e)
            keyed.append(Keyed(job, key, ident or "", reason))
        if on_keyed is not None:
            on_keyed(keyed)
        return keyed

    if not later:
        return finish_each(begin_each(job_file.jobs))
    waiting = {job.index for job in later}
    first = finish_each(begin_each([job for job in job_file.jobs if job.index not in waiting]))
    begun = begin_each(later)  # all but their shards' digests, while the worker decodes those
    shard_keys.finish(digests)
    rest = finish_each(begun)
    return sorted(first + rest, key=_job_index)


def _identity(compiler: str, launched: list[str], memo: Memo, check: str) -> str | None:
    """The toolchain identity of the compiler and of each program it launches."""
    if not compiler:
        return None
    return "+".join(toolchain.identity(p, memo, check) for p in (compiler, *launched))


def launched_programs(shared: tuple[str, ...]) -> list[str]:
    """Programs named by path among the words LLD puts between the compiler and ``-c``
    (``--thinlto-remote-compiler-prepend-arg``): the compiler may be a launcher (``env``,
    a multi-call driver) and such a word the binary that really compiles, whose identity
    (its LLVM libraries too, not only its bytes) must then be in the key. A bare word
    (``llvm clang``: the tool a multi-call driver runs) is in the key as text."""
    if len(shared) < 2 or shared[1] == "-c":
        return []
    words = shared[1 : shared.index("-c")] if "-c" in shared else shared[1:]
    return [w for w in words
            if "/" in w and os.path.isfile(w) and os.access(w, os.X_OK)]  # fmt: skip


def _job_index(k: Keyed) -> int:
    return k.job.index
