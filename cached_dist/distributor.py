"""Runs a job file: check it, serve hits, compile the rest, fall back, report."""

from __future__ import annotations

import time

from .checks import check_inputs, check_output_dirs
from .errors import JobsFailedError
from .runners import Failure, remove_outputs

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .jobfile import Job, JobFile
    from .log import Log
    from .options import Options
    from .runners import Runner


class Outcome:
    """What one dispatch did, for the summary line and for storing results."""

    def __init__(
        self,
        compiled: list[Job] | None = None,  # jobs whose outputs now all exist
        fallback: int = 0,  # of those, how many the local runner did after the inner one failed
        failures: list[Failure] | None = None,  # jobs still without outputs
        durations: dict[int, float] | None = None,  # job index -> seconds
    ) -> None:
        self.compiled = compiled or []
        self.fallback = fallback
        self.failures = failures or []
        self.durations = durations or {}


class Summary:
    def __init__(self, jobs: int, hits: int = 0, compiled: int = 0, fallback: int = 0) -> None:
        self.jobs = jobs
        self.hits = hits
        self.compiled = compiled
        self.fallback = fallback

    def line(self, elapsed: float) -> str:
        return (
            f"{self.jobs} jobs: {self.hits} hits, {self.compiled - self.fallback} compiled, "
            f"{self.fallback} fallback, {elapsed:.2f} s"
        )


def make_runner(options: Options, log: Log) -> Runner:
    if options.inner:
        from .runners.wrapped import WrappedRunner

        return WrappedRunner(options.inner, log)
    from .runners.local import LocalRunner

    return LocalRunner(options.jobs, log)


def dispatch(job_file: JobFile, jobs: Sequence[Job], options: Options, log: Log) -> Outcome:
    """Compiles ``jobs`` with the configured runner, then locally what it failed to do."""
    if not jobs:
        return Outcome()
    from .runners.local import LocalRunner
    from .runners.wrapped import InnerNotStartedError

    terminate_on_sigterm()
    remove_outputs(jobs)
    runner = make_runner(options, log)
    try:
        failures = runner.run(job_file, jobs)
    except InnerNotStartedError as e:
        if options.no_fallback:
            raise
        failures = [Failure(j, str(e)) for j in jobs]
    durations = dict(runner.durations)
    fallback = 0
    if failures and options.inner and not options.no_fallback:
        log.warn(f"{failures[0].reason}; compiling {len(failures)} of {len(jobs)} jobs locally")
        retry = [f.job for f in failures]
        remove_outputs(retry)
        local = LocalRunner(options.jobs, log)
        failures = local.run(job_file, retry)
        durations.update(local.durations)
        fallback = len(retry) - len(failures)
    failed = {f.job.index for f in failures}
    compiled = [j for j in jobs if j.index not in failed]
    return Outcome(compiled, fallback, failures, durations)


def terminate_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so running jobs are stopped and temporary files removed.

    Installed only when jobs are about to run: a link served from the cache has nothing to
    stop, and the signal module costs start-up time."""
    import signal

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


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
    outcome = dispatch(job_file, job_file.jobs, options, log)
    raise_failures(outcome.failures)
    return Summary(len(job_file.jobs), 0, len(outcome.compiled), outcome.fallback)


def run(job_file: JobFile, options: Options, log: Log) -> int:
    """The whole distributor for one link; returns the exit status."""
    started = time.monotonic()
    check_inputs(job_file)
    check_output_dirs(job_file)
    if options.disable:
        summary = run_plain(job_file, options, log)
    else:
        from .caching import run_cached

        summary = run_cached(job_file, options, log)
    log.info(summary.line(time.monotonic() - started))
    return 0
