"""Wraps another DTLTO distributor: hands it a job file of our choosing and checks its work.

The inner distributor reports nothing per job, so every job is reported when it exits. It
runs in a process group of its own: an interrupt or an error stops it and every compiler it
started. The job file written for it (``NAME.cached-dist.HOST.PID.json``, beside the
original so relative paths mean the same) is removed on every exit path; one left by a run
that was killed is swept by the next run in that directory.
"""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import time
from collections.abc import Sequence

from .. import jobfile
from ..errors import InputError
from ..jobfile import Job, JobFile
from ..log import Log
from ..options import Options
from . import Result, missing_output
from .process import spawn, stop_group

TYPE_CHECKING = False
if TYPE_CHECKING:
    from . import Report


class InnerNotStartedError(InputError):
    """The inner distributor's program could not be executed at all."""


class WrappedRunner:
    """Runs ``command + [JOBFILE]`` as LLD would, with a job file holding only ``jobs``."""

    def __init__(self, command: Sequence[str], log: Log) -> None:
        self.command = list(command)
        self.name = f"inner distributor {' '.join(self.command)!r}"
        self.log = log

    @classmethod
    def from_options(cls, options: Options, log: Log) -> WrappedRunner:
        return cls(options.inner, log)

    def run(self, job_file: JobFile, jobs: Sequence[Job], report: Report) -> None:
        sweep_stale_job_files(job_file.path)
        path = inner_job_file_path(job_file.path)
        started = time.monotonic()
        try:
            jobfile.write_lld(job_file, jobs, path)
            status = _run([*self.command, path])
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
        share = (time.monotonic() - started) / max(1, len(jobs))  # no per-job timing from it
        if status != 0:
            what = f"exit status {status}" if status > 0 else f"killed by signal {-status}"
            for job in jobs:
                report(Result(job, share, f"{self.name} failed ({what})"))
            return
        for job in jobs:
            missing = missing_output(job)
            failure = None if missing is None else f"{self.name} did not write {missing}"
            report(Result(job, share, failure, by="by the inner distributor"))


_MARK = ".cached-dist."


def inner_job_file_path(original: str) -> str:
    stem = original.removesuffix(".json")
    return f"{stem}{_MARK}{socket.gethostname()}.{os.getpid()}.json"


def sweep_stale_job_files(original: str) -> None:
    """Removes job files this program wrote for an inner distributor in a run on this host
    that died before it could remove them (its process no longer exists)."""
    directory = os.path.dirname(original) or "."
    host = socket.gethostname()
    pattern = os.path.join(glob.escape(directory), f"*{_MARK}{glob.escape(host)}.*.json")
    for path in glob.glob(pattern):
        pid_text = path.removesuffix(".json").rsplit(".", 1)[-1]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _run(argv: list[str]) -> int:
    try:
        pid = spawn(argv)
    except OSError as e:
        raise InnerNotStartedError(f"cannot run inner distributor {argv[0]!r}: {e.strerror}") from e
    try:
        _, status = os.waitpid(pid, 0)
    except BaseException:
        stop_group(pid, reap=True)
        raise
    stop_group(pid)  # compilers it left running must not write outputs after it returned
    return os.waitstatus_to_exitcode(status)
