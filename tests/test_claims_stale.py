"""Claim markers nobody can vouch for are broken in seconds; live holders are never robbed.

A holder killed between creating its marker and writing its record leaves an empty marker;
anyone in the group can plant junk. Before, each stalled every link that needed the key for
WAIT_BOUND (600 s). These tests plant such markers in front of the store's claims, the
maintenance lock and real links, and race breakers and holders killed at random moments.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import store.lease
from store import Store

from .toolchain import Project, build, counting_compiler, requires_toolchain

CTX = multiprocessing.get_context("fork")
GRACE = store.lease.UNREADABLE_GRACE
JUNK = {
    "empty": b"",
    "partial": b"filelock/2\npid=12",  # a record cut short by its writer's death
    "junk": b"\x00\xff not a record at all\n" * 3,
    "released": b"filelock/released\n",  # what filelock leaves in a displaced marker
}


def _plant(path: Path, data: bytes, age: float = 0.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if age:
        then = time.time() - age
        os.utime(path, (then, then))


@pytest.mark.parametrize("kind", sorted(JUNK))
def test_old_unreadable_marker_is_broken_at_once(tmp_path: Path, kind: str) -> None:
    s = Store(tmp_path / "c")
    _plant(tmp_path / "c" / "claims" / "abcd.lock", JUNK[kind], age=GRACE + 5)
    with s.claim("abcd", wait=0) as c:  # a single non-blocking try, as a link's first pass
        assert c.acquired, c
        assert "pid=" in (tmp_path / "c" / "claims" / "abcd.lock").read_text()  # ours now


@pytest.mark.parametrize("kind", sorted(JUNK))
def test_fresh_unreadable_marker_is_kept_for_the_grace_then_broken(
    tmp_path: Path, kind: str
) -> None:
    """A holder between creating and writing its marker is not robbed; seconds later, a
    waiter polling with wait=0 (a link waiting for others) takes it over."""
    s = Store(tmp_path / "c")
    planted = time.monotonic()
    _plant(tmp_path / "c" / "claims" / "abcd.lock", JUNK[kind])
    c = s.claim("abcd", wait=0)
    if time.monotonic() - planted < GRACE / 2:  # else this host was too slow to tell
        assert not c.acquired and c.reason == "timeout"
    deadline = time.monotonic() + GRACE + 30
    while not c.acquired and time.monotonic() < deadline:
        time.sleep(0.05)
        c = s.claim("abcd", wait=0)
    assert c.acquired
    assert time.monotonic() - planted >= GRACE * 0.99
    c.release()


def test_planted_directory_fails_the_claim_at_once(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    (tmp_path / "c" / "claims" / "abcd.lock").mkdir(parents=True)
    started = time.monotonic()
    c = s.claim("abcd", wait=60)
    assert not c.acquired and c.reason == "error"  # the caller computes without it
    assert time.monotonic() - started < 30  # never the whole wait


def test_empty_maintenance_lock_does_not_hold_up_verify(tmp_path: Path) -> None:
    """trim/verify/clear wait up to 30 s for the maintenance lock; an empty marker is no
    holder's, so they go ahead after the grace."""
    s = Store(tmp_path / "c")
    _plant(tmp_path / "c" / "locks" / "maintenance.lock", b"")
    started = time.monotonic()
    s.verify()
    assert time.monotonic() - started < 20  # the old behaviour: the full 30 s
    assert not (tmp_path / "c" / "locks" / "maintenance.lock").exists()  # released after


def _sleeper() -> None:
    time.sleep(120)


def test_record_of_a_running_process_that_never_refreshes_is_taken_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record naming a live process of this host (planted, or a holder stuck in the kernel)
    that nobody refreshes for a whole lease is no holder's; while that process is stopped,
    it is kept (tests/store/test_concurrency.py::test_stopped_local_holder_is_never_broken)."""
    from filelock._identity import host_name, process_start_token

    monkeypatch.setattr(store.lease, "LEASE_DURATION", 0.6)
    p = CTX.Process(target=_sleeper)
    p.start()
    try:
        pid = p.pid or 0
        record = (f"filelock/2\npid={pid}\nhost={host_name()}\nmode=lease\n"
                  f"token={'cd' * 16}\nduration=0.6\nstart={process_start_token(pid)}\n")  # fmt: skip
        marker = tmp_path / "c" / "claims" / "abcd.lock"
        s = Store(tmp_path / "c")
        _plant(marker, record.encode())
        planted = time.time()
        with s.claim("abcd", wait=20) as c:
            assert c.acquired
            assert time.time() - planted >= 0.59  # not before a lease passed unrefreshed
    finally:
        p.kill()
        p.join(10)


# -- races: breakers against breakers, holders killed at every instant ----------------------


def _break_once(root: str, go: Any, done: Any, won: Any, tried: Any) -> None:
    s = Store(root, warn=lambda _m: None)
    go.wait(30)
    c = s.claim("abcd", wait=0)
    if c.acquired:
        with won.get_lock():
            won.value += 1
    with tried.get_lock():
        tried.value += 1
    done.wait(60)  # hold it until every racer has tried
    c.release()
    os._exit(0)


@pytest.mark.parametrize("kind", ["empty", "dead holder"])
def test_racing_breakers_of_one_stale_marker_one_wins(tmp_path: Path, kind: str) -> None:
    root = str(tmp_path / "c")
    Store(root).close()
    marker = Path(root) / "claims" / "abcd.lock"
    for _ in range(8):
        if kind == "empty":
            _plant(marker, b"", age=GRACE + 5)
        else:  # a holder SIGKILLed while it held the claim
            p = CTX.Process(target=_hold_forever, args=(root,))
            p.start()
            deadline = time.monotonic() + 30
            while not (marker.exists() and "pid=" in marker.read_text()):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            os.kill(p.pid or 0, signal.SIGKILL)
            p.join(10)
        go, done = CTX.Event(), CTX.Event()
        won, tried = CTX.Value("i", 0), CTX.Value("i", 0)
        racers = [CTX.Process(target=_break_once, args=(root, go, done, won, tried))
                  for _ in range(4)]  # fmt: skip
        for r in racers:
            r.start()
        go.set()
        deadline = time.monotonic() + 60
        while tried.value < len(racers) and time.monotonic() < deadline:
            time.sleep(0.01)
        done.set()  # only now may the winner give it up
        for r in racers:
            r.join(30)
        assert won.value == 1, f"{won.value} racers took the same stale marker"
        assert not marker.exists()  # the winner released it


def _hold_forever(root: str) -> None:
    s = Store(root, warn=lambda _m: None)
    c = s.claim("abcd", wait=30)
    assert c.acquired
    time.sleep(300)


def _contend(root: str, inside: str, stop: Any, violations: Any) -> None:
    """Take the claim again and again; while holding it, check nobody else that is alive
    holds it too (``inside`` names the last holder that did not say it left)."""
    s = Store(root, warn=lambda _m: None)
    me = os.getpid()
    while not stop.is_set():
        c = s.claim("abcd", wait=5)
        if not c.acquired:
            continue
        try:
            try:
                other = int(Path(inside).read_text() or 0)
            except (OSError, ValueError):
                other = 0
            if other and other != me and _alive(other):
                with violations.get_lock():
                    violations.value += 1
            Path(inside).write_text(str(me))
            time.sleep(random.uniform(0, 0.01))
            Path(inside).write_text("")
        finally:
            c.release()
    os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    return state != "Z"


def test_holders_and_breakers_killed_at_random_never_overlap(tmp_path: Path) -> None:
    """Four processes contend for one claim while one of them is SIGKILLed at a random
    moment, over and over: creating, writing, heartbeating, releasing or breaking a marker.
    Never two live holders at once, and the claim never stays stuck."""
    root = str(tmp_path / "c")
    Store(root).close()
    inside = str(tmp_path / "inside")
    stop, violations = CTX.Event(), CTX.Value("i", 0)
    rng = random.Random(20250715)

    def start() -> Any:
        p = CTX.Process(target=_contend, args=(root, inside, stop, violations))
        p.start()
        return p

    procs = [start() for _ in range(4)]
    try:
        for _ in range(40):
            time.sleep(rng.uniform(0.0, 0.05))
            victim = procs.pop(rng.randrange(len(procs)))
            os.kill(victim.pid or 0, signal.SIGKILL)
            victim.join(10)
            procs.append(start())
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert violations.value == 0
    s = Store(root)
    with s.claim("abcd", wait=GRACE + 30) as c:  # whatever the kills left is broken in time
        assert c.acquired


# -- real links ------------------------------------------------------------------------------


def _keys_of(project: Project, cache: Path, wrapper: Path) -> list[str]:
    """The cache keys of the project's jobs, from a --verbose link into a scratch cache."""
    done = project.link("scratch", remote_compiler=wrapper,
                        distributor_args=[f"--cache-dir={cache}", "--verbose"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    keys = re.findall(r"miss ([0-9a-f]{16,}) ", done.stderr)
    assert keys, done.stderr
    return keys


def _timed_link(project: Project, cache: Path, wrapper: Path) -> tuple[float, str]:
    """How long a --verbose link took, and what it said."""
    started = time.monotonic()
    done = project.link(remote_compiler=wrapper,
                        distributor_args=[f"--cache-dir={cache}", "--verbose"])  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "5 jobs: 0 hits, 5 compiled" in done.stderr, done.stderr
    assert project.run_program() == project.expected_output
    return took, done.stderr


@requires_toolchain
@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["empty", "junk"])
def test_link_through_planted_claim_markers_is_not_held_up(tmp_path: Path, kind: str) -> None:
    """An empty or junk marker for every key a link needs: the link compiles them and
    finishes in seconds (it used to wait WAIT_BOUND, 600 s)."""
    project = build("calc", tmp_path / "p")
    wrapper, _ = counting_compiler(tmp_path)
    keys = _keys_of(project, tmp_path / "scratch-cache", wrapper)
    cache = tmp_path / "cache"
    for key in keys:  # left by holders killed a while ago, as in the kill trials
        _plant(cache / "claims" / f"{key}.lock", JUNK[kind], age=GRACE + 10)
    took, said = _timed_link(project, cache, wrapper)
    assert "waited" not in said, said  # each broken at the link's first try: no wait at all
    assert took < 5.0
    assert not list((cache / "claims").glob("*.lock"))  # taken over, then released


@requires_toolchain
@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["empty", "junk"])
def test_link_through_fresh_unreadable_markers_waits_only_the_grace(
    tmp_path: Path, kind: str
) -> None:
    """Markers planted just before the link (as a holder killed a moment ago leaves them, or
    a member plants them): the link waits about UNREADABLE_GRACE, not minutes."""
    project = build("calc", tmp_path / "p")
    wrapper, _ = counting_compiler(tmp_path)
    keys = _keys_of(project, tmp_path / "scratch-cache", wrapper)
    cache = tmp_path / "cache"
    for key in keys:
        _plant(cache / "claims" / f"{key}.lock", JUNK[kind])
    took, said = _timed_link(project, cache, wrapper)
    # It waited for the markers (the figure includes compiling what it then took over), and
    # took them over: it did not wait its bound out (that warns: "compiling N jobs here").
    assert re.search(r"waited [0-9.]+ s for 5 keys other links held", said), said
    assert "jobs here" not in said and "warning" not in said, said
    assert took < GRACE + 5.0
    assert not list((cache / "claims").glob("*.lock"))  # taken over, then released


@pytest.mark.parametrize("kind", ["empty", "dead holder"])
def test_stale_marker_is_broken_where_exchanges_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """NFS and some FUSE or overlay mounts refuse renameat2(RENAME_EXCHANGE) (EINVAL):
    filelock then leaves a stale marker where it is; the lease renames it aside instead.
    (The refusal is what filelock's exchange helper answers for EINVAL: False.)"""
    import filelock._filesystem
    import filelock._soft._exclusive._recovery as recovery

    for module in (recovery, filelock._filesystem):
        monkeypatch.setattr(module, "exchange_names", lambda source, target: False)
    root = str(tmp_path / "c")
    Store(root).close()
    marker = Path(root) / "claims" / "abcd.lock"
    if kind == "empty":
        _plant(marker, b"", age=GRACE + 5)
    else:
        p = CTX.Process(target=_hold_forever, args=(root,))
        p.start()
        deadline = time.monotonic() + 30
        while not (marker.exists() and "pid=" in marker.read_text()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(p.pid or 0, signal.SIGKILL)
        p.join(10)
    s = Store(root)
    with s.claim("abcd", wait=10) as c:
        assert c.acquired
    assert not list(marker.parent.glob("*.break.*"))
