"""Runs a job file: check it, compile what must be compiled, fall back, report."""

import time
from collections.abc import Sequence
from dataclasses import dataclass

from .checks import check_inputs, check_output_dirs
from .errors import JobsFailedError
from .jobfile import Job, JobFile
from .log import Log
from .options import Options
from .runners import Failure, Runner, remove_outputs


@dataclass
class Outcome:
    """What one dispatch did, for the summary line and for storing results."""

    compiled: list[Job]  # every job whose outputs now exist, through any runner
    fallback: int = 0  # of those, how many the local runner did after the inner one failed


def make_runner(options: Options, log: Log) -> Runner:
    if options.inner:
        from .runners.wrapped import WrappedRunner

        return WrappedRunner(options.inner, log)
    from .runners.local import LocalRunner

    return LocalRunner(options.jobs, log)


def dispatch(job_file: JobFile, jobs: Sequence[Job], options: Options, log: Log) -> Outcome:
    """Compiles ``jobs`` with the configured runner, then locally what it failed to do.

    Raises :class:`JobsFailedError` only when outputs are still missing at the end.
    """
    if not jobs:
        return Outcome([])
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
    fallback = 0
    if failures and options.inner and not options.no_fallback:
        log.warn(f"{failures[0].reason}; compiling {len(failures)} of {len(jobs)} jobs locally")
        retry = [f.job for f in failures]
        remove_outputs(retry)
        failures = LocalRunner(options.jobs, log).run(job_file, retry)
        fallback = len(retry) - len(failures)
    if failures:
        raise JobsFailedError(_describe(failures))
    return Outcome(list(jobs), fallback)


def _describe(failures: list[Failure]) -> str:
    first = failures[0]
    more = f" (and {len(failures) - 1} more failed jobs)" if len(failures) > 1 else ""
    return f"backend job for {first.job.primary_output} failed: {first.reason}{more}"


def run(job_file: JobFile, options: Options, log: Log) -> int:
    """The whole distributor for one link; returns the exit status."""
    started = time.monotonic()
    check_inputs(job_file)
    check_output_dirs(job_file)
    outcome = dispatch(job_file, job_file.jobs, options, log)
    elapsed = time.monotonic() - started
    log.info(
        f"{len(job_file.jobs)} jobs: 0 hits, {len(outcome.compiled) - outcome.fallback} compiled, "
        f"{outcome.fallback} fallback, {elapsed:.2f} s"
    )
    return 0
