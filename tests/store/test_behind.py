"""Writes behind the caller (store/behind.py): a detached writer the caller does not wait for,
and settle(), which does wait for it. The writer is held up by a real sqlite write lock on the
store's index, which another connection takes as a concurrent writer would."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from store import Store


def _existing(root: Path) -> Store:
    """An existing store, opened as a link opens it: its index read, not open for writing."""
    Store(root).close()
    s = Store(root)
    assert s.memo_get("ns", "k") is None
    return s


@contextmanager
def _index_locked(root: Path) -> Iterator[None]:
    con = sqlite3.connect(root / "index" / "cache.db", isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        yield
        con.execute("ROLLBACK")
    finally:
        con.close()


def test_the_writes_happen_behind_and_settle_waits_for_them(tmp_path: Path) -> None:
    root = tmp_path / "c"
    s = _existing(root)
    with _index_locked(root):
        s.write_behind([("ns", "k", "written behind")], [])  # returns: nothing waits here
        assert Store(root).memo_get("ns", "k") is None
    s.settle()
    assert Store(root).memo_get("ns", "k") == "written behind"
    assert os.listdir(root / "tmp") == []  # the work file is gone


def test_another_store_object_and_stats_wait_too(tmp_path: Path) -> None:
    root = tmp_path / "c"
    s = _existing(root)
    with _index_locked(root):
        s.write_behind([("ns", "a", "1"), ("other", "b", "2")], [])
    Store(root).stats()  # waits for the writer, as `cached-dist stats` does
    fresh = Store(root)
    assert (fresh.memo_get("ns", "a"), fresh.memo_get("other", "b")) == ("1", "2")


def test_written_here_once_the_index_is_open_for_writing(tmp_path: Path) -> None:
    root = tmp_path / "c"
    s = _existing(root)
    s.memo_put("ns", "first", "x")  # opens the index for writing: further writes are cheap here
    s.write_behind([("ns", "k", "here")], [])
    assert Store(root).memo_get("ns", "k") == "here"  # at once, no settle


def test_the_writer_holds_none_of_the_callers_pipes(tmp_path: Path) -> None:
    """A build tool reading the link's output must not wait for the writer."""
    root = tmp_path / "c"
    _existing(root).close()
    script = textwrap.dedent(f"""
        from store import Store
        s = Store({str(root)!r})
        s.memo_get("ns", "k")
        s.write_behind([("ns", "k", "from a child")], [])
        print("returned")
    """)
    with _index_locked(root):  # held pipes would be held until it is released: a hang
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=60, cwd=Path(__file__).parent.parent.parent)  # fmt: skip
        assert out.returncode == 0 and out.stdout == "returned\n", out.stderr
        assert Store(root).memo_get("ns", "k") is None  # the pipes closed before the write
    Store(root).settle()
    assert Store(root).memo_get("ns", "k") == "from a child"


def test_a_writer_in_a_directory_with_a_store_of_its_own(tmp_path: Path) -> None:
    """The writer imports this project's store package, not one in the caller's directory."""
    root = tmp_path / "c"
    s = _existing(root)
    decoy = tmp_path / "cwd" / "store"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise SystemExit('the wrong store package')\n")
    (decoy / "writer.py").write_text("raise SystemExit('the wrong store package')\n")
    here = os.getcwd()
    os.chdir(decoy.parent)
    try:
        s.write_behind([("ns", "k", "right package")], [])
    finally:
        os.chdir(here)
    s.settle()
    assert Store(root).memo_get("ns", "k") == "right package"
