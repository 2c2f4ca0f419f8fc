"""--hard-link on a real link: hits are served as hard links to the cache's blobs."""

import os
from pathlib import Path

import pytest

from .toolchain import build, cached_dist_exe, requires_toolchain, run

pytestmark = [requires_toolchain, pytest.mark.e2e]


def test_hard_linked_hits_give_the_same_binary_and_leave_the_cache_intact(
    tmp_path: Path,
) -> None:
    project = build("shapes", tmp_path / "p", "regular")
    cache = tmp_path / "cache"
    # --hard-link stores blobs plain (a compressed one is not the output's bytes: copied).
    first = project.link("first", distributor_args=[f"--cache-dir={cache}", "--hard-link"])
    assert first.returncode == 0, first.stderr
    blobs = {p.stat().st_ino: p for p in (cache / "blobs").rglob("*") if p.is_file()}
    assert blobs and not any(p.suffix == ".zst" for p in blobs.values())  # the default is 1
    # A wrapper sees each output the moment cached-dist has served it, before LLD removes it.
    seen = tmp_path / "seen"
    wrapper = tmp_path / "serve-and-look"
    wrapper.write_text(
        f"#!/bin/sh\n'{cached_dist_exe()}' \"$@\" || exit $?\n"
        f'for job in "$@"; do :; done\n'
        f'grep -o \'[^"]*native.o"\' "$job" | tr -d \'"\' | sort -u | '
        f"while read -r o; do stat -c '%i %h' \"$o\"; done > '{seen}'\n"
    )
    wrapper.chmod(0o755)
    second = project.link("second", distributor=str(wrapper),
                          distributor_args=[f"--cache-dir={cache}", "--hard-link"])  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert "4 jobs: 4 hits" in second.stderr
    served = [line.split() for line in seen.read_text().splitlines()]
    assert len(served) == 4
    assert all(int(ino) in blobs and int(links) >= 2 for ino, links in served), served
    assert (project.dir / "second").read_bytes() == (project.dir / "first").read_bytes()
    assert project.run_program("second") == project.expected_output
    assert all(p.stat().st_nlink == 1 for p in blobs.values())  # LLD removed its outputs
    verify = run([cached_dist_exe(), "verify", f"--cache-dir={cache}"], tmp_path)
    assert verify.returncode == 0 and " 0 corrupt" in verify.stdout + verify.stderr, verify
    assert os.path.exists(cache / "index")
