"""Runners compile jobs: the local parallel runner, or a wrapped DTLTO distributor.

Both take the jobs to run and return the ones that did not produce all their outputs, so the
distributor can fall back or fail without knowing which runner it used.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol

    from ..jobfile import Job, JobFile

    class Runner(Protocol):
        name: str
        durations: dict[int, float]  # job index -> seconds its compilation took, after run()

        def run(self, job_file: JobFile, jobs: Sequence[Job]) -> list[Failure]:
            """Runs ``jobs``; returns those that failed or left an output missing."""
            ...


class Failure:
    __slots__ = ("job", "reason")

    def __init__(self, job: Job, reason: str) -> None:
        self.job = job
        self.reason = reason  # e.g. "exit status 1: <last line of stderr>"


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
