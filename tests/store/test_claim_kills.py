"""A claim's holder, or a breaker of a stale claim, SIGKILLed at each instant of its work.

The instants (store/claims.py, store/lease.py and filelock's marker code they run): the
marker created (empty), its record half written, the claim held (the compile), the blob
published but its entry not yet written, the entry written but the claim not yet released,
the claim released; and, for a waiter breaking a dead holder's marker, its own marker made
aside (empty), and the exchange done but the old marker not yet removed. A real process
dies at each (a hook that SIGKILLs it there); the next process to claim the key gets it,
or reads the entry, within the wait, is served the right bytes, and leaves no marker behind.
(tests/test_claims_stale.py plants what such deaths leave; tests/test_kill_trials.py kills
real links at random moments.)
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest

import store.lease
from store import Store
from store.maintenance import STALE_TEMP
from tests.store.helpers import content, served, write

CTX = multiprocessing.get_context("fork")
KEY = "ab12"
GRACE = store.lease.UNREADABLE_GRACE


def _die(*_args: Any) -> NoReturn:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("not killed")


def _hook(owner: object, name: str, replacement: object) -> None:
    """Replaces ``owner.name`` in this (forked, about to die) process."""
    setattr(owner, name, replacement)


def _put(s: Store, src: str) -> bool:
    return s.put(KEY, {"obj": src}, duration=1.0, toolchain="t", key_version=1)


def _holder(root: str, src: str, instant: str) -> None:
    """Claims KEY, stores it and releases the claim, SIGKILLed at ``instant``."""
    if instant == "marker created":  # O_EXCL done, record not yet written
        _hook(store.lease.HostAwareLease, "_write_lock_info", _die)
    elif instant == "record half written":

        def half(_self: object, fd: int) -> NoReturn:
            os.write(fd, b"filelock/2\npid=")
            _die()

        _hook(store.lease.HostAwareLease, "_write_lock_info", half)
    s = Store(root, warn=lambda _m: None)
    c = s.claim(KEY, wait=0)
    assert c.acquired
    if instant == "holding":
        _die()
    if instant == "blob published":
        assert s._index is not None
        _hook(s._index, "set_entry", _die)
    assert _put(s, src)
    if instant == "entry stored":
        _die()
    c.release()
    _die()  # "released"


def _breaker(root: str, instant: str) -> None:
    """Breaks the dead holder's marker on KEY, SIGKILLed at ``instant`` of the takeover."""
    if instant == "breaker's marker made aside":  # the holder's is still in place
        _hook(store.lease.HostAwareLease, "_write_lock_info", _die)
    else:  # "markers exchanged": the holder's is aside, not yet removed
        import filelock._soft._exclusive._recovery as recovery

        exchange = getattr(recovery, "exchange_names")  # noqa: B009 (not exported)

        def exchange_then_die(source: str, target: str) -> bool:
            if exchange(source, target):
                _die()
            return False

        _hook(recovery, "exchange_names", exchange_then_die)
    s = Store(root, warn=lambda _m: None)
    s.claim(KEY, wait=GRACE + 30)
    raise AssertionError("the takeover never came to the instant")


def _killed(target: Any, *args: object) -> None:
    p = CTX.Process(target=target, args=args)
    p.start()
    p.join(60)
    assert p.exitcode == -signal.SIGKILL, p.exitcode


def _claims(root: str) -> list[str]:
    return sorted(os.listdir(os.path.join(root, "claims")))


def _next_process_gets_it(root: str, tmp: Path, data: bytes, stored: bool) -> list[str]:
    """What the next link does: claims KEY (or finds it stored), stores it if it must, and is
    served ``data``; the cache verifies clean, no marker is left, and trim removes what else
    is in claims/ once it is old. What was left before that, returned."""
    s = Store(root)
    c = s.claim(KEY, wait=GRACE + 30)
    if stored:
        assert (c.acquired, c.reason) == (False, "entry"), c
    else:
        assert c.acquired, c  # not "timeout": nobody waited the claim out
        assert _put(s, write(tmp / "again", data))
    c.release()
    assert served(s, tmp, KEY) == data
    report = s.verify()
    assert (report.blobs_corrupt, report.entries_dropped, report.problem) == (0, 0, None)
    assert f"{KEY}.lock" not in _claims(root)  # released, or never left
    # What a killed breaker left aside is no marker; trim removes it once it is an hour old
    # (a takeover in progress lasts microseconds), never before.
    s.trim()
    left = _claims(root)
    for name in left:
        then = time.time() - STALE_TEMP - 60
        os.utime(os.path.join(root, "claims", name), (then, then))
    s.trim()
    s.close()
    assert _claims(root) == [], left
    return left


@pytest.mark.parametrize("instant", [
    "marker created", "record half written", "holding", "blob published", "entry stored",
    "released",
])  # fmt: skip
def test_a_holder_killed_at_any_instant_holds_nobody_up(tmp_path: Path, instant: str) -> None:
    root = str(tmp_path / "c")
    Store(root).close()
    data = content("claim kills", 40_000)
    _killed(_holder, root, write(tmp_path / "src", data), instant)
    left = _claims(root)
    assert left == ([] if instant == "released" else [f"{KEY}.lock"]), left
    after = _next_process_gets_it(root, tmp_path, data, instant in ("entry stored", "released"))
    assert after == []


@pytest.mark.parametrize("instant", ["breaker's marker made aside", "markers exchanged"])
def test_a_breaker_killed_mid_takeover_holds_nobody_up(tmp_path: Path, instant: str) -> None:
    root = str(tmp_path / "c")
    Store(root).close()
    data = content("claim kills", 40_000)
    _killed(_holder, root, write(tmp_path / "src", data), "holding")
    _killed(_breaker, root, instant)
    left = _claims(root)
    assert len(left) == 2 and f"{KEY}.lock" in left, left  # the marker, and one aside
    after = _next_process_gets_it(root, tmp_path, data, stored=False)
    if instant == "breaker's marker made aside":  # the next breaker does not know it
        assert len(after) == 1 and after[0].startswith(f"{KEY}.lock.break."), after
    else:  # the next breaker took the old marker back from aside, and removed it
        assert after == []
