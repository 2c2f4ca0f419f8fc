"""--verify-hits: recompile a sample of hits next to the cached copy and compare the bytes.

The proof that keys are sound on real code: a mismatch means a key missed an ingredient (or
the compiler is not deterministic). It is reported loudly and counted, the entry is dropped,
and the fresh bytes are used, so the link is right either way.
"""

import contextlib
import os
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..jobfile import Job, JobFile
from ..log import Log
from ..options import Options

if TYPE_CHECKING:
    from store import Store

    from ..keys.compute import Keyed


def shadow(job: Job) -> Job | None:
    """The same job writing to ``OUTPUT.verify-PID`` instead; None if an output is not on its
    command line (then it cannot be redirected, so it is not verified)."""
    renamed = {out: f"{out}.verify-{os.getpid()}" for out in job.outputs}
    args, seen = [], set()
    for arg in job.args:
        flag, eq, value = arg.partition("=")
        if arg in renamed:
            args.append(renamed[arg])
            seen.add(arg)
        elif eq and value in renamed:
            args.append(f"{flag}={renamed[value]}")
            seen.add(value)
        else:
            args.append(arg)
    if seen != set(renamed):
        return None
    return job.replace(args=tuple(args), outputs=tuple(renamed.values()))


def _same(a: str, b: str) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def verify_hits(
    job_file: JobFile, hits: Sequence["Keyed"], options: Options, log: Log, store: "Store"
) -> dict[str, int]:
    from ..runners import Result, make_runner

    sample = [k for k in hits if random.random() < options.verify_hits]
    pairs = [(k, shadow(k.job)) for k in sample]
    runnable = [(k, s) for k, s in pairs if s is not None]
    counts = {
        "hits_verified": 0,
        "hit_mismatches": 0,
        "hits_unverifiable": len(pairs) - len(runnable),
    }
    if not runnable:
        return counts
    failed: dict[int, str] = {}

    def report(result: Result) -> None:
        if result.failure is not None:
            failed[result.job.index] = result.failure

    from .dispatch import terminate_on_sigterm
    from .extracted import extracted

    terminate_on_sigterm()
    shadows = [s for _, s in runnable]
    with extracted(shadows):
        make_runner(options, log, "local").run(job_file, shadows, report)
    for k, s in runnable:
        try:
            if k.job.index in failed:
                counts["hits_unverifiable"] += 1
                log.warn(f"could not verify the hit for {k.job.primary_output}: "
                         f"{failed[k.job.index]}")  # fmt: skip
                continue
            counts["hits_verified"] += 1
            differs = [o for o, f in zip(k.job.outputs, s.outputs, strict=True) if not _same(o, f)]
            if not differs:
                log.detail(f"verified {k.key} {k.job.module}")
                continue
            counts["hit_mismatches"] += 1
            log.warn(
                f"HIT MISMATCH: the cached {k.job.primary_output} (module {k.job.module}, key "
                f"{k.key}) differs from a fresh compile; entry dropped, fresh bytes used"
            )
            if k.key is not None:
                store.drop(k.key)
            for out, fresh in zip(k.job.outputs, s.outputs, strict=True):
                os.replace(fresh, out)
        finally:
            for fresh in s.outputs:
                with contextlib.suppress(OSError):
                    os.unlink(fresh)
    return counts
