"""A whole link: check the job file, then serve it through the cache or without it."""

from __future__ import annotations

import os
import sys
import time

from ..jobfile.checks import check_job_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..jobfile import JobFile
    from ..log import Log
    from ..options import Options
    from ..serve.early import Early
    from ..serve.handoff import Handoff


def run(job_file: JobFile, options: Options, log: Log, handoff: Handoff | None = None) -> int:
    """The whole distributor for one link; returns the exit status. With ``handoff`` (a warm
    server's child), only a full hit from the local cache is served."""
    started = time.monotonic()
    early: Early | None = None
    standby = handoff.standby if handoff is not None else None
    if handoff is not None and not options.disable and options.cache_dir:
        # A warm server's child: shards a forked worker decodes while the job file is checked
        # (~2 ms less a 301-job link). Not in a process of its own, where the imports and
        # the collector's work after such an early fork copy pages it shares (~2 ms more).
        from store.placing import place_order

        from ..serve.early import start_early

        # The worker then places half of the outputs, once the link is committed. It is the
        # standby the spare forked, if early_reader told it of this job file.
        early = start_early(job_file.jobs, options.jobs, place_order, standby)
        handoff.early_started = early is not None
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
    elapsed = time.monotonic() - started
    log.info(summary.line(elapsed))
    if options.stats_log:
        from .stats_log import append

        append(options, job_file, summary, elapsed, log)
    if handoff is None and os.environ.get("CACHED_DIST_AUTOSTART") == "1":
        _start_server(options)
    return 0


def _start_server(options: Options) -> None:
    """The client found no warm server for this link: start one, now that the link is over
    (serve/autostart.py), unless told not to or the server could serve nothing of it."""
    if options.no_server or options.disable or os.environ.get("CACHED_DIST_SERVER") == "0":
        return
    from ..serve import socket_path
    from ..serve.autostart import start

    start(socket_path(os.environ), options.server_idle_exit, os.environ)


def early_reader(
    options: Options, handoff: Handoff | None, path: str
) -> Callable[[bytes], None] | None:
    """For a served link whose spare forked a standby early worker (procs.forked.standby):
    what tells it which job file to work on as soon as its bytes are read, so it reads and
    parses that file while this process does (serve/early.py ``standby_plan``). None
    when :func:`run` would start no early worker. A standby that is not the link's worker is
    ended by the server's child once the link and its linker are over (serve/server.py)."""
    standby = handoff.standby if handoff is not None else None
    if standby is None or options.disable or not options.cache_dir or options.jobs < 2:
        return None

    def tell(raw: bytes) -> None:
        from ..serve.early import may_start_early, standby_message

        if not may_start_early(raw):
            return
        try:
            message = standby_message(raw, path, options.jobs)
        except OSError:  # the working directory is gone: it is not told, and is ended
            return
        standby.go(message)

    return tell


def _store_dirs(cache_dir: str) -> tuple[str, ...]:
    """The cache's own directories, which no output may be in (the rest of it is the user's)."""
    if not cache_dir:
        return ()
    from store import LAYOUT

    return tuple(os.path.join(cache_dir, part) for part in LAYOUT)
