"""Real links meet damage to the cache's own files: the next link repairs it and stores, the
one after hits (the store side: tests/store/test_repair.py)."""

import shutil
from pathlib import Path

import pytest

from .toolchain import build, cached_dist_exe, counting_compiler, requires_toolchain, run

pytestmark = [requires_toolchain, pytest.mark.e2e]


@pytest.mark.parametrize("damage", ["index database", "blob"])
def test_damage_wedges_no_link(tmp_path: Path, damage: str) -> None:
    """index/cache.db replaced by a directory (without row files, so that the database must
    answer), or a directory where a blob belongs: the link after it warns at most once,
    compiles what it lost and stores it again; the link after that is a full hit."""
    project = build("calc", tmp_path / "p")
    wrapper, _ = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    args = [f"--cache-dir={cache}"]
    assert project.link("first", remote_compiler=wrapper, distributor_args=args).returncode == 0
    if damage == "index database":
        shutil.rmtree(cache / "rows")
        for extra in ("", "-wal", "-shm"):
            Path(f"{cache / 'index' / 'cache.db'}{extra}").unlink(missing_ok=True)
        (cache / "index" / "cache.db").mkdir()
        lost = 5
    else:
        blob = next(p for p in (cache / "blobs").rglob("*") if p.is_file())
        blob.unlink()
        blob.mkdir()
        (blob / "inside").write_text("not a blob")
        lost = 1
    done = project.link("second", remote_compiler=wrapper, distributor_args=args)
    assert done.returncode == 0, done.stderr
    assert f"5 jobs: {5 - lost} hits, {lost} compiled" in done.stderr, done.stderr
    assert len([ln for ln in done.stderr.splitlines() if "warning" in ln]) <= 1, done.stderr
    for n in range(2):
        done = project.link(f"again{n}", remote_compiler=wrapper, distributor_args=args)
        assert done.returncode == 0 and "5 jobs: 5 hits, 0 compiled" in done.stderr, done.stderr
    assert (project.dir / "again1").read_bytes() == (project.dir / "first").read_bytes()
    done = run([cached_dist_exe(), "verify", *args], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
