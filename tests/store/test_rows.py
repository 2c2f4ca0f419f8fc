"""Row files and pending counts: what lets a fully cached link skip both sqlite databases."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from store import Store, tally
from store.rows import Rows
from tests.store.helpers import Warnings, write

DB_MODULES = ("_sqlite3", "sqlite3", "diskcache", "store.stats", "store.dbopen")


def put(s: Store, tmp: Path, key: str, data: bytes) -> bool:
    return s.put(key, {"obj": write(tmp / f"src-{key}", data)}, duration=1.0, toolchain="t",
                 key_version=1)  # fmt: skip


def in_fresh_process(code: str) -> str:
    """Runs ``code`` in a new interpreter; returns its stdout (its last line is checked)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).parent.parent.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_full_hit_reads_and_records_without_either_database(tmp_path: Path) -> None:
    root = tmp_path / "c"
    s = Store(root)
    assert put(s, tmp_path, "ab01", b"one" * 100) and put(s, tmp_path, "cd02", b"two" * 100)
    s.memo_put_many("shard", [("raw1", "canon:1"), ("raw2", "canon:2")])
    s.close()
    out = tmp_path / "out"
    code = (
        "import sys, store\n"
        f"s = store.Store({str(root)!r})\n"
        "found = s.lookup(['ab01', 'cd02'])\n"
        "memos = s.memo_get_many('shard', ['raw1', 'raw2'])\n"
        f"placed = s.materialize_many([(found['ab01'], {{'obj': {str(out)!r}}})])\n"
        "s.record(hits=2, time_saved=2.0, bytes_served=600, shards_memoized=2)\n"
        f"print(sorted(found), sorted(memos.items()), placed[0] is not None, "
        f"[m for m in {DB_MODULES!r} if m in sys.modules])\n"
    )
    assert in_fresh_process(code) == (
        "['ab01', 'cd02'] [('raw1', 'canon:1'), ('raw2', 'canon:2')] True []"
    )
    assert out.read_bytes() == b"one" * 100
    assert len(os.listdir(root / "stats" / "pending")) == 1  # the link's counts, not yet added
    stats = Store(root).stats()  # opening the database folds them in, once
    assert (stats["hits"], stats["time_saved"], stats["bytes_served"]) == (2, 2.0, 600)
    assert stats["shards_memoized"] == 2
    assert os.listdir(root / "stats" / "pending") == []
    assert Store(root).stats()["hits"] == 2


def test_a_miss_still_reads_the_database(tmp_path: Path) -> None:
    """Rows stored only in the database (by a version before row files) are found, and
    given their files, so that the next link needs no database."""
    root = tmp_path / "c"
    s = Store(root)
    assert put(s, tmp_path, "ab01", b"one")
    s.memo_put("toolchain", "clang\0/usr/bin/clang", "digest")
    s.close()
    rows = Rows(str(root), Store(root)._modes)
    for path, _ in list(rows.files()):
        os.unlink(path)
    s = Store(root)
    assert s.get("ab01") is not None
    assert s.memo_get("toolchain", "clang\0/usr/bin/clang") == "digest"
    assert s.get("ef03") is None
    code = (
        "import sys, store\n"
        f"s = store.Store({str(root)!r})\n"
        "print(s.get('ab01') is not None, s.memo_get('toolchain', 'clang\\0/usr/bin/clang'),"
        f" [m for m in {DB_MODULES!r} if m in sys.modules])\n"
    )
    assert in_fresh_process(code) == "True digest []"


@pytest.mark.parametrize(
    "damage",
    ["garbage", "truncated", "empty", "another key's row", "not utf-8", "a FIFO"],
)
def test_a_damaged_row_file_reads_as_absent(tmp_path: Path, damage: str) -> None:
    """The database answers instead, with the row as stored: never another row's value."""
    root = tmp_path / "c"
    s = Store(root)
    assert put(s, tmp_path, "ab01", b"one") and put(s, tmp_path, "cd02", b"two")
    s.close()
    rows = Rows(str(root), s._modes)
    path = Path(rows.path("a:ab01"))
    other = Path(rows.path("a:cd02")).read_bytes()
    data = path.read_bytes()
    if damage == "a FIFO":  # must not block the link
        path.unlink()
        os.mkfifo(path)
        s = Store(root)
        found = s.get("ab01")
        assert found is not None and s.materialize(found, {"obj": str(tmp_path / "out")})
        assert (tmp_path / "out").read_bytes() == b"one"
        assert stat.S_ISREG(path.lstat().st_mode)  # written again from the database
        stray = Path(rows.dir) / "00" / "fifo"
        stray.parent.mkdir(exist_ok=True)
        os.mkfifo(stray)
        s.trim()  # the reconcile pass reads every row file: the FIFO goes, nothing blocks
        assert not stray.exists() and path.exists()
        return
    path.write_bytes({
        "garbage": os.urandom(len(data)),
        "truncated": data[: len(data) // 2],
        "empty": b"",
        "another key's row": other,
        "not utf-8": data[:-3] + b"\xff\xfe\xfd",
    }[damage])  # fmt: skip
    w = Warnings()
    s = Store(root, warn=w)
    found = s.get("ab01")
    assert found is not None and s.materialize(found, {"obj": str(tmp_path / "out")})
    assert (tmp_path / "out").read_bytes() == b"one"
    assert w.text() == ""
    assert path.read_bytes() == data  # rewritten from the database


def test_rows_follow_drops_clear_and_culling(tmp_path: Path) -> None:
    root = tmp_path / "c"
    s = Store(root)
    for key in ("ab01", "cd02", "ef03"):
        assert put(s, tmp_path, key, key.encode())
    s.memo_put("shard", "raw", "canon:x")
    rows = Rows(str(root), s._modes)
    assert len(list(rows.files())) == 4
    s.drop("ab01")
    assert not os.path.exists(rows.path("a:ab01"))
    assert Store(root).get("ab01") is None
    assert s._index is not None
    s._index.cache.delete("a:cd02")  # as diskcache culls a row past its budget
    stray = Path(rows.dir) / "00" / "not-a-row"
    stray.parent.mkdir(exist_ok=True)
    stray.write_bytes(b"junk")
    assert s.trim() == 0  # an eviction pass: nothing to free, but the files are reconciled
    assert not os.path.exists(rows.path("a:cd02")) and not stray.exists()
    assert Store(root).get("cd02") is None and Store(root).get("ef03") is not None
    assert Store(root).memo_get("shard", "raw") == "canon:x"
    s.clear()
    assert list(rows.files()) == []
    assert Store(root).get("ef03") is None and Store(root).memo_get("shard", "raw") is None


def test_an_entry_whose_blob_was_evicted_is_dropped_from_its_file_too(tmp_path: Path) -> None:
    root = tmp_path / "c"
    s = Store(root)
    assert put(s, tmp_path, "ab01", b"one")
    manifest = s.get("ab01")
    assert manifest is not None
    digest = manifest.outputs["obj"][0]
    os.unlink(root / "blobs" / digest[:2] / digest[2:])
    fresh = Store(root)
    found = fresh.lookup(["ab01"])  # the row file still names the blob
    assert not fresh.materialize(found["ab01"], {"obj": str(tmp_path / "out")})
    assert fresh.lookup(["ab01"]) == {} and Store(root).lookup(["ab01"]) == {}


def test_long_and_odd_rows_round_trip(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    value = "é" + "x" * 200_000  # longer than one read, and kept by diskcache in a file
    key = "compiler\0/opt/ü/clang\n|123"
    s.memo_put("compiler-check", key, value)
    s.close()
    fresh = Store(tmp_path / "c")
    assert fresh.memo_get("compiler-check", key) == value
    assert fresh._index is not None and fresh._index._reader is None  # from the file


def test_pending_counts_from_concurrent_links_are_each_added_once(tmp_path: Path) -> None:
    root = tmp_path / "c"
    Store(root).close()
    code = (
        "import store, sys\n"
        f"s = store.Store({str(root)!r})\n"
        "s.record(hits=3, bytes_served=10, jobs_not_cacheable=1)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(12)]
    assert [p.wait() for p in procs] == [0] * 12
    folders = [subprocess.Popen([sys.executable, "-c",
                                 f"import store; store.Store({str(root)!r}).stats()"])
               for _ in range(4)]  # fmt: skip  # several processes folding at once
    assert [p.wait() for p in folders] == [0] * 4
    stats = Store(root).stats()
    assert (stats["hits"], stats["bytes_served"], stats["jobs_not_cacheable"]) == (36, 120, 12)


def test_a_long_lived_store_sees_counts_left_after_it_opened_its_database(
    tmp_path: Path,
) -> None:
    root = tmp_path / "c"
    watcher = Store(root)
    assert watcher.stats()["hits"] == 0  # its statistics database is open from now on
    code = f"import store; store.Store({str(root)!r}).record(hits=7)"
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent.parent
    )
    assert os.listdir(root / "stats" / "pending")  # left as a file by the link
    assert watcher.stats()["hits"] == 7


def test_bad_pending_files_are_ignored_and_removed(tmp_path: Path) -> None:
    root = tmp_path / "c"
    Store(root).record(hits=1)  # a pending file of its own
    pending = root / "stats" / "pending"
    (pending / "a").write_bytes(b"hits 2\n\xff\xfe junk\nmisses x\nhits 99999999999999999999999\n")
    (pending / "b").write_bytes(os.urandom(5000))
    (pending / "c").write_bytes(b"hits -1\nbytes_served 7")
    os.mkdir(pending / "d")  # not a file: skipped, left alone
    os.mkfifo(pending / "f")  # nor a FIFO, which would block the read
    stats = Store(root).stats()
    assert (stats["hits"], stats["misses"], stats["bytes_served"]) == (1 + 2 - 1, 0, 7)
    assert sorted(os.listdir(pending)) == ["d", "f"]


def test_too_many_pending_files_make_a_link_add_its_counts_itself(tmp_path: Path) -> None:
    root = tmp_path / "c"
    Store(root).close()
    pending = root / "stats" / "pending"
    pending.mkdir(parents=True)
    for i in range(tally.FOLD_AT):
        (pending / f"p{i}").write_bytes(b"hits 1\n")
    s = Store(root)
    s.record(hits=5)  # opens the database, which folds everything pending
    assert os.listdir(pending) == []
    assert Store(root).stats()["hits"] == tally.FOLD_AT + 5


def test_counts_survive_an_unwritable_pending_directory(tmp_path: Path) -> None:
    root = tmp_path / "c"
    Store(root).close()
    (root / "stats").mkdir()
    (root / "stats" / "pending").write_text("a file where the directory should be")
    s = Store(root)
    s.record(hits=4)  # no pending file possible: straight into the database
    assert Store(root).stats()["hits"] == 4


def test_the_entry_text_is_what_the_database_holds(tmp_path: Path) -> None:
    s = Store(tmp_path / "c")
    assert put(s, tmp_path, "ab01", b"one")
    assert s._index is not None
    in_db = s._index.cache.get("a:ab01")
    rows = Rows(str(tmp_path / "c"), s._modes)
    assert rows.get("a:ab01") == in_db and json.loads(in_db)["outputs"]


def test_a_drop_is_not_undone_by_a_backfill_between_its_two_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dropped entry (say, one --verify-hits caught serving wrong bytes) stays dropped when
    another process misses its file mid-drop and copies the row to its file from the
    database: the database row goes first, so there is nothing left to copy."""
    root = tmp_path / "c"
    s = Store(root)
    assert put(s, tmp_path, "ab01", b"BAD" * 100)
    s.close()
    dropper, reader = Store(root), Store(root)  # two processes
    assert dropper._index is not None
    real_drop = dropper._index.rows.drop

    def drop_then_read(full_key: str) -> None:
        real_drop(full_key)
        reader.lookup(["ab01"])  # the other process, the moment the file is gone

    monkeypatch.setattr(dropper._index.rows, "drop", drop_then_read)
    dropper.drop("ab01")
    monkeypatch.undo()
    assert not os.path.exists(Rows(str(root), s._modes).path("a:ab01"))
    assert Store(root).lookup(["ab01"]) == {} and Store(root).get("ab01") is None


@pytest.mark.parametrize(
    "meanwhile",
    ["dropped", "dropped and stored again", "stored again after the file landed"],
)
def test_a_backfill_never_outlives_the_row_it_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meanwhile: str
) -> None:
    """A process reads a row from the database, and before its copy lands as the row's file
    another one drops the row (and may store the key again): the copy is taken back, unless
    the file holds another process's row by then."""
    root = tmp_path / "c"
    s = Store(root)
    assert put(s, tmp_path, "ab01", b"BAD" * 100)
    rows = Rows(str(root), s._modes)
    os.unlink(rows.path("a:ab01"))  # lost, or stored before row files: read from the database
    s.close()
    reader, other = Store(root), Store(root)
    assert reader._index is not None
    real_put = reader._index.rows.put

    def the_other_process() -> None:
        other.drop("ab01")
        if meanwhile != "dropped":
            assert put(other, tmp_path, "ab01", b"NEW" * 100)

    def late_put(full_key: str, value: str) -> None:
        if meanwhile == "stored again after the file landed":
            real_put(full_key, value)
            the_other_process()
        else:
            the_other_process()
            real_put(full_key, value)

    monkeypatch.setattr(reader._index.rows, "put", late_put)
    found = reader.lookup(["ab01"])  # what it read still counts as found: it was there then
    monkeypatch.undo()
    assert set(found) == {"ab01"}
    if meanwhile == "dropped":
        assert not os.path.exists(rows.path("a:ab01"))
        assert Store(root).lookup(["ab01"]) == {}
        return
    db = Store(root)._index
    assert db is not None
    in_file, in_db = rows.get("a:ab01"), db.cache.get("a:ab01")
    assert in_file in (None, in_db)  # never the copy of the dropped row
    assert (in_file is not None) == (meanwhile == "stored again after the file landed")
    later = Store(root)
    m = later.lookup(["ab01"])["ab01"]
    assert later.materialize(m, {"obj": str(tmp_path / "out")})
    assert (tmp_path / "out").read_bytes() == b"NEW" * 100
    assert later._index is not None
    assert rows.get("a:ab01") == later._index.cache.get("a:ab01")


def test_a_fifo_held_open_by_a_writer_in_rows_reads_as_absent(tmp_path: Path) -> None:
    """Its read fails with EAGAIN instead of returning nothing: the reconcile pass removes
    it as a file that holds no row, and the store carries on."""
    root = tmp_path / "c"
    w = Warnings()
    s = Store(root, warn=w)
    assert put(s, tmp_path, "ab01", b"one" * 100)
    rows = Rows(str(root), s._modes)
    fifo = Path(rows.dir) / "00" / ("f" * 30)
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    read_end = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    write_end = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # held open, nothing written
    try:
        s.trim()
    finally:
        os.close(write_end)
        os.close(read_end)
    assert w.text() == "" and s.usable
    assert not fifo.exists() and s.get("ab01") is not None
