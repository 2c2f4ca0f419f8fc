"""Damage to the store's own paths and databases is repaired: by verify, which finds every kind
of it, and by the next write that meets it, so that no link is wedged by it for good."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from store import Store
from tests.store.helpers import Warnings, content, put, served


def blob_path(s: Store, key: str) -> Path:
    m = s.get(key)
    assert m is not None
    digest = m.outputs["obj"][0]
    return Path(s.root) / "blobs" / digest[:2] / digest[2:]


def row_path(s: Store, key: str) -> Path:
    assert s._index is not None
    return Path(s._index.rows.path("a:" + key))


def a_directory_at(path: Path) -> int:
    """Replaces ``path`` by a directory holding a file; returns the directory's size."""
    path.unlink()
    path.mkdir()
    (path / "inside").write_bytes(b"not a blob")
    return os.stat(path).st_size


@pytest.mark.parametrize("same_size", [False, True])
def test_a_directory_where_a_blob_belongs_is_cleared_by_the_next_put(
    tmp_path: Path, same_size: bool
) -> None:
    """A directory at a blob's path: the job misses, and its next put (after the compile)
    clears the path and stores, so the link after hits. ``same_size``: the object is exactly
    as large as the directory (4096 bytes on ext4), which the size check alone takes for the
    blob."""
    w = Warnings()
    s = Store(tmp_path / "c", warn=w)
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "inside").write_bytes(b"not a blob")
    size = os.stat(probe).st_size if same_size else 5000
    data = content("dir", 100)[:1] * size
    assert put(s, tmp_path, "aa01", data)
    path = blob_path(s, "aa01")
    assert a_directory_at(path) == os.stat(probe).st_size
    assert served(s, tmp_path, "aa01") is None  # a miss, never the directory's "bytes"
    assert put(s, tmp_path, "aa01", data)  # the compile's result: stored over the damage
    assert path.is_file() and served(s, tmp_path, "aa01") == data
    s.close()
    s = Store(tmp_path / "c")
    assert served(s, tmp_path, "aa01") == data


def test_a_file_where_a_fan_out_directory_belongs_is_cleared_by_the_next_put(
    tmp_path: Path,
) -> None:
    """A blob's fan-out directory and a row's as plain files: every put there would fail for
    good; the next put clears them. (One of the root's own directories as a file or a link
    makes links leave the cache alone: the next test.)"""
    root = tmp_path / "c"
    s = Store(root)
    data = content("fan", 3000)
    assert put(s, tmp_path, "aa01", data)
    blob, row = blob_path(s, "aa01"), row_path(s, "aa01")
    s.drop("aa01")
    for directory in (blob.parent, row.parent):
        shutil.rmtree(directory)
        directory.write_text("a file where a directory belongs")
    w = Warnings()
    s = Store(root, warn=w)
    assert put(s, tmp_path, "aa01", data) and w.text() == ""
    assert blob.is_file() and row.is_file() and served(s, tmp_path, "aa01") == data


@pytest.mark.parametrize("what", ["a file", "a symbolic link"])
@pytest.mark.parametrize("name", ["tmp", "blobs", "index"])
def test_maintenance_removes_what_stands_in_for_a_store_directory(
    tmp_path: Path, what: str, name: str
) -> None:
    """One of the root's own directories a file or a symbolic link: links leave the cache
    alone (the store refuses it: caching off until it is removed); verify removes it, the
    link itself and never what it leads to (the index is moved aside, as a damaged one), and
    the cache works again."""
    root = tmp_path / "c"
    s = Store(root)
    data = content("top", 3000)
    assert put(s, tmp_path, "aa01", data)
    s.close()
    trap = tmp_path / "trap"
    trap.mkdir()
    (trap / "theirs").write_bytes(b"someone's")
    shutil.rmtree(root / name)
    if what == "a file":
        (root / name).write_text("not a directory")
    else:
        (root / name).symlink_to(trap)
    w = Warnings()
    s = Store(root, warn=w)
    assert not s.usable and s.repairable and f"{name} is {what}" in w.text()
    report = s.verify()
    assert report.repaired >= 1 and report.damaged and report.problem is None, report
    assert s.usable and not (root / name).is_symlink() and not (root / name).is_file()
    assert [p.name for p in trap.iterdir()] == ["theirs"]  # what it led to: untouched
    assert put(s, tmp_path, "bb02", data) and served(s, tmp_path, "bb02") == data
    assert (root / name).is_dir() and not (root / name).is_symlink()
    s.close()
    s = Store(root)
    assert s.usable and not s.verify().damaged


def test_a_directory_where_a_row_file_belongs_is_cleared(tmp_path: Path) -> None:
    root = tmp_path / "c"
    s = Store(root)
    data = content("row", 3000)
    assert put(s, tmp_path, "aa01", data)
    row = row_path(s, "aa01")
    row.unlink()
    row.mkdir()
    (row / "x").write_text("x")
    assert served(s, tmp_path, "aa01") == data  # the database answers meanwhile
    w = Warnings()
    s = Store(root, warn=w)
    assert put(s, tmp_path, "aa01", data) and w.text() == ""
    assert row.is_file()


@pytest.mark.parametrize("what", ["database", "wal"])
def test_an_index_database_that_is_a_directory_is_moved_aside(tmp_path: Path, what: str) -> None:
    """index/cache.db (or its -wal file) a directory: sqlite can never open that, and says
    "unable to open", not "damaged". It is moved aside like a damaged database and a fresh
    one made: the next link stores, the one after hits. (index/ itself a file: the next
    test but one.)"""
    root = tmp_path / "c"
    s = Store(root)
    assert put(s, tmp_path, "aa01", b"x" * 100)
    s.close()
    shutil.rmtree(root / "rows")  # so that the database must answer
    db = root / "index" / ("cache.db" if what == "database" else "cache.db-wal")
    db.unlink(missing_ok=True)
    db.mkdir()
    (db / "x").write_text("x")
    w = Warnings()
    s = Store(root, warn=w)
    assert s.get("aa01") is None
    assert "index database" in w.text()
    assert list(root.glob("index.damaged-*"))
    assert put(s, tmp_path, "bb02", b"y" * 100)
    s.close()
    s = Store(root)
    assert served(s, tmp_path, "bb02") == b"y" * 100


@pytest.mark.parametrize("what", ["garbage", "directory"])
def test_a_statistics_database_that_is_not_one_is_moved_aside(tmp_path: Path, what: str) -> None:
    root = tmp_path / "c"
    s = Store(root)
    s.record(hits=3)
    assert s.stats()["hits"] == 3
    s.close()
    db = root / "stats" / "stats.db"
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    db.unlink()
    if what == "garbage":
        db.write_bytes(b"not a database" * 300)
    else:
        db.mkdir()
    w = Warnings()
    s = Store(root, warn=w)
    s.record(hits=2)
    assert s.stats()["hits"] == 2  # counting afresh
    assert "statistics database" in w.text()
    assert db.is_file() and list(root.glob("stats.damaged-*"))


def test_verify_repairs_every_kind_of_damage_it_finds(tmp_path: Path) -> None:
    """Each kind once: a directory, a FIFO and a symbolic link where blobs belong, a file
    where a fan-out directory belongs, a directory where a row file belongs, directories
    where lock markers belong, a file where tmp/ belongs, an index database and a statistics
    database that are not databases. verify removes or moves aside each (the entries whose
    blobs went are dropped), reports them and exits 1; a second verify finds nothing; the
    store works."""
    root = tmp_path / "c"
    s = Store(root)
    keys = [f"{i:04x}" for i in range(8)]
    for key in keys:
        assert put(s, tmp_path, key, content(key, 5000))
    s.record(hits=1)
    blobs = {key: blob_path(s, key) for key in keys}
    rows = {key: row_path(s, key) for key in keys}
    s.close()
    a_directory_at(blobs[keys[0]])
    blobs[keys[1]].unlink()
    os.mkfifo(blobs[keys[1]])  # opened for reading, it would block for ever
    blobs[keys[2]].unlink()
    blobs[keys[2]].symlink_to("/dev/zero")  # read, it would never end
    fan_out = blobs[keys[3]].parent
    shutil.rmtree(fan_out)
    fan_out.write_text("x")
    rows[keys[4]].unlink()
    rows[keys[4]].mkdir()
    (root / "claims").mkdir(exist_ok=True)
    (root / "claims" / f"{keys[5]}.lock").mkdir()
    (root / "locks" / "maintenance.lock").mkdir(parents=True)
    shutil.rmtree(root / "tmp")
    (root / "tmp").write_text("x")
    index_db, stats_db = root / "index" / "cache.db", root / "stats" / "stats.db"
    for db in (index_db, stats_db):
        for extra in ("-wal", "-shm"):
            Path(f"{db}{extra}").unlink(missing_ok=True)
    index_db.write_bytes(b"not an index" * 400)
    stats_db.write_bytes(b"not statistics" * 400)
    w = Warnings()
    s = Store(root, warn=w)
    report = s.verify()
    assert report.problem is None and s.failure is None, report
    # blobs: 3 (directory, FIFO, link) + 1 fan-out file; 1 row directory; 2 lock markers;
    # tmp; the index database; the statistics database
    assert report.repaired == 10, report
    assert report.damaged
    assert "index database" in w.text() and "statistics database" in w.text()
    again = s.verify()
    assert not again.damaged and again.problem is None, again
    assert (root / "tmp").is_dir() or not (root / "tmp").exists()
    for key in keys:
        assert put(s, tmp_path, key, content(key, 5000))
    s.close()
    s = Store(root)
    assert [served(s, tmp_path, k) for k in keys] == [content(k, 5000) for k in keys]
    assert s.trim() >= 0 and s.failure is None


def test_verify_finds_a_damaged_index_page(tmp_path: Path) -> None:
    """Damage deep in the index database (a page no link read yet): verify's check of the
    whole database finds it and starts a fresh one; the lost entries are misses."""
    root = tmp_path / "c"
    s = Store(root)
    assert s._index is not None
    for i in range(300):
        s._index.set_memo("n", f"{i:05x}", "v" * 200)
    s.close()
    db = root / "index" / "cache.db"
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    size = db.stat().st_size
    with open(db, "r+b") as f:  # keep the header and the first pages, wreck the last ones
        f.seek(size - 3 * 4096)
        f.write(os.urandom(3 * 4096))
    w = Warnings()
    s = Store(root, warn=w)
    report = s.verify()
    assert report.repaired >= 1 and report.problem is None, report
    assert "index database" in w.text() and list(root.glob("index.damaged-*"))
    assert not s.verify().damaged


def test_a_lock_marker_that_is_a_directory_does_not_stop_maintenance(tmp_path: Path) -> None:
    root = tmp_path / "c"
    s = Store(root)
    assert put(s, tmp_path, "aa01", b"x" * 100)
    (root / "locks").mkdir(exist_ok=True)
    (root / "locks" / "maintenance.lock").mkdir()
    w = Warnings()
    s = Store(root, warn=w)
    assert s.trim(0) > 0 and s.failure is None and w.text() == ""
    assert not (root / "locks" / "maintenance.lock").is_dir()


@pytest.mark.parametrize("how", ["native", "python", "hard link"])
def test_a_fifo_where_a_blob_belongs_is_a_miss_not_a_hang(tmp_path: Path, how: str) -> None:
    """Opened for reading, a FIFO with no writer blocks for ever: the hit that meets one
    (by the native placer, by copy_out, by a hard link) is a miss, the FIFO removed, and the
    next put stores again. Run in a process of its own, so that a hang fails the test."""
    import subprocess
    import sys

    from store import placing

    if how == "native" and placing.__dict__["native_copy_blobs"] is None:
        pytest.skip("the C extension is not built")
    root = tmp_path / "c"
    s = Store(root)
    data = content("fifo", 9000)
    assert put(s, tmp_path, "aa01", data)
    path = blob_path(s, "aa01")
    s.close()
    path.unlink()
    os.mkfifo(path)
    code = f"""
import sys
from store import Store, placing
if {how != "native"}:
    placing.native_copy_blobs = placing.native_link_blobs = None
s = Store({str(root)!r}, hard_link={how == "hard link"}, warn=print)
found = s.lookup(["aa01"])
print(s.materialize_many([(found["aa01"], {{"obj": {str(tmp_path / "out")!r}}})]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).parent.parent.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[None]" and "damaged" in done.stdout, done.stdout
    assert not path.exists() and not (tmp_path / "out").exists()
    s = Store(root)
    assert put(s, tmp_path, "aa01", data) and served(s, tmp_path, "aa01") == data
