"""A cache whose own directories are not what the store made (a member of a group-shared
cache can replace any of them): the link goes on uncached, with a warning, and nothing is
written where a symbolic link among them leads."""

import os
import shutil
from pathlib import Path

import pytest

from store import LAYOUT

from .toolchain import Project, build, requires_toolchain

pytestmark = [requires_toolchain, pytest.mark.e2e]


def warning(cache: Path, part: str, what: str) -> str:
    return (f"cached-dist: warning: cache {cache}: {part} is {what}, not a directory the cache "
            "made; caching is off until it is removed")  # fmt: skip


def listing(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() if p.is_file() else b""
            for p in sorted(directory.rglob("*"))}  # fmt: skip


def linked(project: Project, cache: Path, out: str) -> str:
    done = project.link(out, distributor_args=[f"--cache-dir={cache}", "--group-shared"])
    assert done.returncode == 0, done.stderr
    assert project.run_program(out) == project.expected_output
    return done.stderr


@pytest.mark.parametrize("part", LAYOUT)
def test_a_cache_directory_replaced_by_a_symbolic_link_is_not_used(
    tmp_path: Path, part: str
) -> None:
    project = build("calc", tmp_path / "p")
    cache = tmp_path / "cache"
    assert "5 jobs: 0 hits, 5 compiled" in linked(project, cache, "first")
    trap = tmp_path / "trap"
    trap.mkdir()
    (trap / "theirs").write_bytes(b"a file of someone's")
    shutil.rmtree(cache / part)
    (cache / part).symlink_to(trap)
    stderr = linked(project, cache, "app")
    assert warning(cache, part, "a symbolic link") in stderr
    assert "5 jobs: 0 hits, 5 compiled" in stderr
    assert listing(trap) == {"theirs": b"a file of someone's"}  # nothing written, nothing removed
    assert (project.dir / "app").read_bytes() == (project.dir / "first").read_bytes()


def test_tmp_linked_to_the_output_directory_leaves_the_link_uncached(tmp_path: Path) -> None:
    """The case found by the campaign: tmp/ pointing at the link's own output directory made
    the link fail ("output ... is inside the cache's own files")."""
    project = build("calc", tmp_path / "p")
    cache = tmp_path / "cache"
    linked(project, cache, "first")
    shutil.rmtree(cache / "tmp")
    (cache / "tmp").symlink_to(project.dir)
    before = listing(project.dir)
    stderr = linked(project, cache, "app")
    assert warning(cache, "tmp", "a symbolic link") in stderr
    after = listing(project.dir)
    assert after.pop("app") and after == before  # only the link's own output is new


def test_a_fresh_cache_with_a_planted_directory(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o2770)
    trap = tmp_path / "trap"
    trap.mkdir()
    (cache / "blobs").symlink_to(trap)
    stderr = linked(project, cache, "app")
    assert warning(cache, "blobs", "a symbolic link") in stderr
    assert list(trap.iterdir()) == []
    assert sorted(os.listdir(cache)) == ["blobs"]  # the store made nothing else


def test_a_file_in_the_place_of_a_cache_directory(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    cache = tmp_path / "cache"
    linked(project, cache, "first")
    shutil.rmtree(cache / "index")
    (cache / "index").write_bytes(b"not a directory")
    stderr = linked(project, cache, "app")
    assert warning(cache, "index", "a file") in stderr
    assert (cache / "index").read_bytes() == b"not a directory"
    # Removed, the cache is used again: its entries are still in their row files.
    (cache / "index").unlink()
    stderr = linked(project, cache, "again")
    assert "warning" not in stderr and "5 jobs: 5 hits, 0 compiled" in stderr
