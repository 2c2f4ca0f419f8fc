"""End to end: canonical shards make regular static archives, other directories and absolute
paths hit, with every hit recompiled and compared (--verify-hits=1.0)."""

import shutil
from pathlib import Path

import pytest

from .toolchain import (
    Project,
    build,
    compilations,
    counting_compiler,
    requires_toolchain,
    run,
    stats,
)

pytestmark = [requires_toolchain, pytest.mark.e2e]
VERIFY = "--verify-hits=1.0"


def link(project: Project, cache: Path, wrapper: Path, *extra: str, out: str = "app",
         cwd: Path | None = None) -> str:  # fmt: skip
    done = project.link(out, cwd=cwd, remote_compiler=wrapper,
                        distributor_args=[f"--cache-dir={cache}", "--verbose", *extra])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "MISMATCH" not in done.stderr, done.stderr
    return done.stderr


@pytest.mark.parametrize("program", ["calc", "shapes"])
def test_regular_archive_relinks_with_zero_compilations(tmp_path: Path, program: str) -> None:
    project = build(program, tmp_path / "p", "regular")
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    link(project, cache, wrapper, out="first")
    jobs = compilations(counter)
    err = link(project, cache, wrapper, out="second")
    assert compilations(counter) == jobs, err
    assert f"{jobs} hits, 0 compiled" in err
    assert (project.dir / "first").read_bytes() == (project.dir / "second").read_bytes()
    assert project.run_program("second") == project.expected_output
    err = link(project, cache, wrapper, VERIFY, out="third")
    assert compilations(counter) == 2 * jobs  # the verification recompiled every hit
    assert f"{jobs} hits, 0 compiled, {jobs} verified (0 mismatches), " in err
    assert (project.dir / "first").read_bytes() == (project.dir / "third").read_bytes()
    s = stats(cache)
    assert s["hits_verified"] == jobs and s.get("hit_mismatches", 0) == 0
    assert s.get("shards_not_canonical", 0) == 0


def test_copied_directory_and_absolute_paths_hit(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p", "regular")
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    link(project, cache, wrapper)
    copy = tmp_path / "copy"
    shutil.copytree(project.dir, copy)
    err = link(project, cache, wrapper, cwd=copy)
    assert "5 hits, 0 compiled" in err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    absolute = Project(project.name, project.dir, [str(project.dir / i) for i in project.link_inputs],
                       project.cxx)  # fmt: skip
    err = link(absolute, cache, wrapper, cwd=elsewhere)
    assert "5 hits, 0 compiled" in err
    assert compilations(counter) == 5
    err = link(absolute, cache, wrapper, VERIFY, cwd=elsewhere, out="verified")
    assert compilations(counter) == 10 and "MISMATCH" not in err
    assert absolute.run_program(cwd=elsewhere) == project.expected_output


def test_thin_archive_relink_decodes_no_shard(tmp_path: Path) -> None:
    project = build("shapes", tmp_path / "p", "thin")
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    first = link(project, cache, wrapper)
    assert "shards: 4 decoded, 0 memoized" in first
    second = link(project, cache, wrapper)
    assert "shards: 0 decoded, 4 memoized" in second and "4 hits, 0 compiled" in second
    assert compilations(counter) == 4


def test_a_semantic_change_in_the_archive_misses(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p", "regular")
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    link(project, cache, wrapper)
    # strutil.o's checksum no longer used by main: a whole-program change every shard sees
    main = project.dir / "main.c"
    main.write_text(main.read_text().replace("checksum(joined)", "4050009625u"))
    done = run([str(Path(project.link_command()[0])), "-flto=thin", "-O2", "-c", "main.c", "-o",
                "main.o"], project.dir)  # fmt: skip
    assert done.returncode == 0, done.stderr
    err = link(project, cache, wrapper, VERIFY)
    assert compilations(counter) > 5, err
    assert project.run_program() == project.expected_output


def test_verify_hits_catches_a_poisoned_cache(tmp_path: Path) -> None:
    """A compiler that wrote wrong objects once: the verification finds and replaces them."""
    project = build("calc", tmp_path / "p")
    wrapper, _ = counting_compiler(tmp_path)
    poisoned = tmp_path / "poisoning-clang"
    poisoned.write_text(
        f"#!/bin/sh\n'{wrapper}' \"$@\" || exit $?\n"
        'if [ -n "$POISON" ]; then for a; do case $prev in -o) printf X >> "$a";; esac; '
        "prev=$a; done; fi\n"
    )
    poisoned.chmod(0o755)
    cache = tmp_path / "cache"
    env = {"PATH": "/usr/bin:/bin", "POISON": "1"}
    done = project.link("bad", env=env, remote_compiler=poisoned,
                        distributor_args=[f"--cache-dir={cache}"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = project.link("good", remote_compiler=poisoned,
                        distributor_args=[f"--cache-dir={cache}", VERIFY])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("HIT MISMATCH") == 5
    assert stats(cache)["hit_mismatches"] == 5
    clean = project.link("clean", distributor_args=["--disable"])
    assert clean.returncode == 0
    assert (project.dir / "good").read_bytes() == (project.dir / "clean").read_bytes()
    done = project.link("again", remote_compiler=poisoned,
                        distributor_args=[f"--cache-dir={cache}"])  # fmt: skip
    assert "5 hits" not in done.stderr  # the poisoned entries were dropped
