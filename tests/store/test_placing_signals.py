"""No temporary file is left beside a link's outputs, whatever signal ends it.

A copy is made in ``.OUTPUT.PID.RANDOM.tmp`` and renamed over the output: SIGTERM, SIGINT
or SIGHUP while placing waits until the batch is placed; what a SIGKILL leaves is swept by
the next link (store/placing.py).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from store import Store
from store.placing import SignalsHeld, sweep_stale_temps

CTX = multiprocessing.get_context("fork")


def _as_a_link_starts() -> None:
    """The dispositions a link starts with (an earlier test in this process may have run a
    link's dispatch, which turns SIGTERM into KeyboardInterrupt)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _hold_then(sig: int, done: str) -> None:
    _as_a_link_starts()
    with SignalsHeld():
        signal.raise_signal(sig)
        Path(done).write_text("placed")  # still runs: the signal waits for the block's end
    Path(done).write_text("after")  # never runs: the signal ends the process here
    os._exit(0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_waits_for_the_block_then_ends_the_process(tmp_path: Path, sig: int) -> None:
    done = tmp_path / "done"
    p = CTX.Process(target=_hold_then, args=(sig, str(done)))
    p.start()
    p.join(30)
    assert p.exitcode == -sig
    assert done.read_text() == "placed"


def _dropped_then(done: str) -> None:
    """As CPython does with a signal that reaches its C handler just before the default
    disposition is given back: the C handler wrote it to the wakeup fd, and the Python
    handler that would have noted it is never run."""
    _as_a_link_starts()
    with SignalsHeld() as held:
        assert held.wakeup is not None
        os.write(held.wakeup[1], bytes([signal.SIGTERM]))
        Path(done).write_text("placed")
    Path(done).write_text("after")  # never runs
    os._exit(0)


def test_a_signal_python_dropped_while_giving_dispositions_back_still_ends_it(
    tmp_path: Path,
) -> None:
    done = tmp_path / "done"
    p = CTX.Process(target=_dropped_then, args=(str(done),))
    p.start()
    p.join(30)
    assert p.exitcode == -signal.SIGTERM
    assert done.read_text() == "placed"


def test_sigint_raises_keyboardinterrupt_after_the_block(tmp_path: Path) -> None:
    # Python's own SIGINT handler, as a link started from a terminal has it: a process
    # started in the background by a shell without job control inherits SIGINT ignored,
    # and Python then leaves it so (held or not, nothing would come).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    got = []
    try:
        with SignalsHeld():
            signal.raise_signal(signal.SIGINT)  # to this thread: noted before it returns
            got.append("placed")
        got.append("after")
    except KeyboardInterrupt:
        got.append("interrupted")
    finally:
        now = signal.signal(signal.SIGINT, previous)
    assert got == ["placed", "interrupted"]
    assert now is signal.default_int_handler


def test_ignored_signal_stays_ignored(tmp_path: Path) -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with SignalsHeld():
            signal.raise_signal(signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def _place_forever(root: str, keys: list[str], out: str, ready: Any) -> None:
    _as_a_link_starts()
    s = Store(root, warn=lambda _m: None)
    items = [(m, {"obj": os.path.join(out, f"o{i}.native.o")})
             for i, m in enumerate(s.get(k) for k in keys) if m is not None]  # fmt: skip
    ready.set()
    while True:  # one at a time (as a link serves a key another link stored): no stage, so
        for manifest, dests in items:  # each copy is made beside its output
            s.materialize(manifest, dests)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signals_at_random_moments_leave_no_temporary_file(tmp_path: Path, sig: int) -> None:
    root = str(tmp_path / "c")
    s = Store(root)
    keys = []
    src = tmp_path / "src"
    for i in range(200):
        src.write_bytes(os.urandom(256) * (i % 7 + 1))
        key = f"{i:04x}" * 4
        assert s.put(key, {"obj": str(src)}, duration=0, toolchain="t", key_version=1)
        keys.append(key)
    s.close()
    out = tmp_path / "out"
    out.mkdir()
    rng = random.Random(sig)
    for _ in range(15):
        ready = CTX.Event()
        p = CTX.Process(target=_place_forever, args=(root, keys, str(out), ready))
        p.start()
        assert ready.wait(30)
        time.sleep(rng.uniform(0.0, 0.05))
        os.kill(p.pid or 0, sig)
        p.join(30)
        assert p.exitcode is not None and p.exitcode != 0
        left = [n.name for n in out.iterdir() if n.name.endswith(".tmp")]
        assert left == []


def test_sweep_removes_only_what_dead_processes_left(tmp_path: Path) -> None:
    dead = CTX.Process(target=os._exit, args=(0,))
    dead.start()
    dead.join(10)
    gone = dead.pid or 0
    rand = "0123456789ab"
    stale = tmp_path / f".app.1.42.native.o.{gone}.{rand}.tmp"
    live = tmp_path / f".app.2.42.native.o.{os.getppid()}.{rand}.tmp"
    mine = tmp_path / f".app.3.42.native.o.{os.getpid()}.{rand}.tmp"
    others = [tmp_path / f".app.o.{gone}.notrandomhex.tmp", tmp_path / f"app.o.{gone}.{rand}.tmp",
              tmp_path / f".app.o.{gone}.{rand}.tmpx", tmp_path / f".{gone}.{rand}.tmp"]  # fmt: skip
    for path in [stale, live, mine, *others]:
        path.write_bytes(b"")
    (tmp_path / f".dir.o.{gone}.{rand}.tmp").mkdir()  # not a file: left alone
    assert sweep_stale_temps([str(tmp_path), str(tmp_path / "missing")]) == 1
    assert not stale.exists()
    assert all(p.exists() for p in [live, mine, *others])


def test_placing_beside_outputs_sweeps_what_a_killed_link_left(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    src = tmp_path / "src"
    src.write_bytes(b"object")
    assert s.put("abcd", {"obj": str(src)}, duration=0, toolchain="t", key_version=1)
    out = tmp_path / "out"
    out.mkdir()
    dead = CTX.Process(target=os._exit, args=(0,))
    dead.start()
    dead.join(10)
    left = out / f".app.1.42.native.o.{dead.pid}.0123456789ab.tmp"
    left.write_bytes(b"")  # what a SIGKILL while placing leaves
    m = s.get("abcd")
    assert m is not None and s.materialize(m, {"obj": str(out / "app.2.43.native.o")})
    assert not left.exists()
    assert (out / "app.2.43.native.o").read_bytes() == b"object"
