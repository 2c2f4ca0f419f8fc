"""Compressed blobs (store/blobs.py, store/zstd.py): stored as zstd frames, placed as the bytes
a fresh compile gave, every byte re-hashed; plain and compressed entries side by side."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store import Store, entry
from tests.store.helpers import write

#: Object-like bytes that compress (code, tables, zero padding), and some that do not.
OBJECT = (b"\x7fELF\x02\x01\x01" + bytes(57) + bytes(range(256)) * 40 + b"\x90" * 4000) * 4
NOISE = os.urandom(20_000)


def _put(s: Store, tmp: Path, key: str, data: bytes) -> bool:
    return s.put(key, {"output0": write(tmp / f"src-{key}", data)}, duration=1.0,
                 toolchain="t", key_version=1)  # fmt: skip


def _blob_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "blobs").rglob("*") if p.is_file())


def _placed(s: Store, key: str, dest: Path) -> bytes | None:
    m = s.get(key)
    if m is None or not s.materialize(m, {"output0": str(dest)}):
        return None
    return dest.read_bytes()


def test_a_compressing_store_keeps_frames_and_places_the_original_bytes(tmp_path: Path) -> None:
    s = Store(tmp_path / "c", compression_level=1)
    assert _put(s, tmp_path, "aa", OBJECT) and _put(s, tmp_path, "bb", NOISE)
    files = _blob_files(tmp_path / "c")
    assert [f.suffix for f in files] == [".zst", ".zst"]
    assert all(f.read_bytes()[:4] == b"\x28\xb5\x2f\xfd" for f in files)
    stats = s.stats()
    assert stats["bytes_original"] == len(OBJECT) + len(NOISE)
    assert stats["bytes_stored"] == stats["size"] == sum(f.stat().st_size for f in files)
    assert stats["bytes_original"] > 2 * stats["bytes_stored"]
    assert _placed(s, "aa", tmp_path / "a.o") == OBJECT
    assert _placed(s, "bb", tmp_path / "b.o") == NOISE
    # The same content again is not stored twice.
    assert _put(s, tmp_path, "cc", OBJECT) and len(_blob_files(tmp_path / "c")) == 2


def test_plain_and_compressed_entries_are_read_side_by_side(tmp_path: Path) -> None:
    root = tmp_path / "c"
    plain = Store(root)  # what cached-dist wrote before compression, or with --hard-link
    assert _put(plain, tmp_path, "aa", OBJECT)
    plain.close()
    z = Store(root, compression_level=3)
    assert _put(z, tmp_path, "bb", OBJECT + b"more")
    assert {f.suffix for f in _blob_files(root)} == {"", ".zst"}
    assert _placed(z, "aa", tmp_path / "a.o") == OBJECT
    assert _placed(z, "bb", tmp_path / "b.o") == OBJECT + b"more"
    linker = Store(root, hard_link=True, compression_level=3)  # links stay plain
    assert linker.compression_level == 0
    assert _placed(linker, "aa", tmp_path / "a2.o") == OBJECT
    assert _placed(linker, "bb", tmp_path / "b2.o") == OBJECT + b"more"  # decompressed
    assert os.stat(tmp_path / "a2.o").st_nlink == 2 and os.stat(tmp_path / "b2.o").st_nlink == 1
    assert _put(linker, tmp_path, "dd", b"linked" * 100)
    assert (root / "blobs").rglob("*") and not any(
        f.suffix == ".zst" and f.stat().st_size < 100 for f in _blob_files(root)
    )
    report = z.verify()
    assert (report.blobs_checked, report.blobs_corrupt, report.entries_dropped) == (3, 0, 0)


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "other frame", "empty"])
def test_a_damaged_compressed_blob_is_a_miss_and_removed(tmp_path: Path, damage: str) -> None:
    from store import zstd

    s = Store(tmp_path / "c", compression_level=1)
    assert _put(s, tmp_path, "aa", OBJECT)
    (blob,) = _blob_files(tmp_path / "c")
    frame = blob.read_bytes()
    blob.chmod(0o600)
    blob.write_bytes({
        "flip": frame[:-9] + bytes([frame[-9] ^ 0x40]) + frame[-8:],
        "truncate": frame[:-5],
        "garbage": os.urandom(len(frame)),
        "other frame": zstd.compress(OBJECT[::-1]),  # same size declared, other bytes
        "empty": b"",
    }[damage])  # fmt: skip
    dest = tmp_path / "out.o"
    assert _placed(s, "aa", dest) is None
    assert not dest.exists() and not blob.exists()
    assert s.get("aa") is None  # the entry went with it
    assert _put(s, tmp_path, "aa", OBJECT) and _placed(s, "aa", dest) == OBJECT


def test_verify_finds_a_damaged_compressed_blob(tmp_path: Path) -> None:
    s = Store(tmp_path / "c", compression_level=1)
    assert _put(s, tmp_path, "aa", OBJECT) and _put(s, tmp_path, "bb", NOISE)
    blob = _blob_files(tmp_path / "c")[0]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.chmod(0o600)
    blob.write_bytes(bytes(data))
    report = s.verify()
    assert (report.blobs_checked, report.blobs_corrupt, report.entries_dropped) == (2, 1, 1)
    assert not blob.exists()


def test_eviction_counts_and_removes_compressed_blobs(tmp_path: Path) -> None:
    s = Store(tmp_path / "c", compression_level=1, max_size=1 << 40)
    for i in range(6):
        assert _put(s, tmp_path, f"{i:02x}", OBJECT + bytes([i]))
    sizes = [f.stat().st_size for f in _blob_files(tmp_path / "c")]
    assert s.stats()["size"] == sum(sizes)
    freed = s.trim(sum(sizes) // 2)
    assert freed >= sum(sizes) // 2 - max(sizes)
    left = _blob_files(tmp_path / "c")
    assert 0 < len(left) < 6 and s.stats()["size"] == sum(f.stat().st_size for f in left)
    served = [_placed(s, f"{i:02x}", tmp_path / f"{i}.o") for i in range(6)]
    assert sum(x is not None for x in served) == len(left)
    assert all(x == OBJECT + bytes([i]) for i, x in enumerate(served) if x is not None)


@pytest.mark.parametrize("level", [0, 1])
def test_exported_values_round_trip_between_plain_and_compressing_stores(
    tmp_path: Path, level: int
) -> None:
    a = Store(tmp_path / "a", compression_level=1 - level)
    assert _put(a, tmp_path, "aa", OBJECT)
    (value,) = a.get_many(["aa"], level=level)
    assert value is not None and (len(value) < len(OBJECT) / 2) == bool(level)
    b = Store(tmp_path / "b", compression_level=level)
    b.put_many([("aa", value)])
    assert _placed(b, "aa", tmp_path / "out.o") == OBJECT
    assert entry.decode(value, "aa")[0]["output0"][1] == OBJECT


#: Eight threads compressing and decompressing different data at once, as a link's runner
#: completions and uploads do; prints how many round trips gave other bytes.
_THREADS = """
import os, sys, threading
from store import zstd
data = [os.urandom(1000) * 200 for _ in range(8)]
wrong = []
def work(i):
    for _ in range(200):
        try:
            if zstd.decompress(zstd.compress(data[i]), len(data[i])) != data[i]:
                wrong.append(i)
        except zstd.Error as e:
            wrong.append(str(e))
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(len(wrong))
"""


def test_threads_compressing_at_once_get_their_own_bytes() -> None:
    """A zstd context is not shared between threads: one shared compressor, working with the
    GIL released in two threads at once, crashed a link with a segmentation fault."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _THREADS], cwd=root, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0"]
