"""The guide's build-system recipes, run exactly as docs/guide.md prints them.

Each ```` ```sh recipe:NAME ```` block of the guide is run with bash in a copy of
tests/programs/tally (a C++ program with a C static library and a C++ shared library), with
real cmake, ninja, make, meson, autoconf, automake and libtool (the autotools recipe runs on
tally's sources with tests/programs/autotally's configure.ac and Makefile.am). The program
must run; then a source of each library is touched and the recipe's ``export`` lines, its
``flags=`` and ``launcher=`` lines and its last command (its build step) run again: both
links must run again and compile no backend job. Each recipe must also stop at
``cached-dist flags`` when the compiler cannot do DTLTO (Debian's clang-14), before it
configures anything.

The test adds only environment: the cache directory (CACHED_DIST_DIR, as the guide suggests),
and, through clang's CCC_OVERRIDE_OPTIONS, ``-Wl,--thinlto-remote-compiler=`` naming a wrapper
that counts backend compilations.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .toolchain import CLANG, PROGRAMS, cached_dist_exe, compilations, requires_toolchain, stats

pytestmark = [requires_toolchain, pytest.mark.e2e]

GUIDE = Path(__file__).parent.parent / "docs" / "guide.md"
RECIPE = re.compile(r"^```sh recipe:(\S+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
TOOLS = {"cmake-ninja": ("cmake", "ninja"), "cmake-make": ("cmake", "make"),
         "make": ("make",), "meson": ("meson", "ninja"),
         "autotools": ("autoreconf", "libtoolize", "make")}  # fmt: skip
SNIPPET = re.compile(r"^```cmake\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# Backend jobs of each link: libfixed.so (fixed.cpp), and tally (main.cpp, report.cpp and the
# static library's sum.c, extremes.c).
LINKS = [1, 4]
SUMMARY = re.compile(r"^cached-dist: (\d+) jobs: (\d+) hits.*?, (\d+) compiled", re.MULTILINE)
# What the build must not inherit from whoever runs the tests (make test sets MAKEFLAGS).
ISOLATE = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "MAKEFLAGS", "MFLAGS",
           "MAKELEVEL", "CMAKE_GENERATOR", "CACHED_DIST_CONFIG")  # fmt: skip


def recipes() -> dict[str, str]:
    return {name: body for name, body in RECIPE.findall(GUIDE.read_text())}


def rebuild_script(recipe: str) -> str:
    """The recipe's ``export`` lines, its ``flags=`` and ``launcher=`` lines and its last
    command (continuation lines joined)."""
    commands = [c.strip() for c in recipe.replace("\\\n", " ").splitlines() if c.strip()]
    kept = [c for c in commands if c.startswith(("export ", "flags=", "launcher="))]
    return "\n".join([*kept, commands[-1]])


def test_the_guide_has_one_recipe_per_build_system() -> None:
    found = recipes()
    assert set(found) == set(TOOLS)
    for name, body in found.items():
        # The flags are taken first, and a failure stops the recipe there.
        flags = "--libtool" if name == "autotools" else ""
        assert f'flags="$(cached-dist flags{" " + flags if flags else ""})" &&\n' in body
        # Then the compiler launcher's command (docs/guide.md, "Sharing a cache").
        form = "=cmake" if name.startswith("cmake") else ""
        assert f'\nlauncher="$(cached-dist flags --launcher{form})" &&\n' in body
        assert body.count("$(cached-dist flags") == 2


def test_rebuild_script_is_the_exports_the_flags_and_the_build_step() -> None:
    recipe = ('export CC=c\nflags="$(f)" &&\nlauncher="$(g)" &&\ncmake -S . \\\n'
              '    -DX="$flags" &&\ncmake --build build\n')  # fmt: skip
    assert rebuild_script(recipe) == ('export CC=c\nflags="$(f)" &&\nlauncher="$(g)" &&\n'
                                      "cmake --build build")  # fmt: skip


def _project(name: str, tmp_path: Path) -> Path:
    """A copy of tally to build with recipe ``name`` (with autotally's files for autotools,
    its configure script made by autoreconf as a release tarball would ship it)."""
    project = tmp_path / "tally"
    shutil.copytree(PROGRAMS / "tally", project)
    if name == "autotools":
        (project / "Makefile").unlink()
        for path in (PROGRAMS / "autotally").iterdir():
            shutil.copy(path, project)
        done = subprocess.run(["autoreconf", "-fi"], cwd=project, capture_output=True,
                              text=True, env={**os.environ, "PATH": _path()})  # fmt: skip
        assert done.returncode == 0, done.stderr
    return project


def _env(tmp_path: Path, wrapper: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ISOLATE}
    env |= {"PATH": _path(), "CACHED_DIST_DIR": str(tmp_path / "cache"),
            "XDG_CONFIG_HOME": str(tmp_path / "cfg")}  # fmt: skip
    if wrapper is not None:
        env["CCC_OVERRIDE_OPTIONS"] = f"+-Wl,--thinlto-remote-compiler={wrapper}"
    return env


def _missing(name: str) -> None:
    missing = [t for t in TOOLS[name] if shutil.which(t, path=_path()) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (run scripts/setup)")


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_recipe_stops_at_a_compiler_that_cannot_do_dtlto(tmp_path: Path, name: str) -> None:
    """Run with Debian's clang-14 in place of clang-22: the one error line of `cached-dist
    flags`, a non-zero status, and nothing configured or built."""
    _missing(name)
    if shutil.which("clang-14") is None:
        pytest.skip("clang-14 not installed (run scripts/setup)")
    recipe = recipes()[name].replace("clang-22", "clang-14").replace("clang++-22", "clang++-14")
    project = _project(name, tmp_path)
    before = set(project.iterdir())
    done = subprocess.run(["bash", "-c", recipe], cwd=project, env=_env(tmp_path),
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0, done.stdout + done.stderr
    assert done.stderr.startswith("cached-dist: error: clang-14 ") and done.stderr.count("\n") == 1
    assert "cannot link through a distributor: DTLTO needs clang 21 or later" in done.stderr
    assert set(project.iterdir()) == before  # no build directory, no objects, no Makefile


def _counting_compiler(where: Path) -> tuple[Path, Path]:
    """Counts backend compilations; drops the override so the jobs' own output stays clean."""
    counter = where / "compilations.log"
    script = where / "counting-clang"
    script.write_text(f"#!/bin/sh\necho \"$$\" >> '{counter}'\n"
                      f"exec env -u CCC_OVERRIDE_OPTIONS '{CLANG}' \"$@\"\n")  # fmt: skip
    script.chmod(0o755)
    return script, counter


def _bash(script: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_recipe_builds_runs_and_relinks_from_the_cache(tmp_path: Path, name: str) -> None:
    _missing(name)
    recipe = recipes()[name]
    project = _project(name, tmp_path)
    wrapper, counter = _counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    env = _env(tmp_path, wrapper)
    log = tmp_path / "links.jsonl"
    env["CACHED_DIST_STATS_LOG"] = str(log)  # every link of the build comes through

    output = _bash(recipe, project, env)
    program = next(p for p in (project / "build" / "tally", project / "tally") if p.exists())
    outputs = [json.loads(line)["output"] for line in log.read_text().splitlines()]
    assert any(o.endswith("tally") for o in outputs), outputs
    assert any("libfixed.so" in o for o in outputs), outputs
    expected = (PROGRAMS / "tally" / "expected.txt").read_text()
    assert subprocess.run([program], capture_output=True, text=True).stdout == expected
    assert _summaries(output) == [(jobs, 0, jobs) for jobs in LINKS], output
    compiled = compilations(counter)
    assert compiled >= sum(LINKS)  # plus meson's sanity-check links, through cached-dist too
    hits = stats(cache)["hits"]

    built = program.stat().st_mtime_ns
    (project / "sum.c").touch()  # a member of the static library
    (project / "fixed.cpp").touch()  # the shared library's
    output = _bash(rebuild_script(recipe), project, env)
    assert program.stat().st_mtime_ns != built, output  # it did relink
    assert _summaries(output) == [(jobs, jobs, 0) for jobs in LINKS], output
    assert compilations(counter) == compiled  # no backend compilation at all
    assert stats(cache)["hits"] == hits + sum(LINKS)
    assert subprocess.run([program], capture_output=True, text=True).stdout == expected


def _summaries(output: str) -> list[tuple[int, int, int]]:
    """(jobs, hits, compiled) of each link's summary line, smallest link first."""
    return sorted((int(j), int(h), int(c)) for j, h, c in SUMMARY.findall(output))


def _path() -> str:
    """cached-dist and meson from this venv first (as after `pip install`), then the system."""
    here = os.path.dirname(cached_dist_exe())
    venv = os.path.dirname(sys.executable)
    return os.pathsep.join(dict.fromkeys([here, venv, "/usr/local/bin", "/usr/bin", "/bin"]))


def test_the_guides_cmakelists_snippet_stops_cmake_or_links_through_cached_dist(
    tmp_path: Path,
) -> None:
    """The guide's CMakeLists.txt form: with clang-14, `cmake` itself fails on the error of
    `cached-dist flags`; with clang-22 the build links through cached-dist."""
    _missing("cmake-ninja")
    (snippet,) = SNIPPET.findall(GUIDE.read_text())
    project = _project("cmake-ninja", tmp_path)
    lists = project / "CMakeLists.txt"
    lists.write_text(lists.read_text().replace("project(tally C CXX)\n",
                                               "project(tally C CXX)\n" + snippet))  # fmt: skip
    env = _env(tmp_path)
    configure = ["cmake", "-S", ".", "-B", "build", "-G", "Ninja",
                 "-DCMAKE_INTERPROCEDURAL_OPTIMIZATION=ON"]  # fmt: skip
    old = subprocess.run(configure, cwd=project, capture_output=True, text=True,
                         env={**env, "CC": "clang-14", "CXX": "clang++-14"})  # fmt: skip
    assert old.returncode != 0
    assert "cannot link through a distributor: DTLTO needs clang 21" in old.stderr
    shutil.rmtree(project / "build")
    new = {**env, "CC": "clang-22", "CXX": "clang++-22"}
    output = _bash(" ".join(configure) + " && cmake --build build", project, new)
    assert _summaries(output) == [(jobs, 0, jobs) for jobs in LINKS], output


def test_make_flags_on_makes_command_line_would_break_a_sub_makefile(tmp_path: Path) -> None:
    """Why the Make recipe passes LDFLAGS through the environment: on make's command line it
    overrides fixed.mk's ``libfixed.so: LDFLAGS += -shared`` (zstd's lib/Makefile does the
    same), and the library links as a program."""
    _missing("make")
    recipe = recipes()["make"]
    assert 'LDFLAGS="$flags" make\n' in recipe
    broken = recipe.replace('LDFLAGS="$flags" make\n', 'make LDFLAGS="$flags"\n')
    project = _project("make", tmp_path)
    done = subprocess.run(["bash", "-c", broken], cwd=project, env=_env(tmp_path),
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0, done.stdout + done.stderr
    assert "undefined symbol: main" in done.stderr, done.stderr
    assert not (project / "libfixed.so").exists()


def test_the_stats_log_shows_links_that_bypassed_cached_dist(tmp_path: Path) -> None:
    """The autotools recipe without --libtool: libtool drops -fthinlto-distributor= from the
    shared library's link, which then links by in-process ThinLTO and says nothing; the
    stats log (the guide's way to check a build) has no line for it."""
    _missing("autotools")
    recipe = recipes()["autotools"]
    assert "flags --libtool)" in recipe
    project = _project("autotools", tmp_path)
    env = _env(tmp_path)
    log = tmp_path / "links.jsonl"
    env["CACHED_DIST_STATS_LOG"] = str(log)
    _bash(recipe.replace("flags --libtool)", "flags)"), project, env)
    assert (project / ".libs" / "libfixed.so").exists()
    outputs = [json.loads(line)["output"] for line in log.read_text().splitlines()]
    assert ".libs/tally" in outputs, outputs  # the program's link came through (and configure's)
    assert not any("libfixed.so" in o for o in outputs), outputs  # the library's did not
