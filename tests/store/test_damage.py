"""Damage control: rotten blobs, damaged or missing index, read-only and full disks."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import Store
from tests.store.helpers import (
    Warnings,
    content,
    counting_forks,
    mounted_tmpfs,
    remount_ro,
    umount,
    write,
)


def put(s: Store, tmp: Path, key: str, data: bytes) -> bool:
    src = write(tmp / f"src-{key}", data)
    return s.put(key, {"obj": src}, duration=1.0, toolchain="t", key_version=1)


def blob_path(s: Store, key: str) -> Path:
    m = s.get(key)
    assert m is not None
    digest = m.outputs["obj"][0]
    return Path(s.root) / "blobs" / digest[:2] / digest[2:]


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


def test_flipped_byte_is_a_counted_miss(tmp_path: Path) -> None:
    w = Warnings()
    s = Store(tmp_path / "c", warn=w)
    data = content("k1", 60000)
    assert put(s, tmp_path, "aa01", data)
    path = blob_path(s, "aa01")
    flip(path, len(data) // 2)
    m = s.get("aa01")
    assert m is not None  # size unchanged: only hashing can tell
    dest = tmp_path / "out.o"
    assert not s.materialize(m, {"obj": str(dest)})
    assert not dest.exists()  # nothing wrong was written
    assert not path.exists()  # the corrupt blob is gone
    assert s.get("aa01") is None  # and its entry
    assert s.stats()["corruptions"] == 1
    assert "damaged" in w.text()
    assert put(s, tmp_path, "aa01", data)  # the store keeps working
    m = s.get("aa01")
    assert m is not None and s.materialize(m, {"obj": str(dest)}) and dest.read_bytes() == data


def test_truncated_or_missing_blob_is_a_miss(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    assert put(s, tmp_path, "aa01", b"x" * 1000)
    assert put(s, tmp_path, "aa02", b"y" * 1000)
    m1, m2 = s.get("aa01"), s.get("aa02")
    assert m1 is not None and m2 is not None
    os.truncate(blob_path(s, "aa01"), 10)
    blob_path(s, "aa02").unlink()
    assert not s.materialize(m1, {"obj": str(tmp_path / "o1")})
    assert not s.materialize(m2, {"obj": str(tmp_path / "o2")})
    assert s.get("aa01") is None and s.get("aa02") is None


def test_verify_drops_corrupt_blobs_and_their_entries(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    keys = [f"b{i:03x}" for i in range(6)]
    for key in keys:
        assert put(s, tmp_path, key, content(key, 20000))
    flip(blob_path(s, keys[1]), 0)
    flip(blob_path(s, keys[4]), 5)
    report = s.verify()
    assert report.blobs_checked == 6 and report.blobs_corrupt == 2
    assert report.entries_checked == 6 and report.entries_dropped == 2
    assert s.stats()["corruptions"] == 2
    assert [k for k in keys if s.get(k) is None] == [keys[1], keys[4]]
    again = s.verify()
    assert again.blobs_corrupt == 0 and again.entries_dropped == 0


def _with_garbage_index_database(tmp_path: Path, row_files: bool) -> tuple[Store, Warnings]:
    """A store holding aa01 whose index database was overwritten with garbage, reopened."""
    s = Store(tmp_path / "c")
    assert put(s, tmp_path, "aa01", b"x" * 100)
    s.close()
    if not row_files:
        shutil.rmtree(tmp_path / "c" / "rows")
    db = tmp_path / "c" / "index" / "cache.db"
    for extra in ("-wal", "-shm"):
        Path(str(db) + extra).unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 500)
    w = Warnings()
    s = Store(tmp_path / "c", warn=w)
    assert s.usable
    return s, w


def test_garbage_index_database(tmp_path: Path) -> None:
    s, w = _with_garbage_index_database(tmp_path, row_files=True)
    found = s.get("aa01")  # its row file answers: the database is not even opened
    assert found is not None and s.materialize(found, {"obj": str(tmp_path / "out")})
    assert (tmp_path / "out").read_bytes() == b"x" * 100 and w.text() == ""
    assert put(s, tmp_path, "bb02", b"y" * 100)  # the first write opens it: damage found
    assert "index database" in w.text()
    assert s.stats()["corruptions"] == 1
    assert s.get("bb02") is not None and s.get("aa01") is not None
    assert list((tmp_path / "c").glob("index.damaged-*"))  # kept aside for inspection


def test_garbage_index_database_without_row_files(tmp_path: Path) -> None:
    s, w = _with_garbage_index_database(tmp_path, row_files=False)
    assert s.get("aa01") is None  # read from the database: damage found, a miss
    assert "index database" in w.text()
    assert s.stats()["corruptions"] == 1
    assert put(s, tmp_path, "aa01", b"x" * 100) and s.get("aa01") is not None
    assert list((tmp_path / "c").glob("index.damaged-*"))


def test_index_damaged_pages(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    keys = [f"{i:05x}" for i in range(300)]
    for key in keys:
        assert s._index is not None
        s._index.set_entry(key, '{"v":1,"outputs":{"obj":["' + "0" * 32 + '",1]},"meta":{}}')
    s.close()
    db = tmp_path / "c" / "index" / "cache.db"
    size = db.stat().st_size
    with open(db, "r+b") as f:  # keep the header, wreck every later page
        f.seek(4096)
        f.write(os.urandom(size - 4096))
    w = Warnings()
    s = Store(tmp_path / "c", warn=w)
    for key in keys[:20]:
        assert s.get(key) is None
    assert s.usable
    assert s.stats()["corruptions"] >= 1
    assert "index database" in w.text()
    assert put(s, tmp_path, "abcdef", b"z" * 10) and s.get("abcdef") is not None


def test_missing_index_database(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    assert put(s, tmp_path, "aa01", b"x" * 100)
    s.close()
    for p in (tmp_path / "c" / "index").iterdir():
        p.unlink()
    s = Store(tmp_path / "c")
    assert s.usable and s.get("aa01") is not None  # its row file still holds it
    shutil.rmtree(tmp_path / "c" / "rows")
    assert s.get("aa01") is None
    assert put(s, tmp_path, "aa01", b"x" * 100) and s.get("aa01") is not None


def test_unwritable_root_is_pass_through(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    w = Warnings()
    s = Store(blocker / "c", warn=w)
    assert not s.usable
    assert s.get("aa") is None
    assert not put(s, tmp_path, "aa", b"x")
    assert not s.claim("aa", wait=1).acquired
    s.record(hits=1)
    s.memo_put("n", "k", "v")
    assert s.memo_get("n", "k") is None
    assert s.stats()["hits"] == 0 and s.trim() == 0
    assert s.verify().blobs_checked == 0
    s.clear()
    assert len(w.messages) == 1


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    yield from mounted_tmpfs(tmp_path / "mnt", "1m")


def test_read_only_cache_directory(tmpfs: Path, tmp_path: Path) -> None:
    s = Store(tmpfs / "c")
    assert put(s, tmp_path, "aa01", b"x" * 1000)
    s.record(hits=1)
    s.close()
    if not remount_ro(tmpfs):
        pytest.skip("cannot remount the tmpfs read-only")
    w = Warnings()
    s = Store(tmpfs / "c", warn=w)
    m = s.get("aa01")
    assert m is None or (
        s.materialize(m, {"obj": str(tmp_path / "o")})
        and (tmp_path / "o").read_bytes() == b"x" * 1000
    )
    assert not put(s, tmp_path, "aa02", b"y")
    found = s.lookup(["aa01"], "target")
    s.keep_pack("target", list(found.values()))  # no pack, and nothing said of it
    assert not [p for p in (tmpfs / "c" / "tmp").iterdir()]
    c = s.claim("aa03", wait=0.5)
    assert not c.acquired
    c.release()
    s.record(hits=1)
    s.memo_put("n", "k", "v")
    s.stats()
    s.trim(0)
    s.verify()
    s.clear()
    assert w.messages  # reported, never raised
    assert len(w.messages) <= 4


def test_full_disk(tmpfs: Path, tmp_path: Path) -> None:
    w = Warnings()
    s = Store(tmpfs / "c", warn=w)
    assert put(s, tmp_path, "aa01", b"k" * 10_000)
    assert not put(s, tmp_path, "aa02", os.urandom(2 << 20))  # bigger than the file system
    assert "No space left on device" in w.text()  # the system's words, no internal tag
    assert not list((tmpfs / "c" / "tmp").iterdir())  # no partial blob left behind
    filler = tmpfs / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    assert not put(s, tmp_path, "aa03", b"z" * 50_000)
    m = s.get("aa01")  # reads still serve
    assert m is not None and s.materialize(m, {"obj": str(tmp_path / "o")})
    s.record(hits=1)
    s.memo_put("n", "k", "v" * 100_000)
    assert len(w.messages) <= 3
    filler.unlink()
    assert put(s, tmp_path, "aa04", b"back" * 100)
    assert s.get("aa04") is not None


def test_permission_error_is_reported_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """We run as root, so simulate EACCES where a put publishes its blob."""
    w = Warnings()
    s = Store(tmp_path / "c", warn=w)
    assert put(s, tmp_path, "aa01", b"ok")

    def denied(src: str, dst: str, **dir_fds: int) -> None:
        raise PermissionError(13, "Permission denied", dst)

    monkeypatch.setattr(os, "rename", denied)
    for i in range(5):
        assert not put(s, tmp_path, f"bb{i:02x}", f"new {i}".encode())
    monkeypatch.undo()
    assert [m for m in w.messages if "permission" in m.lower()] == [w.messages[0]]
    assert len(w.messages) == 1
    assert not list((tmp_path / "c" / "tmp").iterdir())
    m = s.get("aa01")
    assert m is not None and s.materialize(m, {"obj": str(tmp_path / "o")})
    assert s.usable and put(s, tmp_path, "bb00", b"new 0")


def test_hard_link_serving_shares_the_verified_blob(tmp_path: Path) -> None:
    """--hard-link: the output is the blob's inode (nothing written); an edit made through a
    served output damages the blob, and the next hit sees it and misses, never serves it."""
    w = Warnings()
    s = Store(tmp_path / "c", hard_link=True, warn=w)
    data = content("k1", 60000)
    assert put(s, tmp_path, "aa01", data)
    m = s.get("aa01")
    assert m is not None
    first, second = tmp_path / "first.o", tmp_path / "second.o"
    second.write_bytes(b"an old output, replaced, never written through")
    assert s.materialize(m, {"obj": str(first)}) and s.materialize(m, {"obj": str(second)})
    path = blob_path(s, "aa01")
    assert first.read_bytes() == second.read_bytes() == data
    assert first.stat().st_ino == second.stat().st_ino == path.stat().st_ino
    assert path.stat().st_nlink == 3
    flip(first, 100)  # someone edits an output in place: the blob changes with it
    third = tmp_path / "third.o"
    assert not s.materialize(m, {"obj": str(third)})
    assert not third.exists() and not path.exists() and s.get("aa01") is None
    assert s.stats()["corruptions"] == 1 and "damaged" in w.text()


def test_hard_link_serving_copies_where_it_cannot_link(tmp_path: Path) -> None:
    """Another file system (tmpfs /dev/shm against this one): a verified copy instead."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the test's directory")
    s = Store(tmp_path / "c", hard_link=True)
    data = content("k2", 30000)
    assert put(s, tmp_path, "aa02", data)
    m = s.get("aa02")
    assert m is not None
    dest = shm / f"cached-dist-test-{os.getpid()}.o"
    try:
        assert s.materialize(m, {"obj": str(dest)})
        assert dest.read_bytes() == data and dest.stat().st_nlink == 1
        assert blob_path(s, "aa02").stat().st_nlink == 1
    finally:
        dest.unlink(missing_ok=True)


@pytest.mark.parametrize("helped", [False, True])
def test_materialize_many_places_verifies_and_reports_here(tmp_path: Path, helped: bool) -> None:
    """Many hits at once (placed here, or half by a helper forked before): every byte
    checked, a damaged or missing blob a miss whose entry goes, an unwritable place a miss
    reported once by this process, whichever process placed it; placing forks nothing."""
    from procs.forked import start
    from store.placing import place_order
    from store.store import HELPER_MIN_OUTPUTS

    w = Warnings()
    s = Store(tmp_path / "c", warn=w)
    count = 2 * HELPER_MIN_OUTPUTS + 3
    keys = [f"{i:04x}" for i in range(count)]
    for i, key in enumerate(keys):
        assert put(s, tmp_path, key, content(key, 100 + i))
    manifests = [s.get(k) for k in keys]
    assert all(m is not None for m in manifests)
    flip(blob_path(s, keys[5]), 10)
    os.unlink(blob_path(s, keys[6]))
    out = tmp_path / "out"
    out.mkdir()
    dests = [{"obj": str(out / f"{k}.o")} for k in keys]
    dests[7] = {"obj": str(tmp_path / "no-such-dir" / "x.o")}
    dests[8] = {"other-role": str(out / "y.o")}
    helper = None
    if helped:
        helper = start(list, then=place_order)
        assert helper is not None and helper.collect(lambda v: v) == []
    with pytest.MonkeyPatch.context() as mp:
        forks = counting_forks(mp)
        items = [(m, d) for m, d in zip(manifests, dests, strict=True) if m is not None]
        took = s.materialize_many(items, helper=helper)
    assert forks == []
    if helper is not None:
        helper.cancel()
    missed = {i for i, t in enumerate(took) if t is None}
    assert missed == {5, 6, 7, 8}
    assert all(t is not None and t >= 0 for i, t in enumerate(took) if i not in missed)
    for i, key in enumerate(keys):
        if i not in missed:
            assert (out / f"{key}.o").read_bytes() == content(key, 100 + i)
    assert s.get(keys[5]) is None and s.get(keys[6]) is None  # dropped here
    assert s.get(keys[7]) is not None and s.get(keys[8]) is not None  # not the entry's fault
    assert s.stats()["corruptions"] == 1
    assert "damaged" in w.text() and w.text().count("cannot copy a cached output") == 1
    assert os.listdir(tmp_path / "c" / "tmp") == []  # the stage the copies were made in: gone


@pytest.mark.parametrize("hard_link", [False, True])
def test_a_helper_places_every_other_output_and_one_that_failed_leaves_them_here(
    tmp_path: Path, hard_link: bool
) -> None:
    """A helper (a worker forked earlier in the link that waits for an order) places every
    other output in its own process; a helper that died, or whose results were never read,
    leaves them all to this process. Either way every output is placed and verified."""
    import signal

    import store.store
    from procs.forked import start
    from store.placing import place, place_order
    from store.store import HELPER_MIN_OUTPUTS

    s = Store(tmp_path / "c", hard_link=hard_link)
    keys = [f"{i:04x}" for i in range(2 * HELPER_MIN_OUTPUTS + 1)]
    for i, key in enumerate(keys):
        assert put(s, tmp_path, key, content(key, 50 + i))
    manifests = [m for k in keys if (m := s.get(k)) is not None]
    here: list[str] = []  # what this process placed

    def counted(blobs: Any, hard_link: bool, plans: Any) -> Any:
        here.extend(dest for _, _, dest, _ in plans)
        return place(blobs, hard_link, plans)

    for case in ("helped", "died", "busy"):
        helper = start(list, then=place_order)
        assert helper is not None
        if case != "busy":
            assert helper.collect(lambda v: v) == []
        if case == "died":
            os.kill(helper.pid, signal.SIGKILL)
        out = tmp_path / case
        out.mkdir()
        items = [(m, {"obj": str(out / f"{k}.o")}) for k, m in zip(keys, manifests, strict=True)]
        here.clear()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(store.store, "place", counted)  # in this process only
            took = s.materialize_many(items, helper=helper)
        helper.cancel()
        assert None not in took
        assert all((out / f"{k}.o").read_bytes() == content(k, 50 + i)
                   for i, k in enumerate(keys))  # fmt: skip
        odd = [str(out / f"{k}.o") for k in keys[1::2]]
        assert sorted(here) == sorted(odd if case == "helped" else [d["obj"] for _, d in items])
        assert ((out / f"{keys[0]}.o").stat().st_nlink > 1) == hard_link  # the helper's


def test_large_placings_copy_through_a_stage_where_they_may(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copies are made in a new directory and renamed to their outputs (store.blobs.stage)
    only into directories on the cache's file system whose new files take the creator's
    group: not into another file system (/dev/shm), nor a setgid directory, whose files
    take its group."""
    import grp

    from store.store import STAGE_MIN_OUTPUTS

    s = Store(tmp_path / "c")
    count = STAGE_MIN_OUTPUTS + 2
    keys = [f"{i:04x}" for i in range(count)]
    for i, key in enumerate(keys):
        assert put(s, tmp_path, key, content(key, 50 + i))
    manifests = [s.get(k) for k in keys]
    plain, setgid = tmp_path / "plain", tmp_path / "setgid"
    plain.mkdir()
    setgid.mkdir()
    other_group = next((g.gr_gid for g in grp.getgrall() if g.gr_gid != os.getgid()), None)
    if other_group is not None and os.geteuid() == 0:
        os.chown(setgid, -1, other_group)
    setgid.chmod(0o2755)
    shm = Path("/dev/shm")
    elsewhere = shm.is_dir() and os.stat(shm).st_dev != os.stat(tmp_path).st_dev
    dirs = [plain, setgid] + ([shm / f"cached-dist-test-{os.getpid()}"] if elsewhere else [])
    for d in dirs[2:]:
        d.mkdir()
    used: dict[str, str | None] = {}
    import store.store
    from store.placing import place

    def spy(blobs: Any, hard_link: bool, plans: Any) -> Any:  # each output's stage, or None
        used.update((dest, stage) for _, _, dest, stage in plans)
        return place(blobs, hard_link, plans)

    monkeypatch.setattr(store.store, "place", spy)
    dests = [{"obj": str(dirs[i % len(dirs)] / f"{k}.o")} for i, k in enumerate(keys)]
    try:
        took = s.materialize_many([(m, d) for m, d in zip(manifests, dests, strict=True) if m])
        assert all(t is not None for t in took)
        for i, (key, dest) in enumerate(zip(keys, dests, strict=True)):
            placed = Path(dest["obj"])
            assert placed.read_bytes() == content(key, 50 + i)
            assert (used[dest["obj"]] is not None) == (placed.parent == plain)
            assert placed.stat().st_gid == placed.parent.stat().st_gid
        assert len({v for v in used.values() if v}) == 1
        assert os.listdir(tmp_path / "c" / "tmp") == []
    finally:
        for d in dirs[2:]:
            shutil.rmtree(d)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory another group")
def test_no_stage_in_a_cache_under_a_setgid_directory(tmp_path: Path) -> None:
    """A cache inside a setgid directory of another group: its tmp/ and every stage are
    setgid too, so a copy made there would take that group; outputs get the group a copy
    beside them gets."""
    import grp

    from store.store import STAGE_MIN_OUTPUTS

    other_group = next((g.gr_gid for g in grp.getgrall() if g.gr_gid != os.getgid()), None)
    if other_group is None:
        pytest.skip("no other group on this machine")
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chown(parent, -1, other_group)
    parent.chmod(0o2775)
    s = Store(parent / "c")
    keys = [f"{i:04x}" for i in range(STAGE_MIN_OUTPUTS + 2)]
    for i, key in enumerate(keys):
        assert put(s, tmp_path, key, content(key, 60 + i))
    out = tmp_path / "out"
    out.mkdir()
    items = [(m, {"obj": str(out / f"{k}.o")}) for k in keys if (m := s.get(k)) is not None]
    assert len(items) == len(keys)
    took = s.materialize_many(items)
    assert all(t is not None for t in took)
    for i, key in enumerate(keys):
        placed = out / f"{key}.o"
        assert placed.read_bytes() == content(key, 60 + i)
        assert placed.stat().st_gid == out.stat().st_gid != other_group
    assert os.listdir(parent / "c" / "tmp") == []


def test_a_stage_another_mount_refuses_leaves_copies_beside_their_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bind mount is the same file system (same st_dev) but refuses renames from another
    mount (EXDEV): the copies are then made beside their outputs, every hit still served.
    copy_out's way, the refusal emulated (a real one, through the native placer too: the
    next test)."""
    from store import placing
    from store.store import STAGE_MIN_OUTPUTS

    monkeypatch.setattr(placing, "native_copy_blobs", None)

    s = Store(tmp_path / "c")
    keys = [f"{i:04x}" for i in range(STAGE_MIN_OUTPUTS + 4)]
    for i, key in enumerate(keys):
        assert put(s, tmp_path, key, content(key, 40 + i))
    manifests = [s.get(k) for k in keys]
    out = tmp_path / "out"
    out.mkdir()
    real_rename = os.rename
    refused: list[str] = []

    def rename(src: str, dst: str) -> None:
        if "/tmp/.stage." in str(src) and str(dst).startswith(str(out)):
            refused.append(str(src))
            raise OSError(errno.EXDEV, "Invalid cross-device link", str(src))
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    w = Warnings()
    s._problems._warn = w
    items = [(m, {"obj": str(out / f"{k}.o")}) for m, k in zip(manifests, keys, strict=True) if m]
    took = s.materialize_many(items)
    assert all(t is not None for t in took) and w.text() == ""
    assert len(refused) == 1  # the first refusal takes the directory off the stage
    for i, key in enumerate(keys):
        assert (out / f"{key}.o").read_bytes() == content(key, 40 + i)
    assert os.listdir(tmp_path / "c" / "tmp") == []


@pytest.mark.parametrize("native", [True, False])
def test_outputs_behind_a_real_bind_mount_are_copied_beside_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    """Outputs in a bind mount of a directory of the cache's file system: a rename from the
    stage is refused (EXDEV), and every copy is made beside its output instead, by the native
    placer (which hands such a plan back) or without it; nothing left in tmp/."""
    from store import placing
    from store.store import STAGE_MIN_OUTPUTS

    if native and placing.__dict__["native_copy_blobs"] is None:
        pytest.skip("the C extension is not built")
    if not native:
        monkeypatch.setattr(placing, "native_copy_blobs", None)
    real, bound = tmp_path / "real", tmp_path / "bound"
    real.mkdir()
    bound.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", str(real), str(bound)],
                                           capture_output=True).returncode != 0:  # fmt: skip
        pytest.skip("needs root to bind-mount a directory")
    try:
        s = Store(tmp_path / "c")
        keys = [f"{i:04x}" for i in range(STAGE_MIN_OUTPUTS + 4)]
        for i, key in enumerate(keys):
            assert put(s, tmp_path, key, content(key, 40 + i))
        items = [(m, {"obj": str(bound / f"{k}.o")}) for k in keys if (m := s.get(k))]
        took = s.materialize_many(items)
        assert len(took) == len(keys) and None not in took
        for i, key in enumerate(keys):
            assert (real / f"{key}.o").read_bytes() == content(key, 40 + i)
        assert os.listdir(tmp_path / "c" / "tmp") == []
        assert not [n for n in os.listdir(real) if n.endswith(".tmp")]
    finally:
        umount(bound)


def test_the_cache_tmp_directory_spreads_its_stages(tmp_path: Path) -> None:
    """tmp/ is marked FS_TOPDIR_FL where the file system has the flag (ext2/3/4): what puts
    each stage away from where earlier links' copies were made and deleted."""
    from store.fsutil import spread_subdirectories

    probe = tmp_path / "probe"
    probe.mkdir()
    if not spread_subdirectories(str(probe)):
        pytest.skip("this file system has no FS_TOPDIR_FL")
    s = Store(tmp_path / "c")
    assert s._blobs.stage() is not None
    flags = subprocess.run(["lsattr", "-d", str(tmp_path / "c" / "tmp")], capture_output=True,
                           text=True, check=True).stdout.split()[0]  # fmt: skip
    assert "T" in flags


def test_a_stage_a_killed_link_left_goes_with_the_temp_sweep(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    stage = s._blobs.stage()
    assert stage is not None
    Path(stage, ".half-copied.o.tmp").write_bytes(b"x" * 100)
    s.trim()
    assert os.path.isdir(stage)  # young: a link may be placing in it right now
    old = time.time() - 2 * 3600
    os.utime(stage, (old, old))
    assert s.trim() >= 100 and not os.path.exists(stage)


def test_materialize_many_turns_an_unexpected_failure_into_misses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store never raises: a bug while placing is reported once and every job misses."""
    w = Warnings()
    s = Store(tmp_path / "c", warn=w)
    assert put(s, tmp_path, "aa01", b"object")
    m = s.get("aa01")
    assert m is not None

    def broken(*args: object) -> str:
        raise RuntimeError("a bug")

    import store.store

    monkeypatch.setattr(store.store, "place", broken)
    assert s.materialize_many([(m, {"obj": str(tmp_path / "o")})]) == [None]
    assert "cannot copy a cached output: RuntimeError: a bug" in w.text()


def test_a_cache_that_cannot_be_made_says_so_once_and_passes_through(tmp_path: Path) -> None:
    """A cache directory that cannot be created (its parent is a file): one warning naming the
    path once, every get a miss, every put a no-op."""
    (tmp_path / "file").write_bytes(b"")
    root = tmp_path / "file" / "c"
    w = Warnings()
    s = Store(root, warn=w)
    assert not s.usable and s.get("aa01") is None and not put(s, tmp_path, "aa01", b"x")
    assert w.text().strip() == (f"cannot open the cache: Not a directory: {root}; "
                                "continuing without it")  # fmt: skip
