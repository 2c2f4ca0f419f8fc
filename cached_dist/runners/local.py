"""The default runner: the jobs' own commands, in parallel, on this machine, without a shell.

Processes are started with posix_spawn and awaited through pidfds, so a link waits on exactly
its own children and starts no threads. Each compile runs in a process group of its own, so
stopping it stops whatever it started too. A job's stdout and stderr go to an anonymous
memory file and are relayed, tagged with the job, when it ends: parallel jobs never
interleave lines. Each job is reported the moment it ends.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..jobfile import Job, JobFile
from ..log import Log
from ..options import Options
from . import Result, missing_output
from .process import spawn, stop_group

TYPE_CHECKING = False
if TYPE_CHECKING:
    from . import Report

_TAIL_LINES = 3


@dataclass(slots=True)
class _Running:
    job: Job
    pid: int
    pidfd: int
    output_fd: int
    started: float


class LocalRunner:
    """Runs at most ``parallel`` jobs at a time, largest module first; after a failure it
    starts no new ones."""

    name = "local runner"

    def __init__(self, parallel: int, log: Log) -> None:
        self.parallel = max(1, parallel)
        self.log = log

    @classmethod
    def from_options(cls, options: Options, log: Log) -> LocalRunner:
        return cls(options.jobs, log)

    def run(self, job_file: JobFile, jobs: Sequence[Job], report: Report) -> None:
        order = sorted(jobs, key=_module_size, reverse=True)  # stable: ties keep file order
        pending = order[::-1]  # popped from the end
        running: dict[int, _Running] = {}  # by pidfd
        failed = False
        poller = select.poll()
        try:
            while pending or running:
                while pending and len(running) < self.parallel and not failed:
                    job = pending.pop()
                    command = job_file.command(job)
                    if not command[0]:
                        failed = True
                        report(Result(job, 0.0, "the job file names no compiler (common.args[0] "
                                      "is empty): link with -Wl,--thinlto-remote-compiler=CLANG "
                                      "or wrap a distributor that brings its own"))  # fmt: skip
                        continue
                    try:
                        r = _spawn(command, job)
                    except OSError as e:
                        failed = True
                        report(Result(job, 0.0, f"cannot run {e.filename or 'command'}: "
                                                f"{e.strerror}"))  # fmt: skip
                        continue
                    running[r.pidfd] = r
                    poller.register(r.pidfd, select.POLLIN)
                if failed and not running:
                    break
                for fd, _ in poller.poll():
                    r = running.pop(fd)
                    poller.unregister(fd)
                    result = self._finish(r)
                    failed = failed or not result.ok
                    report(result)
        finally:
            for r in running.values():  # interrupted: stop the children and what they started
                _stop(r)
        for job in reversed(pending):  # never started: a job before them failed
            report(Result(job, 0.0, "not started after an earlier job failed"))

    def _finish(self, r: _Running) -> Result:
        _, status = os.waitpid(r.pid, 0)
        seconds = time.monotonic() - r.started
        stop_group(r.pid)  # anything the compiler left running in its group
        os.close(r.pidfd)
        text = _drain(r.output_fd)
        self.log.passthrough(os.path.basename(r.job.module), text)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            what = f"exit status {code}" if code > 0 else f"killed by signal {-code}"
            tail = [line for line in text.splitlines() if line.strip()][-_TAIL_LINES:]
            return Result(r.job, seconds, what + (": " + " | ".join(tail) if tail else ""))
        missing = missing_output(r.job)
        if missing is not None:
            return Result(r.job, seconds, f"exited 0 but did not write {missing}")
        return Result(r.job, seconds, by="here", output=text)


def _module_size(job: Job) -> int:
    """Big modules start first, as in LLD's in-process backend, so none is left for last."""
    try:
        return os.stat(job.module).st_size
    except OSError:
        return 0


def _spawn(command: list[str], job: Job) -> _Running:
    out = _output_file()
    try:
        pid = spawn(command, stdout=out)
    except OSError:
        os.close(out)
        raise
    return _Running(job, pid, os.pidfd_open(pid), out, time.monotonic())


def _output_file() -> int:
    try:
        return os.memfd_create("cached-dist-job")
    except (AttributeError, OSError):
        import tempfile

        fd, path = tempfile.mkstemp(prefix="cached-dist-job.")
        os.unlink(path)
        return fd


def _drain(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _stop(r: _Running) -> None:
    stop_group(r.pid, reap=True)
    for fd in (r.pidfd, r.output_fd):
        with contextlib.suppress(OSError):
            os.close(fd)
