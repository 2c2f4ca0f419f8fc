"""Many processes on one store: stress with eviction, writers killed mid-put, claims."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

import store.lease
from store import Store
from tests.store import workers
from tests.store.helpers import Warnings, content

# fork: children start in milliseconds, so a hundred SIGKILL trials stay fast. Parents close
# their own Store before forking, so no sqlite connection crosses a fork.
CTX = multiprocessing.get_context("fork")


def test_eight_processes_random_ops_with_eviction(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    keys = [f"{i:08x}" for i in range(48)]
    max_size = 160_000  # ~20 average blobs of the 48: forces eviction all the time
    out: Any = CTX.Queue()
    procs = [
        CTX.Process(target=workers.stress, args=(root, max_size, seed, 500, keys, out))
        for seed in range(8)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=170) for _ in procs]
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    for r in results:
        assert r["errors"] == [], r["errors"][:5]
        assert r["wrong"] == []
    assert sum(r["hits"] for r in results) > 100
    s = Store(root, max_size=max_size)
    st = s.stats()
    assert st["evictions"] > 0
    assert st["hits"] == sum(r["hits"] for r in results)
    on_disk = sum(p.stat().st_size for p in (Path(root) / "blobs").rglob("*") if p.is_file())
    # Each process may overshoot by its last put while another one holds the eviction pass.
    assert on_disk <= max_size + 8 * 16384
    s.trim()
    on_disk = sum(p.stat().st_size for p in (Path(root) / "blobs").rglob("*") if p.is_file())
    assert on_disk <= max_size and s.stats()["size"] == on_disk
    assert s.verify().blobs_corrupt == 0
    for key in keys:
        m = s.get(key)
        if m is not None:
            assert s.materialize(m, {"obj": str(tmp_path / "o")})
            assert (tmp_path / "o").read_bytes() == content(key)


def _check_served_bytes(root: str, keys: list[str], dest: Path) -> int:
    s = Store(root, max_size=2_000_000)
    hits = 0
    try:
        assert s.usable
        for key in keys:
            m = s.get(key)
            if m is not None and s.materialize(m, {"obj": str(dest), "aux": str(dest) + ".aux"}):
                expect = content(key, 300_000)
                assert dest.read_bytes() == expect
                assert Path(str(dest) + ".aux").read_bytes() == expect
                hits += 1
    finally:
        s.close()
    return hits


def test_sigkill_writer_mid_put(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    keys = [f"{i:04x}" for i in range(12)]
    rng = random.Random(1234)
    hits = 0
    trials = 110
    for trial in range(trials):
        ready = CTX.Event()
        p = CTX.Process(target=workers.writer_forever, args=(root, 2_000_000, trial, keys, ready))
        p.start()
        assert ready.wait(10)
        time.sleep(rng.uniform(0, 0.03))
        os.kill(p.pid or 0, signal.SIGKILL)
        p.join(10)
        assert p.exitcode == -signal.SIGKILL
        if trial % 10 == 9:
            hits += _check_served_bytes(root, keys, tmp_path / "out")
    assert hits > 0
    s = Store(root, max_size=2_000_000)
    report = s.verify()
    assert report.blobs_corrupt == 0 and report.blobs_checked > 0
    src = tmp_path / "after"
    src.write_bytes(b"still works")
    assert s.put("ffff", {"obj": str(src)}, duration=0, toolchain="t", key_version=1)
    m = s.get("ffff")
    assert m is not None and s.materialize(m, {"obj": str(tmp_path / "o2")})
    assert s.trim() >= 0  # sweeps what killed writers left, without raising


def _start_holder(root: str, key: str, store_after: float = -1.0) -> tuple[Any, Any]:
    ready, release = CTX.Event(), CTX.Event()
    p = CTX.Process(target=workers.hold_claim, args=(root, key, ready, release, store_after))
    p.start()
    assert ready.wait(10)
    return p, release


def test_claim_of_killed_holder_is_taken_over(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    Store(root).close()
    p, _ = _start_holder(root, "abcd")
    s = Store(root)
    c = s.claim("abcd", wait=0)
    assert not c.acquired and c.reason == "timeout"
    os.kill(p.pid or 0, signal.SIGKILL)
    p.join(10)
    start = time.monotonic()
    with s.claim("abcd", wait=10) as c:
        took = time.monotonic() - start
        assert c.acquired, c
    assert took < 2.0, took


def test_claim_of_live_holder_is_kept_until_release(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    Store(root).close()
    p, release = _start_holder(root, "abcd")
    s = Store(root)
    start = time.monotonic()
    c = s.claim("abcd", wait=1.0)
    assert not c.acquired and c.reason == "timeout"
    assert time.monotonic() - start >= 0.95
    release.set()
    start = time.monotonic()
    with s.claim("abcd", wait=10) as c:
        assert c.acquired
    assert time.monotonic() - start < 2.0
    p.join(10)
    assert p.exitcode == 0


def test_waiter_reads_entry_stored_by_holder(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    Store(root).close()
    p, _ = _start_holder(root, "abcd", store_after=0.5)
    s = Store(root)
    with s.claim("abcd", wait=10) as c:
        assert not c.acquired and c.reason == "entry"
    m = s.get("abcd")
    assert m is not None and m.meta["duration"] == 1.0
    p.join(10)


def test_holder_heartbeat_keeps_a_short_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store.lease, "LEASE_DURATION", 0.6)
    root = str(tmp_path / "c")
    Store(root).close()
    p, release = _start_holder(root, "abcd")
    marker = Path(root) / "claims" / "abcd.lock"
    first = marker.stat().st_mtime
    s = Store(root)
    c = s.claim("abcd", wait=1.5)  # 2.5 lease durations: only the heartbeat keeps it held
    assert not c.acquired
    assert marker.stat().st_mtime > first  # refreshed by the holder's heartbeat
    release.set()
    p.join(10)


def _foreign_marker(path: Path, duration: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "filelock/2\npid=4242\nhost=another-host.example\nmode=lease\n"
        f"token={'ab' * 16}\nduration={duration!r}\n"
    )


def test_foreign_holder_heartbeat_then_expiry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert socket.gethostname() != "another-host.example"
    monkeypatch.setattr(store.lease, "LEASE_DURATION", 0.8)
    root = str(tmp_path / "c")
    s = Store(root)
    marker = Path(root) / "claims" / "abcd.lock"
    _foreign_marker(marker, 0.8)
    ready = CTX.Event()
    beat = CTX.Process(target=workers.foreign_heartbeat, args=(str(marker), 0.2, ready))
    beat.start()
    assert ready.wait(10)
    try:
        c = s.claim("abcd", wait=2.0)  # the foreign holder keeps refreshing: never broken
        assert not c.acquired and c.reason == "timeout"
    finally:
        os.kill(beat.pid or 0, signal.SIGKILL)
        beat.join(10)
    last_refresh = marker.stat().st_mtime  # the file system's clock lags time.time(), if any
    start = time.monotonic()
    with s.claim("abcd", wait=10) as c:  # silent now: taken once a lease passes unrefreshed
        assert c.acquired
        # What this process saw of the marker counts across its claims (a link polls with
        # wait=0): taken over a lease after its last refresh, never before.
        assert time.time() - last_refresh >= 0.79
    took = time.monotonic() - start
    assert took < 3.0, took


def test_foreign_lease_mismatch_degrades_to_compute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store.lease, "LEASE_DURATION", 0.8)
    w = Warnings()
    s = Store(tmp_path / "c", warn=w)
    _foreign_marker(Path(s.root) / "claims" / "abcd.lock", 99.0)
    c = s.claim("abcd", wait=1.0)
    assert not c.acquired


def test_filelock_hooks_still_exist() -> None:
    """Canary: HostAwareLease overrides these private SoftFileLease methods."""
    from filelock import SoftFileLease

    for name in ("_try_break_pinned_lock", "_read_peer", "_take_over", "_marker_unchanged_for"):
        assert callable(getattr(SoftFileLease, name, None)), name


def test_stopped_local_holder_is_never_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live holder on this host keeps its claim even when its heartbeat cannot run."""
    monkeypatch.setattr(store.lease, "LEASE_DURATION", 0.5)
    root = str(tmp_path / "c")
    Store(root).close()
    p, release = _start_holder(root, "abcd")
    os.kill(p.pid or 0, signal.SIGSTOP)  # frozen: no heartbeat, but alive
    try:
        s = Store(root)
        c = s.claim("abcd", wait=1.5)  # three lease durations without a refresh
        assert not c.acquired and c.reason == "timeout"
    finally:
        os.kill(p.pid or 0, signal.SIGCONT)
    release.set()
    p.join(10)


def _record_in_child(s: Store) -> None:
    s.record(hits=5)
    os._exit(0)


def test_store_object_survives_fork(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    s.record(hits=1)  # opens the statistics database before the fork
    src = tmp_path / "s"
    src.write_bytes(b"parent")
    assert s.put("abcd", {"obj": str(src)}, duration=0, toolchain="t", key_version=1)
    p = CTX.Process(target=_record_in_child, args=(s,))
    p.start()
    p.join(10)
    assert p.exitcode == 0
    s.record(hits=1)
    assert s.stats()["hits"] == 7
    m = s.get("abcd")
    assert m is not None and s.materialize(m, {"obj": str(tmp_path / "o")})
