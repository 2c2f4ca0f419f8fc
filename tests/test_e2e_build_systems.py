"""The guide's build-system recipes, run exactly as docs/guide.md prints them.

Each ```` ```sh recipe:NAME ```` block of the guide is run with bash in a copy of
tests/programs/tally (a C++ program with a C static library and a C++ shared library), with
real cmake, ninja, make and meson. The program must run; then a source of each library is
touched and the recipe's ``export`` lines and last command (its build step) run again: both
links must run again and compile no backend job.

The test adds only environment: the cache directory (CACHED_DIST_DIR, as the guide suggests),
and, through clang's CCC_OVERRIDE_OPTIONS, ``-Wl,--thinlto-remote-compiler=`` naming a wrapper
that counts backend compilations.
"""

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
         "make": ("make",), "meson": ("meson", "ninja")}  # fmt: skip
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
    """The recipe's ``export`` lines and its last command (continuation lines joined)."""
    commands = [c.strip() for c in recipe.replace("\\\n", " ").splitlines() if c.strip()]
    return "\n".join([*(c for c in commands if c.startswith("export ")), commands[-1]])


def test_the_guide_has_one_recipe_per_build_system() -> None:
    found = recipes()
    assert set(found) == set(TOOLS)
    for body in found.values():
        assert '"$(cached-dist flags)"' in body


def test_rebuild_script_is_the_exports_and_the_build_step() -> None:
    recipe = 'export CC=c\ncmake -S . \\\n    -DX="$(f)"\ncmake --build build\n'
    assert rebuild_script(recipe) == "export CC=c\ncmake --build build"


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
    missing = [t for t in TOOLS[name] if shutil.which(t, path=_path()) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (run scripts/setup)")
    recipe = recipes()[name]
    project = tmp_path / "tally"
    shutil.copytree(PROGRAMS / "tally", project)
    wrapper, counter = _counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k not in ISOLATE}
    env |= {"PATH": _path(), "CACHED_DIST_DIR": str(cache),
            "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
            "CCC_OVERRIDE_OPTIONS": f"+-Wl,--thinlto-remote-compiler={wrapper}"}  # fmt: skip

    output = _bash(recipe, project, env)
    program = next(p for p in (project / "build" / "tally", project / "tally") if p.exists())
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
