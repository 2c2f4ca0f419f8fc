"""stats, clear, trim and verify tell the truth: what is not a cache is refused untouched (exit
2), a command that could not do its work says so (exit 4), one that could does it, on a full
disk too. The store side of it: tests/store/test_disk_full.py, tests/store/test_repair.py."""

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Store
from store.layout import TAG

from .store.helpers import content, fill, mounted_tmpfs, remount_ro, write
from .toolchain import cached_dist_exe, run

COMMANDS = ("stats", "clear", "trim", "verify")
#: What `could not VERB the cache at DIR: ...` says for each command.
VERBS = {"stats": "show the statistics of", "clear": "clear", "trim": "trim", "verify": "verify"}


def command(name: str, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run([cached_dist_exe(), name, f"--cache-dir={cache}", *args], cache.parent)


def snapshot(top: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``top`` with its kind and size: what a command must not change."""
    found = {}
    for directory, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(directory) / name
            st = path.lstat()
            found[str(path.relative_to(top))] = (st.st_mode, st.st_size)
    return found


def make_cache(root: Path, tmp: Path, entries: int = 3) -> None:
    s = Store(root)
    for i in range(entries):
        src = write(tmp / f"src{i}", (content(f"cli{i}", 100) * 20_000)[:20_000])
        assert s.put(f"{i:04x}", {"obj": src}, duration=1.0, toolchain="t", key_version=1)
    s.record(hits=1)
    s.close()


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Path]:
    yield from mounted_tmpfs(tmp_path / "small", "2m")


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("what", ["missing", "directory", "file", "foreign tag", "/proc"])
def test_what_is_not_a_cache_is_refused_and_left_alone(
    tmp_path: Path, name: str, what: str
) -> None:
    """A command never makes a cache (links do): on a directory that holds none, even one
    with another program's CACHEDIR.TAG, and on /proc, it says so, exits 2 and creates
    nothing."""
    target = tmp_path / "target"
    if what == "directory":
        target.mkdir()
        (target / "notes.txt").write_text("someone's files")
        (target / "tmp").mkdir()
    elif what == "file":
        target.write_text("a file")
    elif what == "foreign tag":
        target.mkdir()
        (target / TAG).write_text("Signature: 8a477f597d28d172789f06886806bc55\n"
                                  "# This file is a cache directory tag created by ccache.\n")  # fmt: skip
    elif what == "/proc":
        target = Path("/proc")
    before = snapshot(target) if what not in ("missing", "/proc") else {}
    proc_before = set(os.listdir("/proc")) if what == "/proc" else set()
    done = run([cached_dist_exe(), name, f"--cache-dir={target}"], tmp_path)
    assert done.returncode == 2, done.stderr
    if what == "missing":
        reason = ""
    elif what == "file":
        reason = ": not a directory"
    else:
        reason = (": the directory holds none (no CACHEDIR.TAG of cached-dist, no index); "
                  "left untouched")  # fmt: skip
    assert done.stderr == f"cached-dist: error: no cache at {target}{reason}\n"
    assert done.stdout == ""
    if what == "missing":
        assert not target.exists()
    elif what == "/proc":
        assert not {"index", "stats", "locks", "blobs"} & (set(os.listdir("/proc")) - proc_before)
    else:
        assert snapshot(target) == before


def test_a_cache_from_before_the_tag_is_recognized_and_tagged(tmp_path: Path) -> None:
    """Caches made before CACHEDIR.TAG existed have an index database: they are caches, and
    their next writer tags them. One whose index was lost still has its tag."""
    cache = tmp_path / "cache"
    make_cache(cache, tmp_path)
    (cache / TAG).unlink()
    done = command("stats", cache, "--json")
    assert done.returncode == 0 and '"entries": 3' in done.stdout, done.stderr
    assert not (cache / TAG).exists()  # reading tags nothing
    make_cache(cache, tmp_path, 4)
    assert (cache / TAG).read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55\n")
    shutil.rmtree(cache / "index")
    shutil.rmtree(cache / "rows")
    done = command("verify", cache)
    assert done.returncode == 0, done.stdout + done.stderr  # blobs no entry names are no damage
    assert "checked 4 blobs" in done.stdout and (cache / "index" / "cache.db").exists()


def test_stats_of_a_new_cache_are_zeros(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    Store(cache).close()
    done = command("stats", cache)
    assert done.returncode == 0, done.stderr
    assert "hits                 0\n" in done.stdout and "entries              0\n" in done.stdout


@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_that_cannot_do_its_work_exits_4(small: Path, tmp_path: Path, name: str) -> None:
    """A read-only cache: the maintenance lock cannot be taken (said in a warning; the work
    is tried without it, as after a wait for a busy lock) and the work cannot be done
    either: one error line that says what could not be done and why, exit status 4."""
    cache = small / "cache"
    make_cache(cache, tmp_path)
    if not remount_ro(small):
        pytest.skip("cannot remount the tmpfs read-only")
    done = command(name, cache)
    assert done.returncode == 4, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.split(":")[1]]
    assert len(errors) == 1 and done.stderr.endswith(errors[0] + "\n"), done.stderr
    assert errors[0].startswith(f"cached-dist: error: could not {VERBS[name]} the cache at "
                                f"{cache}: "), errors[0]  # fmt: skip
    if name != "stats":  # the lock: why the work was tried without it
        lock = cache / "locks" / "maintenance.lock"
        assert (f"cached-dist: warning: cannot take the maintenance lock {lock}: Read-only file "
                "system; went on without it\n") in done.stderr  # fmt: skip
    assert "cleared" not in done.stderr and "freed" not in done.stderr


def test_trim_and_clear_work_on_a_disk_the_cache_filled(small: Path, tmp_path: Path) -> None:
    """The cache holds most of a full 2 MiB file system (the last bytes taken too): trim
    makes room (the sqlite logs, the oldest entries) with no lock marker to be had, and the
    cache stores again; clear empties it. Both say what they did and exit 0."""
    cache = small / "cache"
    make_cache(cache, tmp_path, 25)
    filler = fill(small)
    assert os.statvfs(small).f_bavail == 0
    done = command("trim", cache)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1].startswith("cached-dist: freed "), done.stderr
    assert os.statvfs(small).f_bavail * os.statvfs(small).f_frsize >= 256 << 10
    done = command("verify", cache)
    assert done.returncode == 0, done.stdout + done.stderr
    s = Store(cache)
    src = write(tmp_path / "again", content("again", 20_000))
    assert s.put("beef", {"obj": src}, duration=1.0, toolchain="t", key_version=1)
    s.close()
    fill(small, "filler2")
    done = command("clear", cache)
    assert done.returncode == 0, done.stderr
    assert done.stderr.endswith(f"cached-dist: cleared {cache}\n"), done.stderr
    assert not [p for p in (cache / "blobs").rglob("*") if p.is_file()]
    filler.unlink()
    (small / "filler2").unlink()
    done = command("stats", cache, "--json")
    assert done.returncode == 0 and '"entries": 0' in done.stdout, done.stderr


def test_verify_exit_statuses(tmp_path: Path) -> None:
    """0: nothing damaged; 1: damage found and repaired (here a directory where a blob
    belongs, and the entry that named it); then 0 again."""
    cache = tmp_path / "cache"
    make_cache(cache, tmp_path)
    done = command("verify", cache)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ("checked 3 blobs (58.6 KiB) and 3 entries: 0 corrupt blobs removed, "
                           "0 entries dropped, 0 damaged paths repaired\n")  # fmt: skip
    blob = next(p for p in (cache / "blobs").rglob("*") if p.is_file())
    blob.unlink()
    blob.mkdir()
    done = command("verify", cache)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.endswith("0 corrupt blobs removed, 1 entries dropped, "
                                "1 damaged paths repaired\n"), done.stdout  # fmt: skip
    assert command("verify", cache).returncode == 0


def test_verify_repairs_a_cache_links_leave_alone(tmp_path: Path) -> None:
    """tmp a symbolic link: links (and stats) do not use the cache; verify removes the link,
    never what it leads to (exit 1: damage found and repaired), and the cache works again."""
    cache = tmp_path / "cache"
    make_cache(cache, tmp_path)
    trap = tmp_path / "trap"
    trap.mkdir()
    (trap / "theirs").write_text("someone's")
    shutil.rmtree(cache / "tmp")
    (cache / "tmp").symlink_to(trap)
    said = (
        "tmp is a symbolic link, not a directory the cache made; caching is off until it is removed"
    )
    done = command("stats", cache)
    assert done.returncode == 4, done.stdout + done.stderr
    assert done.stderr == f"cached-dist: error: cannot use the cache at {cache}: {said}\n"
    done = command("verify", cache)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == f"cached-dist: warning: {said}\n"
    assert (
        done.stdout.startswith("checked 3 blobs") and ", 1 damaged paths repaired\n" in done.stdout
    )
    assert not (cache / "tmp").is_symlink() and os.listdir(trap) == ["theirs"]
    assert Store(cache).usable and command("verify", cache).returncode == 0


@pytest.mark.parametrize("what", ["a directory", "not a database"])
def test_verify_repairs_an_index_that_is_no_database(tmp_path: Path, what: str) -> None:
    """index/cache.db a directory, or a file of garbage: verify moves it aside, says so in one
    warning, exits 1 (damage found and repaired); the next verify exits 0, and the cache
    stores and serves again (its entries went with the database, the authority on them:
    misses)."""
    cache = tmp_path / "cache"
    make_cache(cache, tmp_path)
    db = cache / "index" / "cache.db"
    for extra in ("", "-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    if what == "a directory":
        db.mkdir()
        (db / "inside").write_text("not a database")
    else:
        db.write_bytes(b"not a database at all " * 200)
    done = command("verify", cache)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr == ("cached-dist: warning: index database was unreadable; moved it aside "
                           "and started an empty one\n")  # fmt: skip
    assert done.stdout.startswith("checked 3 blobs") and done.stdout.endswith(
        ", 1 damaged paths repaired\n"), done.stdout  # fmt: skip
    assert db.is_file()
    again = command("verify", cache)
    assert again.returncode == 0 and again.stderr == "", again.stdout + again.stderr
    s = Store(cache)
    data = content("after the repair", 5000)
    assert s.put("beef", {"obj": write(tmp_path / "after", data)}, duration=1.0, toolchain="t",
                 key_version=1)  # fmt: skip
    m = s.get("beef")
    assert m is not None and s.materialize(m, {"obj": str(tmp_path / "out")})
    assert (tmp_path / "out").read_bytes() == data
    s.close()
