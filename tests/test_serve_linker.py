"""How a server's child finds the linker whose link it served (cached_dist/serve/server.py:
_linker), with real processes: the pid LLD puts in its job file's name, trusted only when
that process is the client or one of its ancestors."""

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from cached_dist.serve.server import _linker, _parent

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd (Linux < 5.3)")


@pytest.fixture
def grandchild() -> Iterator[int]:
    """A process two levels below this one (a shell, then a sleep): as a client is below
    the linker when a wrapper distributor stands between them."""
    shell = subprocess.Popen(["sh", "-c", "sleep 30; exit 0"])
    try:
        deadline = time.monotonic() + 10
        while not (below := psutil.Process(shell.pid).children()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        yield below[0].pid
    finally:
        shell.kill()
        shell.wait()
        for process in below:
            process.kill()


def _is_me(pidfd: int) -> bool:
    """Whether ``pidfd`` stands for this process (its fdinfo says which pid); closes it."""
    if pidfd < 0:
        return False
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as info:
            fields = dict(line.split(":", 1) for line in info if ":" in line)
        return int(fields["Pid"]) == os.getpid()
    finally:
        os.close(pidfd)


def test_the_linker_named_by_the_job_file_and_above_the_client_is_found(grandchild: int) -> None:
    assert _is_me(_linker(f"/some/dir/app.{os.getpid()}.dist-file.json", grandchild))
    assert _is_me(_linker(f"app.{os.getpid()}.dist-file.json", os.getpid()))  # the client


@pytest.mark.parametrize(
    "name",
    ["job.json", "app.dist-file.json", "app..dist-file.json", "app.12a.dist-file.json",
     "app.\u0663.dist-file.json", "app.-1.dist-file.json", f"app.{2**80}.dist-file.json"],
)  # fmt: skip
def test_a_job_file_not_named_as_lld_names_it_names_no_linker(grandchild: int, name: str) -> None:
    assert _linker(name, grandchild) == -1


def test_a_process_that_is_not_above_the_client_is_not_its_linker(grandchild: int) -> None:
    """Another process's pid in the name (here the init process's, and a sibling's) is not
    waited for: the child would wait on a stranger."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _linker(f"app.{other.pid}.dist-file.json", grandchild) == -1
        assert _linker("app.1.dist-file.json", grandchild) == -1
        assert _linker(f"app.{os.getpid()}.dist-file.json", 999_999_999) == -1  # no client
    finally:
        other.kill()
        other.wait()


def test_a_parent_is_read_past_any_name() -> None:
    """A process's name in /proc/PID/stat is in parentheses and may hold anything, even
    parentheses and spaces."""
    named = subprocess.Popen([sys.executable, "-c", (
        "import ctypes, time\n"
        "ctypes.CDLL(None).prctl(15, b') 1 2 (x', 0, 0, 0)\n"  # PR_SET_NAME
        "print(flush=True)\n"
        "time.sleep(30)\n")], stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert named.stdout is not None
        named.stdout.readline()
        assert psutil.Process(named.pid).name() == ") 1 2 (x"
        assert _parent(named.pid) == os.getpid()
    finally:
        named.kill()
        named.wait()
