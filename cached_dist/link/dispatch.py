"""Hands jobs to the configured runner and falls back to the local one for what it failed.

Results stream: each job is passed to the caller's ``on_done`` as soon as its outputs exist,
whichever runner produced them, so the caching layer can store it and release its claim
while other jobs are still compiling.
"""

from __future__ import annotations

from ..errors import JobsFailedError
from ..runners import Failure, Result, make_runner, remove_outputs
from .summary import Summary

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..jobfile import Job, JobFile
    from ..log import Log
    from ..options import Options


class Outcome:
    """What one dispatch did, for the summary line."""

    __slots__ = ("compiled", "failures", "fallback")

    def __init__(self) -> None:
        self.compiled = 0  # jobs whose outputs now all exist
        self.fallback = 0  # of those, how many the local runner did after the runner failed
        self.failures: list[Failure] = []  # jobs still without outputs


def dispatch(
    job_file: JobFile,
    jobs: Sequence[Job],
    options: Options,
    log: Log,
    on_done: Callable[[Result], None] | None = None,
) -> Outcome:
    """Compiles ``jobs`` with the configured runner, then locally what it failed to do.

    ``on_done`` gets every job that succeeded, the moment it did."""
    outcome = Outcome()
    if not jobs:
        return outcome
    terminate_on_sigterm()
    remove_outputs(jobs)
    from .extracted import extracted

    with extracted(jobs):  # LLD 21's unwritten archive members, for as long as jobs run
        _run_with_fallback(job_file, jobs, options, log, on_done, outcome)
    return outcome


def _run_with_fallback(
    job_file: JobFile,
    jobs: Sequence[Job],
    options: Options,
    log: Log,
    on_done: Callable[[Result], None] | None,
    outcome: Outcome,
) -> None:
    from ..runners.wrapped import InnerNotStartedError

    failed: list[Result] = []
    falling_back = False

    def report(result: Result) -> None:
        if not result.ok:
            failed.append(result)
            return
        outcome.compiled += 1
        if falling_back:
            result.by = "here after the runner failed (fallback)"
        if on_done is not None:
            on_done(result)

    runner = make_runner(options, log)
    try:
        runner.run(job_file, jobs, report)
    except InnerNotStartedError as e:
        if options.no_fallback:
            raise
        reported = {r.job.index for r in failed}
        failed += [Result(j, 0.0, str(e)) for j in jobs if j.index not in reported]
    remote = options.inner or options.dask_scheduler or options.remote_executor
    if failed and remote and not options.no_fallback:
        log.warn(f"{failed[0].failure}; compiling {len(failed)} of {len(jobs)} jobs locally")
        retry = [r.job for r in failed]
        failed = []
        falling_back = True
        before = outcome.compiled
        remove_outputs(retry)
        make_runner(options, log, "local").run(job_file, retry, report)
        outcome.fallback = outcome.compiled - before
    outcome.failures = [Failure(r.job, r.failure or "") for r in failed]


def terminate_on_sigterm() -> None:
    """SIGTERM (and SIGHUP, unless ignored: nohup) unwinds like Ctrl-C, so running jobs are
    stopped and temporary files removed.

    Installed only when jobs are about to run: a link served from the cache has nothing to
    stop, and the signal module costs start-up time."""
    import signal

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:
        signal.signal(signal.SIGHUP, handler)


def raise_failures(failures: list[Failure]) -> None:
    if not failures:
        return
    first = failures[0]
    more = f" (and {len(failures) - 1} more failed jobs)" if len(failures) > 1 else ""
    raise JobsFailedError(
        f"backend job for {first.job.primary_output} failed: {first.reason}{more}"
    )


def run_plain(job_file: JobFile, options: Options, log: Log) -> Summary:
    """Every job through the runner, no cache: --disable, or a cache that cannot be used."""
    remote = []

    def count(result: Result) -> None:
        if result.remote:
            remote.append(result)

    outcome = dispatch(job_file, job_file.jobs, options, log, count)
    raise_failures(outcome.failures)
    summary = Summary(len(job_file.jobs), 0, outcome.compiled, outcome.fallback)
    summary.compiled_remotely = len(remote)
    return summary
