"""Runners compile jobs: the local parallel runner, or a wrapped DTLTO distributor.

Every runner satisfies one small protocol (:class:`Runner`): it is given the jobs to run and a
callback, and reports each job through the callback as soon as it has finished, successfully
or not. The link stores a result and releases its claim the moment it is reported, so links
waiting for that key are served without waiting for the rest of the batch.

A new runner implements ``name`` and ``run``; :data:`RUNNERS` names each one and
:func:`make_runner` picks one from the options.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Protocol

    from ..jobfile import Job, JobFile
    from ..log import Log
    from ..options import Options

    Report = Callable[["Result"], None]

    class Runner(Protocol):
        name: str

        def run(self, job_file: JobFile, jobs: Sequence[Job], report: Report) -> None:
            """Runs ``jobs``, calling ``report`` once for each, as soon as it has finished.

            A job succeeded when every output exists; anything else is a failure with a
            reason. Raises only for problems that stop the runner as a whole (then the jobs
            not yet reported count as failed)."""
            ...


class Result:
    """How one job ended: ``failure`` is None when every output was written."""

    __slots__ = ("by", "cached", "failure", "job", "output", "remote", "seconds")

    def __init__(
        self, job: Job, seconds: float, failure: str | None = None, by: str = "",
        output: str = "", remote: bool = False, cached: bool = False,
    ) -> None:  # fmt: skip
        self.job = job
        self.seconds = seconds
        self.failure = failure  # e.g. "exit status 1: <last lines of stderr>"
        self.by = by  # who compiled it: "here", "by the inner distributor", "on a worker", ...
        self.output = output  # what the compiler printed (already relayed), when known
        self.remote = remote  # compiled on another machine (counted apart in the summary)
        self.cached = cached  # not compiled: the runner's own cache had it (a remote hit)

    @property
    def ok(self) -> bool:
        return self.failure is None


class Failure:
    """A job that is still without outputs after everything that was tried."""

    __slots__ = ("job", "reason")

    def __init__(self, job: Job, reason: str) -> None:
        self.job = job
        self.reason = reason


# name -> "module:class"; imported only when jobs must run.
RUNNERS = {
    "local": "cached_dist.runners.local:LocalRunner",
    "wrapped": "cached_dist.runners.wrapped:WrappedRunner",
    "dask": "cached_dist.runners.dask:DaskRunner",
    "reapi": "cached_dist.runners.reapi:ReapiRunner",
}


def make_runner(options: Options, log: Log, kind: str | None = None) -> Runner:
    """The runner the options ask for (``kind`` forces one, e.g. "local" for a fallback)."""
    from importlib import import_module

    if kind is None:
        kind = ("wrapped" if options.inner else "dask" if options.dask_scheduler
                else "reapi" if options.remote_executor else "local")  # fmt: skip
    module, _, cls = RUNNERS[kind].partition(":")
    runner: Runner = getattr(import_module(module), cls).from_options(options, log)
    return runner


def missing_output(job: Job) -> str | None:
    """The first output of ``job`` that does not exist as a regular file, if any."""
    for path in job.outputs:
        try:
            if os.stat(path).st_size >= 0 and os.path.isfile(path):
                continue
        except OSError:
            pass
        return path
    return None


def remove_outputs(jobs: Sequence[Job]) -> None:
    """Clears stale outputs so a missing one really means the runner did not write it."""
    for job in jobs:
        for path in job.outputs:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:
                pass  # a directory or no permission: the runner will report it
