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


def shadow(job: Job, directory: str) -> Job | None:
    """The same job writing its outputs into ``directory`` (a private temporary one: never
    beside the outputs, which may be in /dev for a configure probe's ``-o /dev/null``);
    None if an output is not on its command line (then it cannot be redirected, so it is
    not verified)."""
    renamed = {out: os.path.join(directory, f"{i}-{os.path.basename(out)}")
               for i, out in enumerate(job.outputs)}  # fmt: skip
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
        cached, fresh = fa.read(), fb.read()
    if cached == fresh:
        return True
    at = coff_timestamp(cached)  # the only bytes of a COFF object that differ run to run
    if at is None or at != coff_timestamp(fresh) or len(cached) != len(fresh):
        return False
    return cached[:at] + cached[at + 4 :] == fresh[:at] + fresh[at + 4 :]


#: COFF machine types clang writes objects for: x64, x86, ARM64, ARM64EC, ARM64X, ARM (Thumb).
_COFF_MACHINES = (0x8664, 0x14C, 0xAA64, 0xA641, 0xA64E, 0x1C4)
#: The class id of a COFF "bigobj" header (ANON_OBJECT_HEADER_BIGOBJ).
_BIGOBJ_CLASS = bytes.fromhex("c7a1bad1eebaa94baf20faf66aa4dcb8")


def coff_timestamp(data: bytes) -> int | None:
    """Where a COFF object keeps the time it was written (4 bytes), or None if ``data`` is
    not one. clang writes the time there for Windows targets unless told
    ``-mno-incremental-linker-compatible`` (what ``/Brepro`` gives a clang-cl compile), and
    LLD's job files do not say it: two compiles of one job differ in those bytes alone,
    which the linker does not read, so verifying a hit compares everything else."""
    if len(data) < 20:
        return None
    if data[:4] == b"\0\0\xff\xff" and len(data) >= 56 and data[12:28] == _BIGOBJ_CLASS:
        return 8  # Sig1, Sig2, Version, Machine, then TimeDateStamp
    machine = int.from_bytes(data[:2], "little")
    optional_header = int.from_bytes(data[16:18], "little")
    return 4 if machine in _COFF_MACHINES and optional_header == 0 else None


def verify_hits(
    job_file: JobFile, hits: Sequence["Keyed"], options: Options, log: Log, store: "Store"
) -> dict[str, int]:
    sample = [k for k in hits if random.random() < options.verify_hits]
    if not sample:
        return {"hits_verified": 0, "hit_mismatches": 0, "hits_unverifiable": 0}
    import shutil
    import tempfile

    directory = tempfile.mkdtemp(prefix="cached-dist-verify-")
    try:
        return _verify(job_file, sample, options, log, store, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _verify(
    job_file: JobFile, sample: Sequence["Keyed"], options: Options, log: Log, store: "Store",
    directory: str,
) -> dict[str, int]:  # fmt: skip
    from ..runners import Result, make_runner

    pairs = []
    for k in sample:
        mine = os.path.join(directory, str(k.job.index))
        os.mkdir(mine)
        pairs.append((k, shadow(k.job, mine)))
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
                _replace(fresh, out)
        finally:
            for fresh in s.outputs:
                with contextlib.suppress(OSError):
                    os.unlink(fresh)
    return counts


def _replace(fresh: str, out: str) -> None:
    """``out`` gets the fresh bytes whole: renamed over it where both are on one file
    system, else copied beside it and renamed."""
    try:
        os.replace(fresh, out)
    except OSError as e:
        import errno
        import shutil

        if e.errno != errno.EXDEV:
            raise
        aside = f"{out}.cached-dist-{os.getpid()}.tmp"
        try:
            shutil.copyfile(fresh, aside)
            os.replace(aside, out)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(aside)
            raise
