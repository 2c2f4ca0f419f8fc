"""Runs a job file: check it, serve hits, compile the rest, fall back, report."""

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .checks import check_inputs, check_output_dirs
from .errors import JobsFailedError
from .jobfile import Job, JobFile
from .log import Log
from .options import Options
from .runners import Failure, Runner, remove_outputs


@dataclass
class Outcome:
    """What one dispatch did, for the summary line and for storing results."""

    compiled: list[Job] = field(default_factory=list)  # jobs whose outputs now all exist
    fallback: int = 0  # of those, how many the local runner did after the inner one failed
    failures: list[Failure] = field(default_factory=list)  # jobs still without outputs
    durations: dict[int, float] = field(default_factory=dict)  # job index -> seconds


@dataclass
class Summary:
    jobs: int
    hits: int = 0
    compiled: int = 0
    fallback: int = 0

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


def raise_failures(failures: list[Failure]) -> None:
    if not failures:
        return
    first = failures[0]
    more = f" (and {len(failures) - 1} more failed jobs)" if len(failures) > 1 else ""
    raise JobsFailedError(
        f"backend job for {first.job.primary_output} failed: {first.reason}{more}"
    )


def run(job_file: JobFile, options: Options, log: Log) -> int:
    """The whole distributor for one link; returns the exit status."""
    started = time.monotonic()
    check_inputs(job_file)
    check_output_dirs(job_file)
    if options.disable:
        outcome = dispatch(job_file, job_file.jobs, options, log)
        raise_failures(outcome.failures)
        summary = Summary(len(job_file.jobs), 0, len(outcome.compiled), outcome.fallback)
    else:
        from .caching import run_cached

        summary = run_cached(job_file, options, log)
    log.info(summary.line(time.monotonic() - started))
    return 0
