"""Helpers shared by the store tests, importable by spawned worker processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from store import Store


def content(key: str, max_len: int = 16384) -> bytes:
    """Deterministic bytes for a key, so any process can check what it was served."""
    seed = hashlib.sha256(key.encode()).digest()
    size = 1 + int.from_bytes(seed[:4], "little") % max_len
    return (seed * (size // len(seed) + 1))[:size]


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


class Warnings:
    """Collects store warnings so tests can assert what was reported."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def __call__(self, message: str) -> None:
        self.messages.append(message)

    def text(self) -> str:
        return "\n".join(self.messages)


def fill(directory: Path, name: str = "filler") -> Path:
    """A file that takes every byte left on ``directory``'s file system."""
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        chunk = b"\0" * 65536
        while True:
            try:
                os.write(fd, chunk)
            except OSError:
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)
    return path


def put(s: Store, tmp: Path, key: str, data: bytes) -> bool:
    """``data`` stored as the one output of ``key``."""
    src = write(tmp / f"src-{key}", data)
    return s.put(key, {"obj": src}, duration=1.0, toolchain="t", key_version=1)


def served(s: Store, tmp: Path, key: str) -> bytes | None:
    """The bytes a hit on ``key`` places, None for a miss."""
    m = s.get(key)
    dest = tmp / f"out-{key}"
    if m is None or not s.materialize(m, {"obj": str(dest)}):
        return None
    return dest.read_bytes()


def try_mount_tmpfs(target: Path, size: str, options: str = "") -> bool:
    """Mount a small tmpfs (needs root and CAP_SYS_ADMIN); False when the test must skip.
    ``options``: more mount options (``nr_inodes=64``)."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    target.mkdir(parents=True, exist_ok=True)
    more = f",{options}" if options else ""
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755{more}", "tmpfs", str(target)],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def remount_ro(target: Path) -> bool:
    result = subprocess.run(
        ["mount", "-o", "remount,ro", str(target)], capture_output=True, check=False
    )
    return result.returncode == 0


def umount(target: Path) -> None:
    subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


def mounted_tmpfs(target: Path, size: str) -> Iterator[Path]:
    """A fixture's body: a tmpfs of ``size`` at ``target`` for the test, unmounted after it;
    the test is skipped where none can be mounted."""
    if not try_mount_tmpfs(target, size):
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        yield target
    finally:
        umount(target)


def counting_forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Makes os.fork record each child it starts; returns that list."""
    forks: list[int] = []
    real = os.fork

    def fork() -> int:
        pid = real()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return forks
