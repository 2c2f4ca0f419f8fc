"""A real Dask cluster on 127.0.0.1 for tests: `dask scheduler` and `dask worker` processes.

Workers run in a private mount namespace (`unshare --mount`, so the tests need root) with a
tmpfs over each hidden directory: a build directory hidden this way cannot be read by a
worker, so a test fails if anything relies on a shared file system. A worker can also see
another file over a path (a bind mount), e.g. a different compiler.
"""

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

DASK = Path(sys.executable).parent / "dask"

requires_dask = pytest.mark.skipif(
    not DASK.exists() or shutil.which("unshare") is None or os.geteuid() != 0,
    reason="needs the dask extra (scripts/setup), unshare and root for mount namespaces",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Cluster:
    """A scheduler and its workers; every process is a group leader, stopped as a group.

    Not a session leader: with the kernel's autogroup scheduling each session gets a fair
    share of the CPUs, so workers in sessions of their own would outrun a local link on a
    busy machine and make a benchmark meaningless."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def _start(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - the process owns it
        self.processes[name] = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            process_group=0, env={**os.environ, **(env or {})},
        )  # fmt: skip
        log.close()

    def start_scheduler(self) -> None:
        self._start("scheduler", [str(DASK), "scheduler", "--host", "127.0.0.1", "--port",
                                  str(self.port), "--dashboard-address", "127.0.0.1:0"])  # fmt: skip
        self._await_log("scheduler", "Scheduler at:")

    def start_worker(
        self, name: str, hide: Sequence[Path] = (), swap: dict[Path, Path] | None = None
    ) -> None:
        """A worker (under a nanny, which restarts it if it dies) that cannot see ``hide`` and
        sees swap[P] at each path P. Its compiles see CACHED_DIST_TEST_WORKER=name."""
        setup = [f"mount -t tmpfs none {shlex.quote(str(d))}" for d in hide]
        setup += [f"mount --bind {shlex.quote(str(src))} {shlex.quote(str(dst))}"
                  for dst, src in (swap or {}).items()]  # fmt: skip
        worker = [str(DASK), "worker", self.address, "--nworkers", "1", "--nthreads", "1",
                  "--no-dashboard", "--name", name, "--local-directory",
                  str(self.logs / f"{name}-scratch")]  # fmt: skip
        script = " && ".join([*setup, "exec " + shlex.join(worker)])
        self._start(name, ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                    {"CACHED_DIST_TEST_WORKER": name})  # fmt: skip

    def await_workers(self, count: int, timeout: float = 90.0) -> None:
        from distributed import Client

        with Client(self.address, timeout=30) as client:  # type: ignore[no-untyped-call]
            client.wait_for_workers(count, timeout=timeout)

    def run_on_workers(self, function: object, *args: object) -> dict[str, object]:
        """``function(*args)`` on every worker, by worker address."""
        from distributed import Client

        with Client(self.address, timeout=30) as client:  # type: ignore[no-untyped-call]
            result: dict[str, object] = client.run(function, *args)
            return result

    def _await_log(self, name: str, text: str, timeout: float = 60.0) -> None:
        path = self.logs / f"{name}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in path.read_text(errors="replace"):
                return
            if self.processes[name].poll() is not None:
                break
            time.sleep(0.1)
        pytest.fail(f"{name} did not start: {path.read_text(errors='replace')[-2000:]}")

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        process = self.processes.pop(name)
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with_kill(process)

    def stop_all(self) -> None:
        workers = [n for n in self.processes if n != "scheduler"]
        for name in [*workers, "scheduler"]:
            if name in self.processes:
                self.stop(name)


def with_kill(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


@contextmanager
def cluster(
    logs: Path, workers: int, hide: Sequence[Path] = (), swap: dict[Path, Path] | None = None
) -> Iterator[Cluster]:
    c = Cluster(logs)
    try:
        c.start_scheduler()
        for i in range(workers):
            c.start_worker(f"w{i + 1}", hide, swap)
        if workers:
            c.await_workers(workers)
        yield c
    finally:
        c.stop_all()
