"""The default runner: the jobs' own commands, in parallel, on this machine, without a shell.

Processes are started with posix_spawn and awaited through pidfds, so a link waits on exactly
its own children and starts no threads. A job's stdout and stderr go to an anonymous memory
file and are relayed, tagged with the job, when it ends: parallel jobs never interleave lines.
"""

import contextlib
import os
import select
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..jobfile import Job, JobFile
from ..log import Log
from . import Failure, missing_output

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
        self.durations: dict[int, float] = {}

    def run(self, job_file: JobFile, jobs: Sequence[Job]) -> list[Failure]:
        order = sorted(jobs, key=_module_size, reverse=True)  # stable: ties keep file order
        pending = order[::-1]  # popped from the end
        running: dict[int, _Running] = {}  # by pidfd
        failures: list[Failure] = []
        poller = select.poll()
        try:
            while pending or running:
                while pending and len(running) < self.parallel and not failures:
                    job = pending.pop()
                    try:
                        r = _spawn(job_file.command(job), job)
                    except OSError as e:
                        failures.append(Failure(job, f"cannot run {e.filename or 'command'}: "
                                                     f"{e.strerror}"))  # fmt: skip
                        continue
                    running[r.pidfd] = r
                    poller.register(r.pidfd, select.POLLIN)
                if failures and not running:
                    break
                for fd, _ in poller.poll():
                    r = running.pop(fd)
                    poller.unregister(fd)
                    failure = self._finish(r)
                    if failure is not None:
                        failures.append(failure)
        finally:
            for r in running.values():  # interrupted: stop the children cleanly
                _stop(r)
        return failures

    def _finish(self, r: _Running) -> Failure | None:
        _, status = os.waitpid(r.pid, 0)
        self.durations[r.job.index] = time.monotonic() - r.started
        os.close(r.pidfd)
        text = _drain(r.output_fd)
        self.log.passthrough(os.path.basename(r.job.module), text)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            what = f"exit status {code}" if code > 0 else f"killed by signal {-code}"
            tail = [line for line in text.splitlines() if line.strip()][-_TAIL_LINES:]
            return Failure(r.job, what + (": " + " | ".join(tail) if tail else ""))
        missing = missing_output(r.job)
        if missing is not None:
            return Failure(r.job, f"exited 0 but did not write {missing}")
        return None


def _module_size(job: Job) -> int:
    """Big modules start first, as in LLD's in-process backend, so none is left for last."""
    try:
        return os.stat(job.module).st_size
    except OSError:
        return 0


def _spawn(command: list[str], job: Job) -> _Running:
    out = _output_file()
    try:
        pid = os.posix_spawnp(
            command[0],
            command,
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out, 1),
                (os.POSIX_SPAWN_DUP2, out, 2),
            ],
        )
    except OSError as e:
        os.close(out)
        if e.filename is None:
            e.filename = command[0]
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
    try:
        os.kill(r.pid, 15)
        os.waitpid(r.pid, 0)
    except OSError:
        pass
    for fd in (r.pidfd, r.output_fd):
        with contextlib.suppress(OSError):
            os.close(fd)
