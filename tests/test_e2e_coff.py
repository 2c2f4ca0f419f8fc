"""Windows-style links: lld-link (COFF) through cached-dist, with real clang-22/lld-link-22.

lld-link's job files differ from ld.lld's in what a distributor meets: members of a regular
``.lib`` are named ``calc.libops.obj3016.2.18AC.o`` (archive, member and offset run together,
then a per-link suffix), modules are ``.obj`` files, the target is
``x86_64-pc-windows-msvc19.33.0``, and clang writes the time of each compile into a COFF
object. The programs are freestanding and the executables do not run on Linux: each link
is checked by its bytes (``/brepro``) against a link of the same inputs without the cache.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cached_dist.serve import CLIENT

from .coff import CLANG_CL, LLD_LINK, CoffProject, build_coff, summary
from .dask_cluster import cluster, requires_dask
from .test_e2e_serve import Server
from .toolchain import (
    CLANG,
    LLVM_BIN,
    PROGRAMS,
    cached_dist_exe,
    compilations,
    counting_compiler,
    requires_toolchain,
    run,
    stats,
)

pytestmark = [requires_toolchain, pytest.mark.e2e,
              pytest.mark.skipif(not LLD_LINK.exists(), reason="lld-link-22 not installed")]  # fmt: skip

VERIFY = "--verify-hits=1"
SERIAL = Path(__file__).parent / "serial_distributor.py"


def logged(log: Path) -> list[dict[str, object]]:
    """The --stats-log lines of the links so far."""
    return [json.loads(line) for line in log.read_text().splitlines()]


def uncached(project: CoffProject, out: str = "plain.exe") -> bytes:
    """The executable a link without the cache gives (every job compiled)."""
    done = project.link(out, distributor_args=["--disable"])
    assert done.returncode == 0, done.stderr
    return project.image(out)


CASES = [
    ("wincalc", "none", "clang-cl"),
    ("wincalc", "regular", "clang-cl"),
    ("wincalc", "thin", "clang-cl"),
    ("winshapes", "regular", "clang"),
    ("winshapes", "thin", "clang"),
]


@pytest.mark.parametrize(("name", "archive", "style"), CASES)
def test_relink_is_all_hits_verified_and_byte_identical(
    tmp_path: Path, name: str, archive: str, style: str
) -> None:
    project = build_coff(name, tmp_path / "p", archive, style)  # type: ignore[arg-type]
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    args = [f"--cache-dir={cache}"]
    first = project.link("first.exe", remote_compiler=wrapper, distributor_args=args)
    assert first.returncode == 0, first.stderr
    jobs, hits, compiled = summary(first.stderr)
    assert jobs == (5 if name == "wincalc" else 4) and (hits, compiled) == (0, jobs)
    assert compilations(counter) == jobs
    # Every hit compiled again beside the cached object: equal but for the compile time
    second = project.link("second.exe", remote_compiler=wrapper, distributor_args=[*args, VERIFY])
    assert second.returncode == 0, second.stderr
    assert f"{jobs} jobs: {jobs} hits, 0 compiled, {jobs} verified (0 mismatches)" in second.stderr
    assert compilations(counter) == 2 * jobs
    third = project.link("third.exe", remote_compiler=wrapper, distributor_args=args)
    assert third.returncode == 0, third.stderr
    assert summary(third.stderr) == (jobs, jobs, 0) and compilations(counter) == 2 * jobs
    plain = uncached(project)
    assert {project.image(out) for out in ("first.exe", "second.exe", "third.exe")} == {plain}
    s = stats(cache)
    assert s.get("shards_not_canonical", 0) == 0 and s.get("hit_mismatches", 0) == 0


def _poisoning(tmp_path: Path) -> Path:
    """A backend compiler that, with POISON=stamp, writes another compile time into the
    object's COFF header (bytes 4-7), and with POISON=byte appends a byte to it."""
    script = tmp_path / "poisoning-clang"
    script.write_text(
        f"#!/bin/sh\n'{CLANG}' \"$@\" || exit $?\n"
        'for a; do case $prev in -o) out=$a;; esac; prev=$a; done\n'
        'case "$POISON" in\n'
        "stamp) printf '\\001\\002\\003\\004' | dd of=\"$out\" bs=1 seek=4 conv=notrunc "
        "2>/dev/null;;\n"
        'byte) printf X >> "$out";;\n'
        "esac\n"
    )  # fmt: skip
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(("poison", "mismatches"), [("stamp", 0), ("byte", 5)])
def test_verify_hits_ignores_only_the_compile_time_of_a_coff_object(
    tmp_path: Path, poison: str, mismatches: int
) -> None:
    """clang writes the time of the compile into a COFF object (``-mno-incremental-linker-
    compatible`` would write 0; LLD does not pass it): objects that differ there alone are
    the same object to --verify-hits, any other difference is a mismatch."""
    project = build_coff("wincalc", tmp_path / "p")
    compiler = _poisoning(tmp_path)
    cache = tmp_path / "cache"
    env = {**os.environ, "POISON": poison}
    done = project.link("bad.exe", env=env, remote_compiler=compiler,
                        distributor_args=[f"--cache-dir={cache}"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    log = tmp_path / "links.jsonl"
    done = project.link("good.exe", remote_compiler=compiler,
                        distributor_args=[f"--cache-dir={cache}", VERIFY, f"--stats-log={log}"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"5 hits, 0 compiled, 5 verified ({mismatches} mismatches)" in done.stderr
    (line,) = logged(log)
    assert (line["hits"], line["verified"], line["mismatches"]) == (5, 5, mismatches)
    assert done.stderr.count("HIT MISMATCH") == mismatches
    assert stats(cache).get("hit_mismatches", 0) == mismatches
    assert project.image("good.exe") == uncached(project)


def test_clang_cl_as_the_backend_compiler_is_another_key(tmp_path: Path) -> None:
    """clang-cl is clang by another name (a symbolic link here) that reads the jobs' options
    otherwise (LLVM issue 220379: it ignores -ffunction-sections and -fdata-sections), so
    the objects differ: after a link whose jobs clang compiled, the same link with
    /thinlto-remote-compiler:clang-cl must miss every job."""
    assert CLANG_CL.resolve() == CLANG.resolve()
    project = build_coff("wincalc", tmp_path / "p")
    cache = tmp_path / "cache"
    args = [f"--cache-dir={cache}"]
    done = project.link("by-clang.exe", remote_compiler=CLANG, distributor_args=args)
    assert done.returncode == 0 and summary(done.stderr) == (5, 0, 5), done.stderr
    done = project.link("by-clang-cl.exe", remote_compiler=CLANG_CL, distributor_args=args)
    assert done.returncode == 0 and summary(done.stderr) == (5, 0, 5), done.stderr
    done = project.link("again.exe", remote_compiler=CLANG_CL, distributor_args=[*args, VERIFY])
    assert done.returncode == 0, done.stderr
    assert "5 hits, 0 compiled, 5 verified (0 mismatches)" in done.stderr
    plain = project.link("plain-cl.exe", remote_compiler=CLANG_CL, distributor_args=["--disable"])
    assert plain.returncode == 0, plain.stderr
    by_cl = project.image("plain-cl.exe")
    assert project.image("by-clang-cl.exe") == project.image("again.exe") == by_cl
    assert project.image("by-clang.exe") != by_cl  # what a hit of clang's objects would give


def test_an_inner_distributor_compiles_the_misses(tmp_path: Path) -> None:
    project = build_coff("wincalc", tmp_path / "p", "regular")
    cache = tmp_path / "cache"
    marker, log = tmp_path / "inner.log", tmp_path / "links.jsonl"
    args = [f"--cache-dir={cache}", f"--stats-log={log}", "--", sys.executable, str(SERIAL),
            str(marker)]  # fmt: skip
    first = project.link("first.exe", distributor_args=args)
    assert first.returncode == 0, first.stderr
    assert summary(first.stderr) == (5, 0, 5) and marker.read_text() == "5\n"
    second = project.link("second.exe", distributor_args=args)
    assert second.returncode == 0 and summary(second.stderr) == (5, 5, 0), second.stderr
    assert marker.read_text() == "5\n"  # the inner distributor was not run again
    assert [(ln["runner"], ln["compiled"], ln["hits"], ln["output"]) for ln in logged(log)] == [
        ("inner", 5, 0, "first.exe"), ("inner", 0, 5, "second.exe")]  # fmt: skip
    assert project.image("first.exe") == project.image("second.exe") == uncached(project)


@pytest.mark.skipif(not os.access(CLIENT, os.X_OK), reason="the client is not built")
def test_the_warm_server_serves_a_full_hit(tmp_path: Path) -> None:
    project = build_coff("winshapes", tmp_path / "p", "regular", "clang")
    cache = tmp_path / "cache"
    server = Server(tmp_path)
    try:
        args = [cached_dist_exe(), f"--cache-dir={cache}"]
        first = project.link("first.exe", env=server.env, distributor=str(CLIENT),
                             distributor_args=args)  # fmt: skip
        assert first.returncode == 0 and summary(first.stderr) == (4, 0, 4), first.stderr
        assert server.served() == 0
        second = project.link("second.exe", env=server.env, distributor=str(CLIENT),
                              distributor_args=args)  # fmt: skip
        assert second.returncode == 0 and summary(second.stderr) == (4, 4, 0), second.stderr
        assert server.served() == 1
    finally:
        server.stop()
    assert project.image("first.exe") == project.image("second.exe") == uncached(project)


@requires_dask
def test_misses_compile_on_a_dask_worker_that_cannot_see_the_build(tmp_path: Path) -> None:
    hidden = tmp_path / "build"
    project = build_coff("wincalc", hidden / "p", "regular")
    cache = tmp_path / "cache"
    logs = tmp_path / "logs"
    logs.mkdir()
    with cluster(logs, 1, hide=[hidden]) as c:
        log = tmp_path / "links.jsonl"
        args = [f"--dask-scheduler={c.address}", f"--cache-dir={cache}", f"--stats-log={log}"]
        first = project.link("first.exe", distributor_args=args)
        assert first.returncode == 0, first.stderr
        assert "5 jobs: 0 hits, 5 compiled (5 remotely)," in first.stderr
        (line,) = logged(log)
        assert (line["runner"], line["compiled"], line["compiled_remotely"]) == ("dask", 5, 5)
        second = project.link("second.exe", distributor_args=args)
        assert second.returncode == 0 and summary(second.stderr) == (5, 5, 0), second.stderr
    assert project.image("first.exe") == project.image("second.exe") == uncached(project)


def test_lld_s_own_cache_in_front_serves_a_relink_without_the_distributor(
    tmp_path: Path,
) -> None:
    """/lldltocache: with a distributor (LLD 22): LLD serves its own hits and runs
    cached-dist only for its misses, as ld.lld's --thinlto-cache-dir does."""
    project = build_coff("wincalc", tmp_path / "p", "regular")
    cache = tmp_path / "cache"
    lld_cache = f"/lldltocache:{tmp_path / 'lld-cache'}"
    args = [f"--cache-dir={cache}"]
    first = project.link("first.exe", distributor_args=args, extra=[lld_cache])
    assert first.returncode == 0 and summary(first.stderr) == (5, 0, 5), first.stderr
    second = project.link("second.exe", distributor_args=args, extra=[lld_cache])
    assert second.returncode == 0 and "cached-dist" not in second.stderr, second.stderr
    assert project.image("first.exe") == project.image("second.exe") == uncached(project)


GUIDE = Path(__file__).parent.parent / "docs" / "guide.md"
RECIPE = re.compile(r"^```sh windows-recipe:(\S+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
TOOLCHAIN = re.compile(r"^```cmake file:(\S+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None,
                    reason="cmake and ninja not installed (run scripts/setup)")  # fmt: skip
def test_the_guides_cmake_recipe_for_clang_cl_and_lld_link(tmp_path: Path) -> None:
    """docs/guide.md's recipe, as printed, on tests/programs/wincalc (its CMakeLists.txt
    links the program freestanding), with the guide's toolchain file. The test adds only
    what having no Windows SDK here needs (no default libraries, try-compiles of static
    libraries) to that file, and the cache directory to the environment. Then a source of
    the library is touched and the build step run again: the relink compiles nothing and
    gives the same executable as a build without the cache."""
    (recipe,) = [body for name, body in RECIPE.findall(GUIDE.read_text())
                 if name == "cmake-clang-cl"]  # fmt: skip
    files = dict(TOOLCHAIN.findall(GUIDE.read_text()))
    project = tmp_path / "wincalc"
    shutil.copytree(PROGRAMS / "wincalc", project)
    for name, text in files.items():
        (project / name).write_text(
            text + 'set(CMAKE_C_STANDARD_LIBRARIES "" CACHE STRING "")\n'
            "set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)\n"
        )  # fmt: skip
    here = os.path.dirname(cached_dist_exe())
    log = tmp_path / "links.jsonl"  # CMake's vs_link_exe keeps the linker's output to itself
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX", "CFLAGS", "LDFLAGS")}
    env |= {"PATH": os.pathsep.join([here, "/usr/local/bin", "/usr/bin", "/bin"]),
            "CACHED_DIST_DIR": str(tmp_path / "cache"), "CACHED_DIST_STATS_LOG": str(log)}  # fmt: skip

    def bash(script: str) -> list[tuple[int, int, int]]:
        """Runs ``script``; (jobs, hits, compiled) of each link it made through cached-dist."""
        before = log.read_text().splitlines() if log.exists() else []
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=project, env=env,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        links = [json.loads(line) for line in log.read_text().splitlines()[len(before) :]]
        return [(ln["jobs"], ln["hits"], ln["compiled"]) for ln in links]

    assert bash(recipe) == [(5, 0, 5)]
    built = (project / "build" / "wincalc.exe").read_bytes()
    (project / "strutil.c").touch()
    lines = [c.strip() for c in recipe.replace("\\\n", " ").splitlines() if c.strip()]
    assert bash("\n".join([*[c for c in lines if c.startswith("flags=")], lines[-1]])) == [
        (5, 5, 0)
    ]
    assert (project / "build" / "wincalc.exe").read_bytes() == built
    # The same build without the cache
    shutil.rmtree(project / "build")
    assert bash(recipe.replace("flags --lld-link", "flags --lld-link --disable")) == [(5, 0, 5)]
    assert (project / "build" / "wincalc.exe").read_bytes() == built


def test_flags_for_lld_link_link_a_program(tmp_path: Path) -> None:
    """What `cached-dist flags --lld-link` prints, given to lld-link as they are, and to
    clang-cl after its /link."""
    project = build_coff("wincalc", tmp_path / "p", "regular")
    done = run([cached_dist_exe(), "flags", "--lld-link", "--cc", str(CLANG_CL),
                f"--cache-dir={tmp_path / 'cache'}"], tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    flags = shlex.split(done.stdout)
    for out in ("first.exe", "second.exe"):
        linked = run([LLD_LINK, "/brepro", "/subsystem:console", "/entry:main", "/nodefaultlib",
                      *project.link_inputs, f"/out:{out}", *flags], project.dir)  # fmt: skip
        assert linked.returncode == 0, linked.stderr
    assert summary(linked.stderr) == (5, 5, 0)
    assert f"/thinlto-remote-compiler:{LLVM_BIN / 'clang'}" in flags
    # clang-cl linking, with the flags after its /link
    linked = run([CLANG_CL, "-fuse-ld=lld", "/Feby-clang-cl.exe", *project.link_inputs, "/link",
                  "/nodefaultlib", "/entry:main", "/subsystem:console", "/brepro", *flags],
                 project.dir)  # fmt: skip
    assert linked.returncode == 0 and summary(linked.stderr) == (5, 5, 0), linked.stderr
    images = {project.image(out) for out in ("first.exe", "second.exe", "by-clang-cl.exe")}
    assert images == {uncached(project)}
