"""A full disk heals: what a write that found no room leaves behind is reclaimed, and the cache
works again once there is room, with no manual step. Real small file systems (a 2 MiB tmpfs,
an ext4 or a tmpfs short of inodes) filled to the brim by the store's own puts or by a filler.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import xxhash

from store import Store
from store.maintenance import RECLAIM_FLAG, referenced
from tests.store.helpers import (
    Warnings,
    content,
    fill,
    mounted_tmpfs,
    put,
    served,
    try_mount_tmpfs,
    umount,
)


def says_full(text: str) -> bool:
    """Whether warnings say the disk is full, in the system's or sqlite's words."""
    return "No space left on device" in text or "database or disk is full" in text


def digest(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def blob_files(root: Path) -> set[str]:
    return {p.parent.name + p.name for p in (root / "blobs").glob("*/*") if p.is_file()}


def named_by_entries(root: Path) -> set[str]:
    s = Store(root)
    assert s._index is not None
    used, _ = referenced(s._index)
    s.close()
    return used


def starve(directory: Path) -> list[Path]:
    """Empty files that take every inode left on ``directory``'s file system."""
    made: list[Path] = []
    (directory / "starve").mkdir()
    while True:
        path = directory / "starve" / str(len(made))
        try:
            path.touch()
        except OSError:
            return made
        made.append(path)


def free_inodes(path: Path) -> int:
    return os.statvfs(path).f_favail


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Path]:
    yield from mounted_tmpfs(tmp_path / "small", "2m")


def test_a_put_that_cannot_write_its_entry_takes_its_blobs_back(tmp_path: Path) -> None:
    """The index on a file system of its own, filled: the blob is published (its file system
    has room), the entry cannot be written. The new blob is removed again, one another entry
    names is kept, and the flag left asks the next writer for a reclaim pass."""
    root = tmp_path / "c"
    if not try_mount_tmpfs(root / "index", "512k"):
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        w = Warnings()
        s = Store(root, warn=w)
        kept, lost = content("kept", 40_000), content("lost", 40_000) + b"!"
        assert put(s, tmp_path, "aa01", kept)
        fillers = [fill(root / "index")]
        assert not put(s, tmp_path, "bb02", lost)  # its blob was new: taken back
        # That failure reclaimed at once (the index's sqlite log gave its room back): fill
        # that too. A process reclaims once: this failure leaves the flag for the next.
        fillers.append(fill(root / "index", "filler2"))
        assert not put(s, tmp_path, "cc03", kept)  # its blob is aa01's: kept
        assert says_full(w.text())
        assert blob_files(root) == {digest(kept)}
        assert (root / RECLAIM_FLAG).exists()
        assert served(s, tmp_path, "aa01") == kept
        s.close()
        for filler in fillers:
            filler.unlink()
        s = Store(root)  # the next process: its first write reclaims, then stores
        assert put(s, tmp_path, "bb02", lost) and put(s, tmp_path, "cc03", kept)
        assert not (root / RECLAIM_FLAG).exists()
        assert [served(s, tmp_path, k) for k in ("aa01", "bb02", "cc03")] == [kept, lost, kept]
        s.close()
    finally:
        umount(root / "index")


def test_trim_takes_back_orphans_and_the_databases_logs(small: Path, tmp_path: Path) -> None:
    """An unreferenced blob (what a writer killed between its blob and its entry leaves) and
    the sqlite logs, which keep their largest size: trim gives both back."""
    root = small / "c"
    s = Store(root)
    for i in range(20):
        assert put(s, tmp_path, f"{i:04x}", content(f"k{i}", 20_000))
    s.memo_put_many("n", [(f"{i}", "v" * 100) for i in range(50)])
    orphan = content("orphan", 30_000) + b"?"
    path = root / "blobs" / digest(orphan)[:2] / digest(orphan)[2:]
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(orphan)
    os.utime(path, (1, 1))  # older than any put still writing its entry
    wal = root / "index" / "cache.db-wal"
    assert wal.stat().st_size > 0
    s.close()
    s = Store(root)
    assert s.trim() >= len(orphan) and s.failure is None
    s.close()
    assert digest(orphan) not in blob_files(root)
    assert not wal.exists() or wal.stat().st_size == 0
    assert blob_files(root) == named_by_entries(root)


def test_links_that_fill_the_disk_themselves_keep_working(small: Path, tmp_path: Path) -> None:
    """A cache limit far above the file system's size (the default 5 GiB on 2 MiB): the disk,
    not the counter, is the limit. Each "link" (a process: a Store of its own) stores five
    objects; the one put that finds the disk full makes room (unreferenced blobs, sqlite logs,
    the oldest memos and entries) and the rest of the link stores, round after round."""
    root = small / "c"
    failures = []
    for n in range(40):
        s = Store(root, warn=lambda message: None)
        keys = [f"{n:02x}{i:02x}" for i in range(5)]
        datas = [content(f"{n}.{i}", 40_000) + bytes([n, i]) for i in range(5)]
        s.memo_put_many("shard", [(f"{n}.{i}", "m" * 64) for i in range(20)])
        stored = [put(s, tmp_path, k, d) for k, d in zip(keys, datas, strict=True)]
        failures.append(stored.count(False))
        if False in stored:  # the failure made room: every later put of the link stores
            assert all(stored[stored.index(False) + 1 :]), f"round {n}: {stored}"
        for k, d in zip(keys, datas, strict=True):
            # A miss at worst, never other bytes. (A put that failed only at its row file
            # stored its entry: a hit.)
            assert served(s, tmp_path, k) in (d, None)
        last = max(i for i, ok in enumerate(stored) if ok)  # the newest: no room taken from it
        assert served(s, tmp_path, keys[last]) == datas[last], f"round {n}"
        s.close()
    assert max(failures) <= 1 and sum(failures) >= 1, failures  # the disk did fill
    assert blob_files(root) <= named_by_entries(root) | set()  # no orphans left


def _loop_ext4(where: Path, inodes: int) -> Path | None:
    """A loop-mounted ext4 of 8 MiB with ``inodes`` inodes, or None where it cannot be made."""
    image, mnt = where / "ext4.img", where / "ext4"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", "-N", str(inodes), str(image)],
                          capture_output=True)  # fmt: skip
    if made.returncode != 0 or os.geteuid() != 0:
        return None
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True)
    return mnt if mounted.returncode == 0 else None


@pytest.mark.parametrize("fs", ["ext4", "tmpfs"])
def test_a_cache_short_of_inodes_heals(tmp_path: Path, fs: str) -> None:
    """Inodes run out before bytes (an ext4 made with -N 64, else a tmpfs with nr_inodes):
    each blob, row file and fan-out directory takes one. A filler takes every inode left;
    once it is gone the next link makes room and stores, and the one after hits."""
    if fs == "ext4":
        mnt = _loop_ext4(tmp_path, 64)
        if mnt is None:
            pytest.skip("cannot make and loop-mount an ext4 here (needs mkfs.ext4 and root)")
    else:
        mnt = tmp_path / "tmpfs"
        if not try_mount_tmpfs(mnt, "8m", "nr_inodes=96"):
            pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        root = mnt / "c"
        for n in range(12):
            s = Store(root, warn=lambda message: None)
            filler = starve(mnt) if n % 3 == 0 else []  # a third of the links meet a full disk
            keys = [f"{n:02x}{i:02x}" for i in range(4)]
            datas = [content(f"i{n}.{i}", 3000) + bytes([n, i]) for i in range(4)]
            stored = [put(s, tmp_path, k, d) for k, d in zip(keys, datas, strict=True)]
            s.close()
            for path in filler:
                path.unlink()
            if filler:
                (mnt / "starve").rmdir()
                assert not all(stored), f"round {n}: the filler left room: {free_inodes(mnt)}"
            s = Store(root, warn=lambda message: None)  # the next link: room again
            again = [put(s, tmp_path, k, d) for k, d in zip(keys, datas, strict=True)]
            assert all(again), f"round {n}: {again}, {free_inodes(mnt)} inodes free"
            s.close()
            s = Store(root)  # and the one after hits
            assert [served(s, tmp_path, k) for k in keys] == datas, f"round {n}"
            s.close()
        assert blob_files(root) <= named_by_entries(root)
    finally:
        umount(mnt)


def test_a_full_disk_filled_by_someone_else_heals_when_room_returns(
    small: Path, tmp_path: Path
) -> None:
    """A filler (another program) takes all room: the link's puts fail, reported once; once
    the filler is gone, the next link stores and the one after hits, no step by hand."""
    root = small / "c"
    for n in range(10):
        w = Warnings()
        s = Store(root, warn=w)
        filler = fill(small)
        keys = [f"f{n:02x}{i}" for i in range(3)]
        datas = [content(f"f{n}.{i}", 50_000) + bytes([n, i]) for i in range(3)]
        stored = [put(s, tmp_path, k, d) for k, d in zip(keys, datas, strict=True)]
        s.close()
        # Each kind once: the full disk, and maybe the statistics database, whose sqlite
        # says "disk I/O error" when it cannot even make its shared-memory file.
        assert not all(stored) and says_full(w.text()) and len(w.messages) <= 2, w.messages
        filler.unlink()
        s = Store(root)
        assert all(put(s, tmp_path, k, d) for k, d in zip(keys, datas, strict=True))
        s.close()
        s = Store(root)
        assert [served(s, tmp_path, k) for k in keys] == datas, f"round {n}"
        s.close()
    assert blob_files(root) <= named_by_entries(root)
