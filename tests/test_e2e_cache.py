"""End to end with the cache: real clang-22/ld.lld-22 links, real compilations counted."""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .toolchain import (
    Project,
    build,
    cached_dist_exe,
    compilations,
    counting_compiler,
    requires_toolchain,
    run,
    stats,
)

pytestmark = [requires_toolchain, pytest.mark.e2e]


def cached_link(
    project: Project, cache: Path, wrapper: Path, out: str = "app", cwd: Path | None = None,
    extra_args: tuple[str, ...] = (), opt: str = "-O2",
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    done = project.link(
        out, cwd=cwd, remote_compiler=wrapper, opt=opt,
        distributor_args=[f"--cache-dir={cache}", *extra_args],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize(("program", "archive"), [("calc", "none"), ("shapes", "thin")])
def test_identical_relink_compiles_nothing_and_is_byte_identical(
    tmp_path: Path, program: str, archive: str
) -> None:
    project = build(program, tmp_path / "p", archive)  # type: ignore[arg-type]
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    started = time.monotonic()
    cached_link(project, cache, wrapper, "first")
    first_wall = time.monotonic() - started
    jobs = compilations(counter)
    assert jobs == (5 if program == "calc" else 4)
    done = cached_link(project, cache, wrapper, "second")
    assert compilations(counter) == jobs  # nothing compiled the second time
    assert f"{jobs} jobs: {jobs} hits, 0 compiled" in done.stderr
    assert (project.dir / "first").read_bytes() == (project.dir / "second").read_bytes()
    assert project.run_program("second") == project.expected_output
    uncached = project.link("plain", distributor_args=["--disable"])
    assert uncached.returncode == 0, uncached.stderr
    assert (project.dir / "plain").read_bytes() == (project.dir / "second").read_bytes()
    s = stats(cache)
    assert (s["hits"], s["misses"], s["entries"]) == (jobs, jobs, jobs)
    assert s["time_saved"] > 0
    # The hits replaced the first link's compile batch: part of that link's wall time.
    assert 0 < s["wall_saved"] < first_wall


def test_relink_from_a_copy_of_the_build_directory_compiles_nothing(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    cached_link(project, cache, wrapper)
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(project.dir, copy)
    (copy / "app").unlink()
    done = cached_link(project, cache, wrapper, cwd=copy)
    assert compilations(counter) == 5 and "5 hits, 0 compiled" in done.stderr
    assert project.run_program(cwd=copy) == project.expected_output


def _edit(project: Project, source: str, old: str, new: str) -> None:
    path = project.dir / source
    path.write_text(path.read_text().replace(old, new))
    done = run([project.link_command()[0].replace("clang++", "clang"), "-flto=thin", "-O2", "-c",
                source, "-o", source.rsplit(".", 1)[0] + ".o"], project.dir)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_one_file_edit_recompiles_no_more_than_lld_own_cache(tmp_path: Path) -> None:
    def link(mode: str, project: Project, cache: Path, wrapper: Path) -> None:
        if mode == "cached-dist":
            cached_link(project, cache, wrapper)
            return
        done = project.link(remote_compiler=wrapper, distributor_args=["--disable"],
                            extra=[f"-Wl,--thinlto-cache-dir={cache}"])  # fmt: skip
        assert done.returncode == 0, done.stderr

    counts = {}
    for mode in ("cached-dist", "lld-cache"):
        project = build("calc", tmp_path / mode)
        wrapper, counter = counting_compiler(tmp_path / mode)
        cache = tmp_path / mode / "cache"
        link(mode, project, cache, wrapper)
        cold = compilations(counter)
        _edit(project, "ops.c", "case '*':", "case '%': return b ? a % b : 0;\n    case '*':")
        link(mode, project, cache, wrapper)
        counts[mode] = compilations(counter) - cold
        assert project.run_program() == project.expected_output
    assert 1 <= counts["cached-dist"] <= counts["lld-cache"], counts


def test_optimization_level_change_recompiles_everything(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    cached_link(project, cache, wrapper, opt="-O2")
    cached_link(project, cache, wrapper, opt="-O3")
    assert compilations(counter) == 10
    cached_link(project, cache, wrapper, opt="-O3")
    assert compilations(counter) == 10


def test_four_concurrent_links_compile_each_job_once(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, counter = counting_compiler(tmp_path, sleep=1.0)
    cache = tmp_path / "cache"
    procs = [
        subprocess.Popen(
            project.link_command(
                f"app{i}",
                remote_compiler=wrapper,
                distributor_args=[f"--cache-dir={cache}", "--jobs=2"],
            ),
            cwd=project.dir,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    assert compilations(counter) == 5, errors
    binaries = {(project.dir / f"app{i}").read_bytes() for i in range(4)}
    assert len(binaries) == 1
    assert project.run_program("app0") == project.expected_output


def test_relink_after_sigkill_mid_compile_succeeds_quickly(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, counter = counting_compiler(tmp_path, sleep=3.0)
    cache = tmp_path / "cache"
    link = subprocess.Popen(
        project.link_command(remote_compiler=wrapper,
                             distributor_args=[f"--cache-dir={cache}", "--jobs=2"]),
        cwd=project.dir, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while compilations(counter) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    # This link's cached-dist only (its argv names this test's cache): never another
    # process's, which may be running a test of its own on this machine.
    victims = subprocess.run(["pgrep", "-f", f"cached-dist --cache-dir={cache} "],
                             capture_output=True, text=True).stdout.split()  # fmt: skip
    assert victims, "cached-dist was not running"
    for pid in victims:
        os.kill(int(pid), signal.SIGKILL)
    link.communicate(timeout=60)
    assert link.returncode != 0  # the link lost its distributor
    fast, _ = counting_compiler(tmp_path / "p")
    started = time.monotonic()
    cached_link(project, cache, fast)
    assert time.monotonic() - started < 30
    assert project.run_program() == project.expected_output


def test_flipped_bytes_in_every_stored_file_are_recompiled(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    cached_link(project, cache, wrapper, "first")
    blobs = [p for p in (cache / "blobs").rglob("*") if p.is_file()]
    assert len(blobs) == 5
    for blob in blobs:
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
    cached_link(project, cache, wrapper, "second")
    assert compilations(counter) == 10  # every corrupt entry recompiled
    assert (project.dir / "first").read_bytes() == (project.dir / "second").read_bytes()
    assert project.run_program("second") == project.expected_output
    assert stats(cache)["corruptions"] == 5
    cached_link(project, cache, wrapper, "third")
    assert compilations(counter) == 10  # and stored again, intact


def test_verify_clear_and_trim_commands(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    cached_link(project, cache, wrapper)
    exe = cached_dist_exe()
    done = run([exe, "verify", f"--cache-dir={cache}"], tmp_path)
    assert done.returncode == 0 and "0 corrupt" in done.stdout, done.stdout + done.stderr
    blob = next(p for p in (cache / "blobs").rglob("*") if p.is_file())
    blob.write_bytes(b"rot" + blob.read_bytes()[3:])
    done = run([exe, "verify", f"--cache-dir={cache}"], tmp_path)
    assert done.returncode == 1 and "1 corrupt blobs removed" in done.stdout, done.stdout
    cached_link(project, cache, wrapper)
    assert compilations(counter) == 6
    done = run([exe, "trim", "--max-size=0", f"--cache-dir={cache}"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert stats(cache)["entries"] == 0 or stats(cache)["size"] == 0
    cached_link(project, cache, wrapper)
    assert compilations(counter) == 11
    done = run([exe, "clear", f"--cache-dir={cache}"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert stats(cache)["entries"] == 0
    cached_link(project, cache, wrapper)
    assert compilations(counter) == 16


def test_unusable_cache_directory_warns_and_links(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, counter = counting_compiler(tmp_path)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache should be")
    done = cached_link(project, blocker, wrapper)
    warnings = [ln for ln in done.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1, done.stderr
    assert compilations(counter) == 5
    assert project.run_program() == project.expected_output


def test_stats_without_a_cache_is_a_clear_error(tmp_path: Path) -> None:
    done = run([cached_dist_exe(), "stats", f"--cache-dir={tmp_path / 'none'}"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"cached-dist: error: no cache at {tmp_path / 'none'}"


def test_damaged_index_warns_once_and_links(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    cached_link(project, cache, wrapper, "first")
    db = cache / "index" / "cache.db"
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    db.write_bytes(b"not a database at all" * 1000)
    # Every entry's row file (store/rows.py) still holds it: the database is not opened.
    done = cached_link(project, cache, wrapper, "second")
    assert "warning" not in done.stderr and compilations(counter) == 5, done.stderr
    assert (project.dir / "first").read_bytes() == (project.dir / "second").read_bytes()
    shutil.rmtree(cache / "rows")  # now the database must answer: its damage is found
    done = cached_link(project, cache, wrapper, "third")
    warnings = [ln for ln in done.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and "index database" in warnings[0], done.stderr
    assert compilations(counter) == 10  # everything compiled again, and stored again
    assert (project.dir / "first").read_bytes() == (project.dir / "third").read_bytes()
    cached_link(project, cache, wrapper, "fourth")
    assert compilations(counter) == 10


def test_full_disk_warns_once_and_links(tmp_path: Path) -> None:
    from .store.helpers import try_mount_tmpfs, umount

    mount = tmp_path / "small"
    if not try_mount_tmpfs(mount, "256k"):
        pytest.skip("cannot mount a small tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        project = build("shapes", tmp_path / "p", "thin")  # objects far larger than 256 KiB
        wrapper, counter = counting_compiler(tmp_path)
        done = cached_link(project, mount / "cache", wrapper)
        warnings = [ln for ln in done.stderr.splitlines() if "warning" in ln]
        assert len(warnings) == 1, done.stderr
        assert compilations(counter) == 4
        assert project.run_program() == project.expected_output
    finally:
        umount(mount)


def test_a_targets_pack_heals_after_a_lost_and_a_damaged_blob(tmp_path: Path) -> None:
    """A full hit takes its manifests from the pack the link before it left (store/pack.py);
    one whose blob is gone or damaged is a miss like any other, and the pack is written
    again: the next link is a full hit."""
    from store import Store
    from store.rows import Rows

    project = build("shapes", tmp_path / "p", "regular")
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    cached_link(project, cache, wrapper)
    cached_link(project, cache, wrapper)  # a full hit, which leaves the pack
    rows = Rows(str(cache), Store(cache)._modes)
    assert [k for _, k in rows.files() if k is not None and k.startswith("p:")] != []
    blobs = sorted(p for p in (cache / "blobs").rglob("*") if p.is_file())
    assert len(blobs) == 4
    blobs[0].unlink()
    blobs[1].write_bytes(b"rot" + blobs[1].read_bytes()[3:])
    done = cached_link(project, cache, wrapper)
    assert "4 jobs: 2 hits, 2 compiled" in done.stderr and compilations(counter) == 6
    uncached = project.link("plain", distributor_args=["--disable"])
    assert uncached.returncode == 0, uncached.stderr
    assert (project.dir / "plain").read_bytes() == (project.dir / "app").read_bytes()
    assert project.run_program() == project.expected_output
    done = cached_link(project, cache, wrapper)
    assert "4 jobs: 4 hits, 0 compiled" in done.stderr and compilations(counter) == 6
    assert (project.dir / "plain").read_bytes() == (project.dir / "app").read_bytes()
