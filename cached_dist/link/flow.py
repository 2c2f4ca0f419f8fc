"""A whole link: check the job file, then serve it through the cache or without it."""

from __future__ import annotations

import os
import sys
import time

from ..jobfile.checks import check_job_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..jobfile import JobFile
    from ..keys.shard_key import Early
    from ..log import Log
    from ..options import Options
    from ..serve.handoff import Handoff


def run(job_file: JobFile, options: Options, log: Log, handoff: Handoff | None = None) -> int:
    """The whole distributor for one link; returns the exit status. With ``handoff`` (a warm
    server's child), only a full hit from the local cache is served."""
    started = time.monotonic()
    early: Early | None = None
    if handoff is not None and not options.disable and options.cache_dir:
        # A warm server's child: shards a forked worker decodes while the job file is checked
        # (~2 ms less a 301-job link). Not in a process of its own, where the imports and
        # the collector's work after such an early fork copy pages it shares (~2 ms more).
        from store.placing import place_order

        from ..keys.shard_key import start_early

        # The worker then places half of the outputs, once the link is committed.
        early = start_early(job_file.jobs, options.jobs, place_order)
    try:
        # Before any output is removed, any claim taken or the cache opened: a bad job file
        # changes nothing on disk.
        examined = check_job_file(job_file, protected=_store_dirs(options.cache_dir))
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    try:
        if options.disable:
            from .dispatch import run_plain

            if handoff is not None:
                handoff.commit(False, "--disable")
            summary = run_plain(job_file, options, log)
        else:
            from .cached import run_cached

            summary = run_cached(job_file, options, log, examined, handoff, early)
    finally:
        if early is not None:
            early.cancel()  # ends it and waits for that (it waits for an order once done)
        # Archive members a killed link left behind, seen only where LLD 21 names members
        # (the module that reads those names is imported only then).
        members = sys.modules.get("cached_dist.jobfile.members")
        if members is not None and members.stale_dirs:
            from .extracted import sweep

            sweep()
    log.info(summary.line(time.monotonic() - started))
    return 0


def _store_dirs(cache_dir: str) -> tuple[str, ...]:
    """The cache's own directories, which no output may be in (the rest of it is the user's)."""
    if not cache_dir:
        return ()
    from store import LAYOUT

    return tuple(os.path.join(cache_dir, part) for part in LAYOUT)
