"""Real links on a cache whose small file system fills up: every link succeeds, and once there is
room the cache hits again, with no step by hand (the store side: tests/store/test_disk_full.py).
"""

from pathlib import Path

import pytest

from .store.helpers import fill, try_mount_tmpfs, umount
from .toolchain import CLANG, build, cached_dist_exe, counting_compiler, requires_toolchain, run

pytestmark = [requires_toolchain, pytest.mark.e2e]

SOURCES = ("eval.c", "lexer.c", "main.c", "ops.c", "strutil.c")


def test_links_on_a_full_disk_heal_when_room_returns(tmp_path: Path) -> None:
    """A 2 MiB tmpfs holds the cache (its limit, 5 GiB, far above the disk). Each round
    changes every module (new keys), fills the disk with another file, links (every put
    fails: the link warns and succeeds), frees the disk, links again (compiled and stored),
    and once more: a full hit, byte for byte the same program. Twelve rounds: the cache's
    own logs, rows and blobs fill the disk too, and what it reclaims keeps it working."""
    mount = tmp_path / "small"
    if not try_mount_tmpfs(mount, "2m"):
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        project = build("calc", tmp_path / "p")
        wrapper, _ = counting_compiler(tmp_path)
        cache = mount / "cache"
        args = [f"--cache-dir={cache}"]
        for n in range(12):
            for source in SOURCES:
                path = project.dir / source
                tag = f"round_{n}_{source[:-2]}"
                path.write_text(path.read_text() + f"\nint __attribute__((used)) {tag} = {n};\n")
                done = run([CLANG, "-flto=thin", "-O2", "-c", source, "-o", source[:-2] + ".o"],
                           project.dir)  # fmt: skip
                assert done.returncode == 0, done.stderr
            filler = fill(mount)
            full = project.link("full", remote_compiler=wrapper, distributor_args=args)
            filler.unlink()
            assert full.returncode == 0, full.stderr
            assert "cached-dist: error:" not in full.stderr, full.stderr
            stored = project.link("stored", remote_compiler=wrapper, distributor_args=args)
            assert stored.returncode == 0, stored.stderr
            hit = project.link("hit", remote_compiler=wrapper, distributor_args=args)
            assert hit.returncode == 0, hit.stderr
            assert "5 jobs: 5 hits, 0 compiled" in hit.stderr, f"round {n}: {hit.stderr}"
            assert (project.dir / "hit").read_bytes() == (project.dir / "stored").read_bytes()
            assert (project.dir / "full").read_bytes() == (project.dir / "stored").read_bytes()
        assert project.run_program("hit") == project.expected_output
        done = run([cached_dist_exe(), "verify", *args], tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        umount(mount)
