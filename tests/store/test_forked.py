"""store/forked.py: work split across forked processes gives what one process gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent


def test_split_results_in_order_and_no_serializer_imported() -> None:
    """Results cross the pipe marshalled: a large link that forks imports no json (nor re
    and enum), which would cost it ~7 ms."""
    code = (
        "import os, sys\n"
        "from store.forked import split\n"
        "parent = os.getpid()\n"
        "def work(share):\n"
        "    return [(i, f'item {i}', [os.getpid() != parent, None, 1.5]) for i in share]\n"
        "def revive(v):\n"
        "    i, text, rest = v\n"
        "    return (int(i), str(text), list(rest))\n"
        "out = split(work, 300, 3, revive, lambda: [('a', 'b')], lambda x: print(x))\n"
        "assert [v[:2] for v in out] == [(i, f'item {i}') for i in range(300)]\n"
        "print(sum(1 for v in out if v[2][0]), [m for m in ('json', 're', 'enum')"
        " if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    # Both workers told what they learned; 200 of the 300 were done by them.
    assert done.stdout.split("\n")[:3] == ["[('a', 'b')]", "[('a', 'b')]", "200 []"]


def test_a_share_whose_results_cannot_be_sent_is_done_here() -> None:
    """A worker whose results marshal cannot carry sends nothing: the parent does its share."""
    import os

    from store.forked import split

    class Placed:
        def __init__(self, i: int) -> None:
            self.i, self.pid = i, os.getpid()

    def revive(value: object) -> Placed:
        raise AssertionError("nothing came back to revive")

    out = split(lambda share: [Placed(i) for i in share], 40, 2, revive)
    assert [p.i for p in out] == list(range(40))
    assert {p.pid for p in out} == {os.getpid()}


def test_a_worker_keeps_nothing_of_this_process_open() -> None:
    """Killed, a link must not leave its worker holding a build's output pipe (or a client's
    socket) open: the worker's standard streams are /dev/null, its other descriptors closed."""
    import os
    import select
    import time

    from store.forked import start

    read_end, write_end = os.pipe()  # as a build's pipe on this process's stdout
    try:

        def work() -> list[object]:
            time.sleep(2)
            return []

        worker = start(work)
        assert worker is not None
        os.close(write_end)
        write_end = -1
        started = time.monotonic()
        assert select.select([read_end], [], [], 5)[0]  # the end of the pipe, at once
        assert os.read(read_end, 1) == b"" and time.monotonic() - started < 1
        worker.cancel()
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def test_a_first_message_comes_before_the_work_ends(tmp_path: Path) -> None:
    """start(first=...) sends first() before work() begins: the parent has it while the
    worker still works, and the results still come whole after it."""
    import time

    from store.forked import start

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
    from store.forked import start

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

    from store.forked import start

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
