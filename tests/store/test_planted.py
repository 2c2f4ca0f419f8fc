"""What a member of a group-shared cache can put inside it (everyone can write there): a
symbolic link or a FIFO in the place of a directory, a blob, a database, a lock or a claim,
and database rows the store never writes. None is followed, waited on or run: each is a
warning and a miss at worst, and nothing outside the cache is written, removed or read as
the store's own."""

from __future__ import annotations

import os
import pickle
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from store import Store
from store.claims import claim_path
from store.rows import Rows
from tests.store.helpers import Warnings, write


def put(s: Store, tmp: Path, key: str, data: bytes) -> bool:
    src = write(tmp / f"src-{key}", data)
    return s.put(key, {"obj": src}, duration=1.0, toolchain="t", key_version=1)


def blob(s: Store, key: str) -> Path:
    m = s.get(key)
    assert m is not None
    digest = m.outputs["obj"][0]
    return Path(s.root) / "blobs" / digest[:2] / digest[2:]


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``directory``: its bytes and mtime (a touch shows too)."""
    return {
        str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def trap(tmp_path: Path) -> Path:
    """A directory outside the cache, of someone's, that the store must leave as it is."""
    trap = tmp_path / "trap"
    trap.mkdir()
    (trap / "theirs").write_bytes(b"someone's file")
    os.utime(trap / "theirs", (1, 1))
    return trap


def plant(place: Path, target: Path) -> None:
    """Replace ``place`` (a file or a directory) by a symbolic link to ``target``."""
    if place.is_dir() and not place.is_symlink():
        shutil.rmtree(place)
    elif place.exists() or place.is_symlink():
        place.unlink()
    place.parent.mkdir(parents=True, exist_ok=True)
    place.symlink_to(target)


@pytest.mark.parametrize("where", ["blobs", "rows"])
def test_a_fan_out_directory_linked_elsewhere_is_never_written_through(
    tmp_path: Path, trap: Path, where: str
) -> None:
    w = Warnings()
    s = Store(tmp_path / "c", group_shared=True, warn=w)
    assert put(s, tmp_path, "ab01", b"one" * 100)
    if where == "blobs":
        fan_out = blob(s, "ab01").parent
    else:
        fan_out = Path(Rows(s.root, s._modes).path("a:ab01")).parent
    before = snapshot(trap)
    plant(fan_out, trap)
    s.drop("ab01")  # the row file is removed in place, never through the link
    assert not put(s, tmp_path, "ab01", b"one" * 100)  # into that directory again: refused
    assert "not a directory of the cache's own (a symbolic link?)" in w.text()
    assert f"{fan_out}" in w.text()
    assert snapshot(trap) == before
    assert s.usable and put(s, tmp_path, "cd02", b"two" * 100)  # the rest of the cache works


def test_maintenance_never_removes_through_a_link(tmp_path: Path, trap: Path) -> None:
    """clear, trim and the folding of pending counts remove files by listing directories:
    a fan-out directory or stats/pending linked elsewhere is skipped, not emptied."""
    w = Warnings()
    s = Store(tmp_path / "c", group_shared=True, warn=w)
    assert put(s, tmp_path, "ab01", b"one" * 100)
    s.record(hits=1)
    root = Path(s.root)
    (trap / ("0" * 30)).write_bytes(b"named like a blob")
    (trap / "counts.1.2").write_bytes(b"hits 5\n")  # named like pending counts
    (trap / ".counts.1.2.tmp").write_bytes(b"")
    os.utime(trap / ".counts.1.2.tmp", (1, 1))  # as old as a stale temporary file
    before = snapshot(trap)
    plant(root / "blobs" / "zz", trap)
    plant(root / "rows" / "zz", trap)
    plant(root / "stats" / "pending", trap)
    s.clear()
    s.trim(0)
    assert s.verify().blobs_checked == 0
    stats = Store(root, group_shared=True, warn=w).stats()  # folds the pending counts
    assert stats["hits"] == 1 and stats["entries"] == 0  # not the trap's 5
    assert snapshot(trap) == before
    assert w.text() == ""


@pytest.mark.parametrize("hard_link", [False, True])
def test_a_link_in_the_place_of_a_blob_is_removed_not_served(
    tmp_path: Path, trap: Path, hard_link: bool
) -> None:
    w = Warnings()
    root = tmp_path / "c"
    s = Store(root, group_shared=True, warn=w)
    data = b"object" * 100
    assert put(s, tmp_path, "ab01", data)
    place = blob(s, "ab01")
    (trap / "same").write_bytes(data)  # even with the very bytes of the blob
    os.utime(trap / "same", (1, 1))
    before = snapshot(trap)
    plant(place, trap / "same")
    s = Store(root, group_shared=True, hard_link=hard_link, warn=w)
    found = s.lookup(["ab01"])  # as a link looks up (no existence check of blobs)
    out = tmp_path / "out.o"
    assert s.materialize_many([(found["ab01"], {"obj": str(out)})]) == [None]
    assert not out.exists() and not place.is_symlink() and not place.exists()
    assert "was damaged; removed it (a miss)" in w.text()
    assert snapshot(trap) == before  # neither read as the blob nor touched
    assert put(s, tmp_path, "ab01", data)  # stored again, where the link was
    found = s.lookup(["ab01"])
    assert s.materialize(found["ab01"], {"obj": str(out)}) and out.read_bytes() == data


def test_a_fifo_in_the_place_of_a_blob_is_damage_not_a_wait(tmp_path: Path) -> None:
    w = Warnings()
    s = Store(tmp_path / "c", group_shared=True, warn=w)
    assert put(s, tmp_path, "ab01", b"object" * 100)
    place = blob(s, "ab01")
    place.unlink()
    os.mkfifo(place)
    found = s.lookup(["ab01"])
    assert s.get_many(["ab01"]) == [None]  # for another tier: a miss, not a wait
    assert not s.materialize(found["ab01"], {"obj": str(tmp_path / "out.o")})
    assert not place.exists()
    assert s.verify().blobs_corrupt == 0  # gone, not counted twice


@pytest.mark.parametrize("database", ["index/cache.db", "stats/stats.db"])
def test_a_database_linked_elsewhere_is_not_opened(
    tmp_path: Path, trap: Path, database: str
) -> None:
    """sqlite follows a symbolic link: the store refuses one in the place of a database."""
    w = Warnings()
    root = tmp_path / "c"
    s = Store(root, group_shared=True, warn=w)
    assert put(s, tmp_path, "ab01", b"one" * 100)
    s.record(hits=1)
    s.close()
    (trap / "db").write_bytes((root / database).read_bytes())
    os.utime(trap / "db", (1, 1))
    before = snapshot(trap)
    plant(root / database, trap / "db")
    s = Store(root, group_shared=True, warn=w)
    put(s, tmp_path, "cd02", b"two" * 100)
    s.record(hits=1)
    s.stats()
    assert f"not a file of the cache's own (a symbolic link?): {root / database}" in w.text()
    if database == "index/cache.db":
        assert not s.usable and "cannot open the cache at" in w.text()
    else:
        assert s.usable and "cannot open the statistics database" in w.text()
    assert snapshot(trap) == before


def test_a_link_in_the_place_of_a_wal_file_is_refused(tmp_path: Path, trap: Path) -> None:
    w = Warnings()
    root = tmp_path / "c"
    s = Store(root, group_shared=True, warn=w)
    assert put(s, tmp_path, "ab01", b"one" * 100)
    s.close()
    for suffix in ("-wal", "-shm"):
        plant(root / "index" / f"cache.db{suffix}", trap / f"db{suffix}")
    before = snapshot(trap)
    s = Store(root, group_shared=True, warn=w)
    assert not put(s, tmp_path, "cd02", b"two" * 100)
    assert "unable to open database file" in w.text()
    assert snapshot(trap) == before and sorted(os.listdir(trap)) == ["theirs"]


def test_a_link_in_the_place_of_the_write_behind_lock(tmp_path: Path, trap: Path) -> None:
    w = Warnings()
    root = tmp_path / "c"
    Store(root, group_shared=True).close()
    before = snapshot(trap)
    plant(root / "locks" / "write-behind.lock", trap / "theirs")
    s = Store(root, group_shared=True, warn=w)
    s.write_behind([("ns", "k", "v")], [])  # no lock to hand over: written here
    assert Store(root, group_shared=True).memo_get("ns", "k") == "v"
    s.settle()  # no lock to wait on: returns
    assert snapshot(trap) == before and w.text() == ""


@pytest.mark.parametrize("marker", ["a symbolic link", "a FIFO"])
def test_a_claim_marker_that_is_not_one_is_taken_over(
    tmp_path: Path, trap: Path, marker: str
) -> None:
    w = Warnings()
    s = Store(tmp_path / "c", group_shared=True, warn=w)
    key = "ab" * 16
    place = Path(claim_path(s.root, key))
    place.parent.mkdir(parents=True, exist_ok=True)
    if marker == "a FIFO":
        os.mkfifo(place)
    else:
        place.symlink_to(trap / "theirs")
    before = snapshot(trap)
    started = time.monotonic()
    with s.claim(key, wait=60) as claim:
        assert claim.acquired, claim
    assert time.monotonic() - started < 50  # broken as a marker with no record (lease.py)
    assert snapshot(trap) == before and w.text() == ""


class Planted:
    """A pickle that, when loaded, creates the file ``path``: what loading one would run."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))


MODE_BINARY, MODE_TEXT, MODE_PICKLE = 2, 3, 4  # diskcache.core's value modes


def test_rows_the_store_never_writes_are_not_loaded_followed_or_run(
    tmp_path: Path, trap: Path
) -> None:
    """Every member can write the index database: a row whose value or key is a pickle, or
    whose value is a file named anywhere (diskcache's own rows can be), reads as absent, and
    removing it removes no file outside the index."""
    w = Warnings()
    root = tmp_path / "c"
    s = Store(root, group_shared=True, warn=w)
    assert put(s, tmp_path, "ab01", b"one" * 100)
    s.close()
    victim = trap / "theirs"
    rows = [  # (key, raw, mode, filename, value)
        ("a:" + "cd" * 16, 1, MODE_PICKLE, None, pickle.dumps(Planted(trap / "ran-value"))),
        ("a:" + "ef" * 16, 1, MODE_TEXT, str(victim), None),
        ("m:ns:k", 1, MODE_BINARY, "../../trap/theirs", None),
        (pickle.dumps(Planted(trap / "ran-key")), 0, 1, None, "a value"),
    ]
    con = sqlite3.connect(root / "index" / "cache.db")
    now = time.time()
    with con:
        for key, raw, mode, filename, value in rows:
            con.execute(
                "INSERT INTO Cache (key, raw, store_time, expire_time, access_time,"
                " access_count, tag, size, mode, filename, value)"
                " VALUES (?, ?, ?, NULL, ?, 0, NULL, 0, ?, ?, ?)",
                (key, raw, now, now, mode, filename, value),
            )
    con.close()
    before = snapshot(trap)
    s = Store(root, group_shared=True, warn=w)
    assert s.lookup(["cd" * 16, "ef" * 16]) == {}
    assert s.get("cd" * 16) is None and s.get("ef" * 16) is None
    assert s.memo_get("ns", "k") is None
    assert s.stats()["entries"] >= 1  # every key listed: the pickled one is not loaded
    s.verify()
    s.drop("ef" * 16)
    s.trim(0)
    s.clear()
    assert snapshot(trap) == before and sorted(os.listdir(trap)) == ["theirs"]
    assert w.text() == ""
