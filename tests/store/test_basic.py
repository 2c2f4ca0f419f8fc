"""Single-process behaviour of the store: round trips, dedupe, eviction, stats, modes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import Manifest, Store
from store.manifest import FORMAT
from tests.store.helpers import Warnings, content, write


def put_one(s: Store, tmp: Path, key: str, data: bytes, role: str = "obj") -> bool:
    return s.put(
        key, {role: write(tmp / f"src-{key}", data)}, duration=2.5, toolchain="t", key_version=1
    )


def test_round_trip_and_metadata(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    data = os.urandom(50_000)
    src = tmp_path / "src.o"
    src.write_bytes(data)
    assert s.put(
        "abc123",
        {"obj": str(src), "idx": str(src)},
        duration=1.25,
        toolchain="clang 22",
        key_version=3,
    )
    assert src.read_bytes() == data  # the source is copied in, never moved
    m = s.get("abc123")
    assert m is not None
    assert set(m.outputs) == {"obj", "idx"}
    assert m.outputs["obj"][1] == len(data)
    assert m.meta["duration"] == 1.25 and m.meta["toolchain"] == "clang 22"
    assert m.meta["key_version"] == 3 and m.meta["created"] <= time.time()
    dest = tmp_path / "out" / "a.o"
    dest.parent.mkdir()
    assert s.materialize(m, {"obj": str(dest)})
    assert dest.read_bytes() == data
    blob = Path(s.root) / "blobs" / m.outputs["obj"][0][:2] / m.outputs["obj"][0][2:]
    assert dest.stat().st_ino != blob.stat().st_ino and blob.stat().st_nlink == 1  # no hard link
    dest.write_bytes(b"someone edits the output")
    assert s.materialize(m, {"obj": str(dest)}) and dest.read_bytes() == data
    assert [p.name for p in dest.parent.iterdir()] == ["a.o"]  # no temporary left behind


def test_one_blob_per_content(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    data = content("shared", 30000)
    for key in ("aa", "bb", "cc"):
        assert put_one(s, tmp_path, key, data)
    blobs = [p for p in (Path(s.root) / "blobs").rglob("*") if p.is_file()]
    assert len(blobs) == 1
    st_ = s.stats()
    assert st_["stores"] == 3 and st_["bytes_stored"] == len(data) and st_["entries"] == 3
    assert st_["size"] == len(data)


def test_miss_unknown_and_invalid_keys(tmp_path: Path) -> None:
    w = Warnings()
    s = Store(tmp_path / "c", warn=w)
    assert s.get("ffff") is None
    for bad in ("", "../x", "zz", "a" * 200):
        assert s.get(bad) is None
        assert not s.put(
            bad, {"o": write(tmp_path / "x", b"x")}, duration=0, toolchain="", key_version=1
        )
        assert not s.claim(bad, wait=0).acquired
    assert (
        s.materialize(Manifest("ab", {"obj": ("0" * 32, 3)}), {"obj": str(tmp_path / "o")}) is False
    )
    assert not s.put(
        "abcd", {"o": str(tmp_path / "does-not-exist")}, duration=0, toolchain="", key_version=1
    )
    assert s.usable


def test_materialize_unknown_role_is_a_miss(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    assert put_one(s, tmp_path, "ab", b"hello")
    m = s.get("ab")
    assert m is not None
    assert not s.materialize(m, {"other": str(tmp_path / "o")})


def test_record_and_stats_persist(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    s.record(hits=3, misses=2, time_saved=1.5, bytes_served=1000)
    s.record(hits=1, time_saved=0.25)
    s.close()
    t = Store(tmp_path / "c", max_size=123456)
    st_ = t.stats()
    assert st_["hits"] == 4 and st_["misses"] == 2 and st_["bytes_served"] == 1000
    assert st_["time_saved"] == pytest.approx(1.75)
    assert st_["max_size"] == 123456
    assert set(st_) >= {
        "hits", "misses", "stores", "evictions", "corruptions", "bytes_stored",
        "bytes_served", "time_saved", "entries", "size", "max_size",
    }  # fmt: skip


def test_memo(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    assert s.memo_get("shard", "raw") is None
    s.memo_put("shard", "raw", "canonical")
    s.memo_put("other", "raw", "x" * 40000)  # large values go to a file inside diskcache
    assert Store(tmp_path / "c").memo_get("shard", "raw") == "canonical"
    assert s.memo_get("other", "raw") == "x" * 40000
    assert s.get("raw") is None  # memos and entries do not collide


def test_eviction_lru_and_entry_miss(tmp_path: Path) -> None:
    s = Store(tmp_path / "c", max_size=100_000)
    keys = [f"{i:04x}" for i in range(8)]
    for i, key in enumerate(keys):
        assert put_one(s, tmp_path, key, content(key + "x", 1) * 20_000)
        blob = s.get(key)
        assert blob is not None
        path = Path(s.root) / "blobs" / blob.outputs["obj"][0][:2] / blob.outputs["obj"][0][2:]
        os.utime(path, (1000 + i, 1000 + i))  # make LRU order explicit
        if i == 3:
            # Reading key 0 again refreshes it: it must outlive keys 1..
            m0 = s.get(keys[0])
            assert m0 is not None and s.materialize(m0, {"obj": str(tmp_path / "o")})
    st_ = s.stats()
    assert st_["evictions"] > 0
    assert st_["size"] <= 100_000
    assert s.get(keys[0]) is not None  # recently used
    assert s.get(keys[1]) is None  # least recently used: evicted, reads as a miss
    assert s.get(keys[-1]) is not None


def test_trim_clear_and_unreferenced(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    for key in ("a1", "a2", "a3"):
        assert put_one(s, tmp_path, key, content(key, 20000))
    # Overwrite a1 with new content: its old blob is no longer referenced.
    assert put_one(s, tmp_path, "a1", b"new content")
    old = [p for p in (Path(s.root) / "blobs").rglob("*") if p.is_file()]
    for p in old:
        os.utime(p, (1, 1))  # older than the grace period
    before = s.stats()["size"]
    freed = s.trim()
    assert freed == len(content("a1", 20000))
    assert s.stats()["size"] == before - freed
    assert all(s.get(k) is not None for k in ("a1", "a2", "a3"))
    assert s.trim(0) > 0 and s.get("a2") is None and s.stats()["size"] == 0
    assert put_one(s, tmp_path, "a4", b"x" * 100)
    s.clear()
    assert s.get("a4") is None and s.stats()["entries"] == 0
    assert not [p for p in (Path(s.root) / "blobs").rglob("*") if p.is_file()]


def test_stale_temp_files_are_swept(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    assert put_one(s, tmp_path, "ab", b"x")
    stray = Path(s.root) / "tmp" / ".blob.1.dead.tmp"
    stray.write_bytes(b"partial")
    os.utime(stray, (1, 1))
    s.trim()
    assert not stray.exists()


def test_owner_only_modes(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    assert put_one(s, tmp_path, "ab", b"secret")
    s.record(hits=1)
    with s.claim("cd", wait=0) as c:
        assert c.acquired
    root = Path(s.root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for p in root.rglob("*"):
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & 0o077 == 0, (p, oct(mode))


def test_group_shared_modes(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        s = Store(tmp_path / "c", group_shared=True)
        assert put_one(s, tmp_path, "ab", b"shared")
        s.record(hits=1)
    finally:
        os.umask(old)
    root = Path(s.root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o2770
    for p in root.rglob("*"):
        mode = stat.S_IMODE(p.stat().st_mode)
        if p.is_dir():
            assert mode == 0o2770, p
        elif p.suffix not in (".db-wal", ".db-shm"):
            assert mode == 0o660, (p, oct(mode))


def test_corrupt_manifest_reads_as_miss(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    assert put_one(s, tmp_path, "ab", b"x")
    assert s._index is not None
    s._index.set_entry("ab", "{not json")  # the row, in the database and its file
    bad = {"v": FORMAT, "key": "cd", "outputs": {"o": ["xyz", 1]}, "meta": {}}
    s._index.set_entry("cd", json.dumps(bad))
    assert s.get("ab") is None and s.get("cd") is None
    assert s.stats()["corruptions"] == 2
    assert put_one(s, tmp_path, "ab", b"x") and s.get("ab") is not None


def test_import_is_light() -> None:
    code = (
        "import sys, store, tempfile, os\n"
        "d = tempfile.mkdtemp()\n"
        "open(d + '/s', 'wb').write(b'x' * 50000)\n"
        "s = store.Store(d + '/c')\n"
        "m = s.get('ab')\n"
        "s.record(misses=1)\n"
        "heavy = ('filelock', 'psutil', 'subprocess', 'concurrent.futures', 'asyncio')\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.binary(max_size=70_000),
    roles=st.sets(st.sampled_from(["obj", "idx", "imports"]), min_size=1),
)
def test_any_bytes_round_trip(tmp_path: Path, data: bytes, roles: set[str]) -> None:
    s = Store(tmp_path / "h")
    srcs = {role: write(tmp_path / f"in-{role}", data + role.encode()) for role in roles}
    assert s.put("beef", srcs, duration=0.1, toolchain="t", key_version=1)
    m = s.get("beef")
    assert m is not None
    dests = {role: str(tmp_path / f"out-{role}") for role in roles}
    assert s.materialize(m, dests)
    for role in roles:
        assert Path(dests[role]).read_bytes() == data + role.encode()


def test_reflink_branch_is_verified_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This file system cannot clone, so emulate FICLONE and check both clone paths hash.
    copy_out's: the native placer (store/_link.c) hashes what it read before it clones or
    writes, whichever it does (tests/store/test_link_native.py)."""
    import store.blobs
    from store import placing
    from store.fsutil import reflink

    monkeypatch.setattr(placing, "native_copy_blobs", None)

    probe_src, probe_dst = tmp_path / "p1", tmp_path / "p2"
    probe_src.write_bytes(b"x" * 10)
    with open(probe_src, "rb") as a, open(probe_dst, "wb") as b:
        reflink(b.fileno(), a.fileno())  # real ioctl: True or False, never raises here

    clones: list[int] = []

    def fake_clone(dst: int, src: int) -> bool:
        size = os.fstat(src).st_size
        copied = 0
        while copied < size:
            n = os.copy_file_range(src, dst, size - copied, copied, copied)
            copied += n
        clones.append(size)
        return True

    monkeypatch.setattr(store.blobs, "reflink", fake_clone)
    s = Store(tmp_path / "c")
    data = os.urandom(100_000)
    assert put_one(s, tmp_path, "ab", data)
    m = s.get("ab")
    assert m is not None
    assert s.materialize(m, {"obj": str(tmp_path / "o")})
    assert (tmp_path / "o").read_bytes() == data
    assert clones == [len(data), len(data)]
    blob = Path(s.root) / "blobs" / m.outputs["obj"][0][:2] / m.outputs["obj"][0][2:]
    raw = bytearray(blob.read_bytes())
    raw[7] ^= 1
    blob.write_bytes(bytes(raw))
    assert not s.materialize(m, {"obj": str(tmp_path / "o2")})
    assert not (tmp_path / "o2").exists()
    assert s.stats()["corruptions"] == 1


def test_verify_report_type_is_exported() -> None:
    from store import VerifyReport

    assert VerifyReport().blobs_checked == 0


def test_drop_and_caller_counters(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    assert put_one(s, tmp_path, "ab", b"x")
    s.drop("ab")
    s.drop("not hex")  # ignored, never raises
    assert s.get("ab") is None
    s.record(hits=1, verified=3)
    s.record(verified=2)
    st_ = s.stats()
    assert st_["hits"] == 1 and st_["verified"] == 5


def test_reads_of_an_existing_store_skip_diskcache(tmp_path: Path) -> None:
    """A cached link only reads: it must not pay for importing and opening diskcache."""
    s = Store(tmp_path / "c")
    assert put_one(s, tmp_path, "aa01", b"x" * 100)
    s.memo_put("n", "k", "v" * 50)
    s.close()
    probe = (
        "import sys, store\n"
        f"s = store.Store({str(tmp_path / 'c')!r})\n"
        "m = s.get('aa01')\n"
        f"assert m is not None and s.materialize(m, {{'obj': {str(tmp_path / 'out')!r}}})\n"
        "assert s.memo_get('n', 'k') == 'v' * 50 and s.get('bb02') is None\n"
        "print('diskcache' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    assert (tmp_path / "out").read_bytes() == b"x" * 100


def test_wall_share_is_kept_when_given_and_absent_otherwise(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    src = write(tmp_path / "src", b"object")
    assert s.put(
        "aa", {"obj": src}, duration=2.5, toolchain="t", key_version=1, meta={"wall": 0.75}
    )
    assert put_one(s, tmp_path, "bb", b"other")
    with_wall, without = s.get("aa"), s.get("bb")
    assert with_wall is not None and without is not None
    assert (with_wall.wall, with_wall.duration) == (0.75, 2.5)
    assert without.wall is None


def test_memo_put_many_is_one_transaction(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    s.memo_put_many("shard", [(f"raw{i}", f"canon{i}") for i in range(50)])
    s.memo_put_many("shard", [])
    again = Store(tmp_path / "c")
    assert [again.memo_get("shard", f"raw{i}") for i in range(50)] == [
        f"canon{i}" for i in range(50)
    ]


def _statements(s: Store) -> list[str]:
    """The SQL the store's direct reader runs from now on."""
    assert s._index is not None
    reader = s._index._row_reader()
    assert reader is not None
    seen: list[str] = []
    reader.con.set_trace_callback(seen.append)
    return seen


def _without_row_files(root: Path) -> None:
    """The store as one written before rows were also kept as files: only the database."""
    shutil.rmtree(root / "rows")


def test_lookup_reads_many_keys_in_a_few_queries(tmp_path: Path) -> None:
    """A link's first look at its keys: one query per 900 keys, not one per key."""
    s = Store(tmp_path / "c")
    assert put_one(s, tmp_path, "ab", b"x" * 10)
    assert s._index is not None
    expected = s.get("ab")
    assert expected is not None
    keys = [f"{i:04x}" for i in range(2000)]  # the same outputs, each under its own key
    s._index.set_entries([(k, Manifest(k, expected.outputs, expected.meta).encode())
                          for k in keys])  # fmt: skip
    assert set(s.lookup([*keys, "ffff", "not hex"])) == set(keys)  # row files
    s.close()
    _without_row_files(tmp_path / "c")
    fresh = Store(tmp_path / "c")
    statements = _statements(fresh)
    found = fresh.lookup([*keys, "ffff", "not hex"])
    assert set(found) == set(keys)
    assert all(m.outputs == expected.outputs and m.key == k for k, m in found.items())
    assert len(statements) == 6  # 2000 keys: 3 queries, then 3 confirming the backfilled files
    assert fresh.materialize(found["07cf"], {"obj": str(tmp_path / "out")})
    assert (tmp_path / "out").read_bytes() == b"x" * 10
    fresh.close()
    again = Store(tmp_path / "c")  # the rows read from the database were given files
    assert set(again.lookup(keys)) == set(keys)
    assert again._index is not None and again._index._reader is None  # not opened


def test_lookup_drops_damaged_entries_and_serving_drops_evicted_ones(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    assert put_one(s, tmp_path, "ab", b"x") and put_one(s, tmp_path, "cd", b"y")
    assert s._index is not None
    s._index.cache.set("a:ef", "{not json")
    s.close()
    fresh = Store(tmp_path / "c")
    found = fresh.lookup(["ab", "cd", "ef"])
    assert set(found) == {"ab", "cd"}  # lookup does not look at blobs
    assert fresh.get("ef") is None and fresh.stats()["corruptions"] == 1
    digest = found["cd"].outputs["obj"][0]
    os.unlink(tmp_path / "c" / "blobs" / digest[:2] / digest[2:])
    assert not fresh.materialize(found["cd"], {"obj": str(tmp_path / "out")})
    assert fresh.get("cd") is None and set(fresh.lookup(["ab", "cd"])) == {"ab"}


def test_memo_get_many(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    s.memo_put_many("shard", [(f"raw{i}", f"canon{i}") for i in range(1000)])
    s.memo_put("shard", "big", "x" * 40000)  # kept by diskcache in a file of its own
    s.close()
    asked = [f"raw{i}" for i in range(0, 1200, 2)] + ["big"]
    expected = {**{f"raw{i}": f"canon{i}" for i in range(0, 1000, 2)}, "big": "x" * 40000}
    assert Store(tmp_path / "c").memo_get_many("shard", asked) == expected  # row files
    _without_row_files(tmp_path / "c")
    fresh = Store(tmp_path / "c")
    statements = _statements(fresh)
    found = fresh.memo_get_many("shard", asked)
    assert found == expected
    # 601 keys: one query (the big value read through diskcache), one confirming the files
    assert len(statements) == 2
    assert fresh.memo_get_many("other", asked) == {} and fresh.memo_get_many("shard", []) == {}
