"""A fully cached link stays cheap: what it imports, and the cache's file modes."""

import os
import stat
from pathlib import Path

import pytest

from .toolchain import Archive, build, requires_toolchain

pytestmark = [requires_toolchain, pytest.mark.e2e]

# Each costs milliseconds to import and a full hit has no use for it. json (with re and
# enum) too: the job file and the manifests are read by store.jsonload, and the installed
# command is a plain script, not pip's console_scripts wrapper (which imports re).
HEAVY = ("json", "re", "enum", "contextlib", "importlib.util", "pathlib",
         "dataclasses", "typing", "inspect", "filelock", "psutil", "subprocess", "asyncio",
         "concurrent.futures", "multiprocessing", "signal", "tomllib", "argparse",
         "cached_dist.runners", "cached_dist.bitcode.shard", "store.lease",
         # the source-path hint reads modules' bitcode on misses and with --verbose only
         "cached_dist.link.checkouts", "cached_dist.bitcode.source_name",
         # the index and statistics databases: a full hit reads row files and leaves its
         # counts in a file (store/rows.py, store/tally.py)
         "_sqlite3", "sqlite3", "diskcache", "store.sql", "store.dbopen", "store.stats",
         "functools", "collections",
         # the remote tier, which a link without --remote-storage never touches
         "cached_dist.link.tiers", "store.remote", "store.entry", "redis", "http.client",
         "socket", "ssl",
         # zstd: a hit of a compressed blob loads only its C backend (store/zstd.py)
         "zstandard", "platform")  # fmt: skip


def imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}  # fmt: skip


@pytest.mark.parametrize("archive", ["thin", "regular"])
def test_full_hit_imports_nothing_heavy(tmp_path: Path, archive: Archive) -> None:
    project = build("shapes", tmp_path / "p", archive)
    cache = tmp_path / "cache"
    args = [f"--cache-dir={cache}"]
    assert project.link("first", distributor_args=args).returncode == 0
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    done = project.link("second", distributor_args=args, env=env)
    assert done.returncode == 0, done.stderr
    assert "4 jobs: 4 hits, 0 compiled" in done.stderr
    modules = imported(done.stderr)
    assert "store" in modules and "cached_dist.link.cached" in modules  # the measurement works
    assert sorted(m for m in HEAVY if m in modules) == []


def test_group_shared_cache_modes(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    cache = tmp_path / "cache"
    done = project.link(distributor_args=[f"--cache-dir={cache}", "--group-shared"])
    assert done.returncode == 0, done.stderr
    mode = os.stat(cache).st_mode
    assert mode & stat.S_ISGID and stat.S_IMODE(mode) & 0o070 == 0o070
    blobs = [p for p in (cache / "blobs").rglob("*") if p.is_file()]
    assert blobs and all(stat.S_IMODE(os.stat(b).st_mode) & 0o060 == 0o060 for b in blobs)


def test_private_cache_modes_by_default(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    cache = tmp_path / "cache"
    assert project.link(distributor_args=[f"--cache-dir={cache}"]).returncode == 0
    assert stat.S_IMODE(os.stat(cache).st_mode) & 0o077 == 0
    blobs = [p for p in (cache / "blobs").rglob("*") if p.is_file()]
    assert blobs and all(stat.S_IMODE(os.stat(b).st_mode) & 0o077 == 0 for b in blobs)
