"""Wraps another DTLTO distributor: hands it a job file of our choosing and checks its work."""

import contextlib
import os
import time
from collections.abc import Sequence

from .. import jobfile
from ..errors import InputError
from ..jobfile import Job, JobFile
from ..log import Log
from . import Failure, missing_output


class InnerNotStartedError(InputError):
    """The inner distributor's program could not be executed at all."""


class WrappedRunner:
    """Runs ``command + [JOBFILE]`` as LLD would, with a job file holding only ``jobs``."""

    def __init__(self, command: Sequence[str], log: Log) -> None:
        self.command = list(command)
        self.name = f"inner distributor {' '.join(self.command)!r}"
        self.log = log
        self.durations: dict[int, float] = {}

    def run(self, job_file: JobFile, jobs: Sequence[Job]) -> list[Failure]:
        path = _inner_job_file_path(job_file.path)
        jobfile.write_lld(job_file, jobs, path)
        started = time.monotonic()
        try:
            status = _run([*self.command, path])
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        share = (time.monotonic() - started) / max(1, len(jobs))  # no per-job timing from it
        self.durations = {j.index: share for j in jobs}
        if status != 0:
            what = f"exit status {status}" if status > 0 else f"killed by signal {-status}"
            return [Failure(j, f"{self.name} failed ({what})") for j in jobs]
        failures = []
        for job in jobs:
            missing = missing_output(job)
            if missing is not None:
                failures.append(Failure(job, f"{self.name} did not write {missing}"))
        return failures


def _inner_job_file_path(original: str) -> str:
    """Next to the original, so relative paths inside it mean the same for the inner tool."""
    stem = original.removesuffix(".json")
    return f"{stem}.cached-dist.{os.getpid()}.json"


def _run(argv: list[str]) -> int:
    try:
        pid = os.posix_spawnp(argv[0], argv, os.environ)
    except OSError as e:
        raise InnerNotStartedError(f"cannot run inner distributor {argv[0]!r}: {e.strerror}") from e
    try:
        _, status = os.waitpid(pid, 0)
    except BaseException:
        try:
            os.kill(pid, 15)
            os.waitpid(pid, 0)
        except OSError:
            pass
        raise
    return os.waitstatus_to_exitcode(status)
