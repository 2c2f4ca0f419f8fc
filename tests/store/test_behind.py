"""Writes behind the caller (store/behind.py): a detached writer the caller does not wait for,
and settle(), which does wait for it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from store import Store


def _waiting_work(go: Path, done: Path) -> str:
    """Source of a work function that waits for ``go`` (at most 20 s), then writes ``done``."""
    return textwrap.dedent(f"""
        def work(store):
            import os, time
            deadline = time.monotonic() + 20
            while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:
                time.sleep(0.01)
            with open({str(done)!r}, "w") as f:
                f.write(str(os.getpid()))
    """)


def _work(go: Path, done: Path) -> Callable[[Store], None]:
    scope: dict[str, Callable[[Store], None]] = {}
    exec(_waiting_work(go, done), scope)
    return scope["work"]


def _open_store(root: Path) -> Store:
    """An existing store, opened as a link opens it: its index read, not open for writing."""
    Store(root).close()  # creates it
    s = Store(root)
    assert s.memo_get("x", "y") is None
    return s


def test_work_runs_behind_and_settle_waits_for_it(tmp_path: Path) -> None:
    go, done = tmp_path / "go", tmp_path / "done"
    s = _open_store(tmp_path / "c")
    s.write_behind(_work(go, done))
    assert not done.exists()  # returned while the work still waits: it runs elsewhere
    go.touch()
    s.settle()
    assert done.exists() and int(done.read_text()) != os.getpid()


def test_a_new_store_object_also_waits(tmp_path: Path) -> None:
    go, done = tmp_path / "go", tmp_path / "done"
    _open_store(tmp_path / "c").write_behind(_work(go, done))
    go.touch()
    Store(tmp_path / "c").settle()  # another process's view of the same store
    assert done.exists()


def test_stats_wait_for_the_writers(tmp_path: Path) -> None:
    go, done = tmp_path / "go", tmp_path / "done"
    s = _open_store(tmp_path / "c")

    def work(store: Store) -> None:
        _work(go, done)(store)
        store.memo_put("x", "y", "written behind")

    s.write_behind(work)
    go.touch()
    Store(tmp_path / "c").stats()
    assert Store(tmp_path / "c").memo_get("x", "y") == "written behind"


def test_runs_here_once_the_index_is_open_for_writing(tmp_path: Path) -> None:
    s = _open_store(tmp_path / "c")
    s.memo_put("a", "b", "c")  # opens the index for writing: further writes are cheap here
    ran_in: list[int] = []
    s.write_behind(lambda store: ran_in.append(os.getpid()))
    assert ran_in == [os.getpid()]


def test_the_writer_does_not_hold_the_callers_pipes(tmp_path: Path) -> None:
    """A build tool that reads the link's output must not wait for the writer."""
    go, done = tmp_path / "go", tmp_path / "done"
    script = _waiting_work(go, done) + textwrap.dedent(f"""
        from store import Store
        Store({str(tmp_path / "c")!r}).close()
        s = Store({str(tmp_path / "c")!r})
        s.write_behind(work)
        print("returned")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=15, cwd=Path(__file__).parent.parent.parent)  # fmt: skip
    assert out.returncode == 0 and out.stdout == "returned\n", out.stderr
    assert not done.exists()  # the pipes closed while the writer was still waiting
    go.touch()
    Store(tmp_path / "c").settle()
    assert done.exists()
