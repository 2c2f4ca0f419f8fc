"""procs/forked.py: a forked worker (and a standby forked ahead of its work) gives what it
worked out, or fails so that the caller does the work itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent.parent


def test_results_come_back_in_order_and_no_serializer_is_imported() -> None:
    """Results cross the pipe marshalled: a served link that forks its early worker imports
    no json (nor re and enum), which would cost it ~7 ms."""
    code = (
        "import os, sys\n"
        "from procs.forked import start\n"
        "parent = os.getpid()\n"
        "def work():\n"
        "    return [(i, f'item {i}', [os.getpid() != parent, None, 1.5]) for i in range(300)]\n"
        "def revive(v):\n"
        "    i, text, rest = v\n"
        "    return (int(i), str(text), list(rest))\n"
        "worker = start(work, lambda: [('a', 'b')])\n"
        "learned = []\n"
        "out = worker.collect(revive, learned.append, 300)\n"
        "worker.cancel()\n"
        "assert [v[:2] for v in out] == [(i, f'item {i}') for i in range(300)]\n"
        "print(learned, all(v[2][0] for v in out), [m for m in ('json', 're', 'enum')"
        " if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    # What it learned came with its results, all of which it worked out itself.
    assert done.stdout.split("\n")[:1] == ["[[('a', 'b')]] True []"]


def test_results_marshal_cannot_carry_read_as_a_failed_worker() -> None:
    """A worker whose results marshal cannot carry sends nothing: collect() says None, and
    the caller does that work itself."""
    from procs.forked import start

    class Placed:
        pass

    def revive(value: object) -> Placed:
        raise AssertionError("nothing came back to revive")

    worker = start(lambda: [Placed()])
    assert worker is not None
    assert worker.collect(revive, None, 1) is None
    worker.cancel()


def test_a_worker_keeps_nothing_of_this_process_open(tmp_path: Path) -> None:
    """Killed, a link must not leave its worker holding a build's output pipe (or a client's
    socket) open: the worker's standard streams are /dev/null, its other descriptors closed."""
    import os
    import select
    import time

    from procs.forked import start

    read_end, write_end = os.pipe()  # as a build's pipe on this process's stdout
    go = tmp_path / "go"  # the worker works until it exists
    try:

        def work() -> list[object]:
            deadline = time.monotonic() + 60
            while not go.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            return []

        worker = start(work)
        assert worker is not None
        os.close(write_end)
        write_end = -1
        assert select.select([read_end], [], [], 60)[0]
        assert os.read(read_end, 1) == b""  # the end of the pipe, while the worker works:
        assert os.waitid(os.P_PID, worker.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        go.write_text("")
        worker.cancel()
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def test_a_first_message_comes_before_the_work_ends(tmp_path: Path) -> None:
    """start(first=...) sends first() before work() begins: the parent has it while the
    worker still works, and the results still come whole after it."""
    import time

    from procs.forked import start

    go = tmp_path / "go"  # the worker works until it exists: it cannot be done yet

    def work() -> list[object]:
        deadline = time.monotonic() + 10
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return [1, "two", go.exists()]

    worker = start(work, lambda: "learned", lambda: ("first", [1, 2]))
    assert worker is not None
    assert worker.first() == ("first", [1, 2])
    assert worker.first() is None  # only once
    go.write_bytes(b"")
    extra: list[object] = []
    assert worker.collect(lambda v: v, extra.append, 3) == [1, "two", True]
    assert extra == ["learned"]
    worker.cancel()


def test_a_first_message_nobody_took_is_skipped_and_one_that_never_came_fails() -> None:
    from procs.forked import start

    worker = start(lambda: [3], None, lambda: {"a": 1})
    assert worker is not None
    assert worker.collect(lambda v: v) == [3]
    worker.cancel()

    def broken() -> object:
        raise RuntimeError("no first message")

    failed = start(lambda: [4], None, broken)
    assert failed is not None
    assert failed.first() is None
    assert failed.collect(lambda v: v) is None  # its share is done by the caller
    failed.cancel()


def test_collecting_leaves_the_worker_to_end_and_cancel_waits_for_it() -> None:
    """collect() does not wait for the worker's exit; cancel() then reaps it, without a
    signal (its results were read)."""
    import os

    from procs.forked import start

    worker = start(lambda: [1])
    assert worker is not None
    pid = worker.pid
    assert worker.collect(lambda v: v) == [1]
    worker.cancel()
    try:
        os.waitpid(pid, os.WNOHANG)
        raise AssertionError("not reaped")
    except ChildProcessError:
        pass


def _plan(message: Any) -> Any:
    """A standby's plan in these tests: ("square", n) -> first n, then the squares below n,
    then an order's double; anything else -> nothing to do."""
    if not (isinstance(message, tuple) and message[:1] == ("square",)):
        return None
    n = int(message[1])
    return (lambda: [i * i for i in range(n)], lambda: "learned", lambda: n,
            lambda order: 2 * order)  # fmt: skip


def test_a_standby_does_what_it_is_told_as_a_started_worker_would(tmp_path: Path) -> None:
    """Forked before its work is known: it runs ``wait`` (whose ``told()`` turns true when
    the message comes), then its first message, results, extra and answer come as
    start()'s."""
    import time
    from collections.abc import Callable

    from procs.forked import standby

    mark = tmp_path / "told"

    def wait(told: Callable[[], bool]) -> None:  # runs in the standby
        deadline = time.monotonic() + 10
        while not told() and time.monotonic() < deadline:
            time.sleep(0.01)
        mark.write_text(str(told()))

    ready = standby(_plan, wait, first=True, then=True)
    assert ready is not None and not ready.told
    time.sleep(0.3)
    assert not mark.exists()  # still waiting
    assert ready.go(("square", 5)) and ready.told
    assert not ready.go(("square", 6))  # once
    worker = ready.worker
    assert worker.first() == 5
    extra: list[object] = []
    assert worker.collect(lambda v: v, extra.append, 5) == [0, 1, 4, 9, 16]
    assert extra == ["learned"]
    assert worker.order(21) and worker.answer() == 42
    ready.cancel()
    assert mark.read_text() == "True"


def test_a_standby_with_nothing_to_do_ends_and_reads_as_failed() -> None:
    """Told something its plan refuses, or a plan whose messages are not the ones promised
    (no first message), or never told and cancelled: it ends without a word."""
    import psutil

    from procs.forked import standby

    refused = standby(_plan, lambda told: None, first=True, then=True)
    assert refused is not None and refused.go(("cube", 3))
    assert refused.worker.first() is None and refused.worker.collect(lambda v: v) is None
    refused.cancel()

    unpromised = standby(_plan, lambda told: None, first=False, then=True)
    assert unpromised is not None and unpromised.go(("square", 3))
    assert unpromised.worker.collect(lambda v: v) is None
    unpromised.cancel()

    idle = standby(_plan, lambda told: None, first=True, then=True)
    assert idle is not None
    pid = idle.worker.pid
    assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    idle.cancel()
    assert not psutil.pid_exists(pid) and not idle.go(("square", 3))


def test_a_standby_that_is_gone_cannot_be_told() -> None:
    import os
    import signal

    from procs.forked import standby

    gone = standby(_plan, lambda told: None, first=True, then=True)
    assert gone is not None
    os.kill(gone.worker.pid, signal.SIGKILL)
    os.waitid(os.P_PID, gone.worker.pid, os.WEXITED | os.WNOWAIT)  # dead (not reaped yet)
    assert not gone.go(("square", 3))  # EPIPE
    assert gone.worker.first() is None
    gone.cancel()


def test_a_stopped_worker_is_given_up_rather_than_waited_for_forever() -> None:
    """A standby lives between links, where anyone may stop it (SIGSTOP, a debugger): a
    link waiting for its message gives up on it within STOPPED_CHECK and does the work
    itself (the caller sees a failed worker); cancel() still ends it."""
    import os
    import signal
    import time

    import psutil

    from procs.forked import STOPPED_CHECK, standby

    stopped = standby(_plan, lambda told: None, first=True, then=True)
    assert stopped is not None
    pid = stopped.worker.pid
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stopped.go(("square", 3))  # into the pipe: it does not read it
    started = time.monotonic()
    assert stopped.worker.first() is None
    assert time.monotonic() - started < STOPPED_CHECK + 1
    assert stopped.worker.collect(lambda v: v) is None
    stopped.cancel()
    assert not psutil.pid_exists(pid)


def test_a_standby_keeps_nothing_of_this_process_open(tmp_path: Path) -> None:
    """As a started worker: /dev/null as its standard streams, and only its three pipes."""
    import os
    import time

    import psutil

    from procs.forked import standby

    mark = tmp_path / "waiting"

    def wait(told: Any) -> None:  # runs in the standby, once it has let go of the rest
        # Written aside, then renamed: the mark shows only once the file writing it is
        # closed (else the listing below may catch that descriptor open).
        aside = tmp_path / "waiting.aside"
        aside.write_text("")
        aside.rename(mark)
        while not told():
            time.sleep(0.01)

    ready = standby(_plan, wait, first=True, then=True)
    assert ready is not None
    deadline = time.monotonic() + 10
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    process = psutil.Process(ready.worker.pid)
    opened = sorted(f.fd for f in process.open_files())  # regular files only
    fds = sorted(int(fd) for fd in os.listdir(f"/proc/{process.pid}/fd"))
    ready.cancel()
    assert fds == [0, 1, 2, 3, 4, 5]
    assert opened == []  # /dev/null is not a regular file; nothing else of ours is open
