"""Code run in child processes by the concurrency tests (real processes, not threads)."""

from __future__ import annotations

import os
import random
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from store import Store
from tests.store.helpers import Warnings, content


def stress(root: str, max_size: int, seed: int, ops: int, keys: list[str], out: Queue[Any]) -> None:
    """Random put/get/claim/memo operations; report exceptions and wrong bytes."""
    warnings = Warnings()
    errors: list[str] = []
    wrong: list[str] = []
    hits = misses = puts = 0
    work = Path(root).parent / f"w{seed}"
    work.mkdir(exist_ok=True)
    rng = random.Random(seed)
    try:
        s = Store(root, max_size=max_size, warn=warnings)
        for i in range(ops):
            key = rng.choice(keys)
            roll = rng.random()
            try:
                if roll < 0.4:
                    src = work / "src"
                    src.write_bytes(content(key))
                    puts += s.put(
                        key, {"obj": str(src)}, duration=0.01, toolchain="t", key_version=1
                    )
                elif roll < 0.9:
                    m = s.get(key)
                    dest = work / f"out{i % 3}"
                    if m is not None and s.materialize(m, {"obj": str(dest)}):
                        hits += 1
                        if dest.read_bytes() != content(key):
                            wrong.append(key)
                    else:
                        misses += 1
                elif roll < 0.95:
                    with s.claim(key, wait=0.2) as c:
                        if c.acquired:
                            src = work / "src"
                            src.write_bytes(content(key))
                            s.put(
                                key, {"obj": str(src)}, duration=0.01, toolchain="t", key_version=1
                            )
                else:
                    value = s.memo_get("ns", key)
                    if value is not None and value != key[::-1]:
                        wrong.append("memo " + key)
                    s.memo_put("ns", key, key[::-1])
            except Exception as error:  # the store must never raise: record, keep going
                errors.append(f"{type(error).__name__}: {error}")
        s.record(hits=hits, misses=misses)
    except Exception as error:
        errors.append(f"outer {type(error).__name__}: {error}")
    out.put({"errors": errors, "wrong": wrong, "hits": hits, "misses": misses, "puts": puts,
             "warnings": warnings.messages})  # fmt: skip


def writer_forever(root: str, max_size: int, seed: int, keys: list[str], ready: Event) -> None:
    """Put continuously until SIGKILLed: the kill lands at a random point inside put."""
    s = Store(root, max_size=max_size, warn=lambda _m: None)
    rng = random.Random(seed)
    src = Path(root).parent / f"src-{os.getpid()}"
    ready.set()
    while True:
        key = rng.choice(keys)
        src.write_bytes(content(key, 300_000))
        s.put(key, {"obj": str(src), "aux": str(src)}, duration=0.5, toolchain="t", key_version=1)
        if rng.random() < 0.2:
            s.record(hits=1)


def hold_claim(root: str, key: str, ready: Event, release: Event, store_after: float) -> None:
    """Take the claim and keep it until `release` is set (or forever); optionally store then."""
    s = Store(root, warn=lambda _m: None)
    c = s.claim(key, wait=0)
    assert c.acquired
    ready.set()
    if store_after >= 0:
        time.sleep(store_after)
        src = Path(root).parent / "held-src"
        src.write_bytes(content(key))
        s.put(key, {"obj": str(src)}, duration=1.0, toolchain="t", key_version=1)
        c.release()
        return
    release.wait(60)
    c.release()


def foreign_heartbeat(marker: str, interval: float, ready: Event) -> None:
    """Play a holder on another host: keep refreshing its marker's mtime, as its heartbeat would."""
    ready.set()
    while True:
        os.utime(marker)
        time.sleep(interval)
