"""Two checkouts at different absolute paths share one cache through the guide's recipes.

Each recipe of docs/guide.md (the ```` ```sh recipe:NAME ```` blocks, and the
```` ```sh launcher:NAME ```` blocks of "Sharing a cache") is run with bash, as printed, in
two copies of tests/programs/tally (with autotally's files for autotools) at ``A/tally`` and
``BB/x/tally``, one after the other, with one cache (or with a cache each and one
redis-server): the second builds its program without compiling any backend job, and its
binaries are the first's bytes. Without the launcher the second compiles everything again,
and ``--verbose`` and ``stats`` say why.

As in tests/test_e2e_build_systems.py, the test adds only environment: the cache directory,
a counting compiler for backend jobs (clang's CCC_OVERRIDE_OPTIONS), ccache's directory.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cached_dist import launcher

from .servers import start_redis
from .test_e2e_build_systems import (
    GUIDE,
    ISOLATE,
    LINKS,
    TOOLS,
    _bash,
    _counting_compiler,
    _missing,
    _path,
    _project,
    _summaries,
    rebuild_script,
    recipes,
)
from .toolchain import CLANG, PROGRAMS, cached_dist_exe, compilations, requires_toolchain, stats

pytestmark = [
    requires_toolchain,
    pytest.mark.e2e,
    pytest.mark.skipif(
        not os.access(launcher.LAUNCHER, os.X_OK),
        reason="cached-dist-cc not built (run scripts/setup)",
    ),
]

BLOCK = re.compile(r"^ *```sh launcher:(\S+)\n(.*?)^ *```$", re.MULTILINE | re.DOTALL)
JOBS = sum(LINKS)  # backend jobs of a whole build: libfixed.so's 1, tally's 4
# Where each build system leaves the program and the shared library (libtool: in .libs, the
# top's tally being its wrapper script, which names the build directory).
BINARIES = ("build/tally", "build/libfixed.so", "tally", "libfixed.so", ".libs/tally",
            ".libs/libfixed.so")  # fmt: skip
CHECKOUTS = ("A", "BB/x")
requires_ccache = pytest.mark.skipif(shutil.which("ccache") is None,
                                     reason="ccache not installed (run scripts/setup)")  # fmt: skip
requires_redis = pytest.mark.skipif(shutil.which("redis-server") is None,
                                    reason="redis-server not installed (run scripts/setup)")  # fmt: skip


def launcher_blocks() -> dict[str, str]:
    """The guide's other tested blocks (indented in a list item: the indent is dropped)."""
    found = {}
    for name, body in BLOCK.findall(GUIDE.read_text()):
        lines = body.splitlines()
        indent = min(len(ln) - len(ln.lstrip()) for ln in lines if ln.strip())
        found[name] = "\n".join(ln[indent:] for ln in lines) + "\n"
    return found


class Checkouts:
    """The same project at two absolute paths, built with a counting backend compiler."""

    def __init__(self, tmp_path: Path, name: str = "cmake-ninja", **env: str) -> None:
        self.tops = [_project(name, tmp_path / c) for c in CHECKOUTS]
        wrapper, self.counter = _counting_compiler(tmp_path)
        self.env = {k: v for k, v in os.environ.items() if k not in ISOLATE}
        self.env |= {"PATH": _path(), "CACHED_DIST_DIR": str(tmp_path / "cache"),
                     "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
                     "CCACHE_DIR": str(tmp_path / "ccache"),
                     "CCC_OVERRIDE_OPTIONS": f"+-Wl,--thinlto-remote-compiler={wrapper}",
                     **env}  # fmt: skip

    def build(self, script: str, which: int, **env: str) -> tuple[str, int]:
        """Runs ``script`` in checkout ``which``: its output, and backend jobs it compiled."""
        before = compilations(self.counter)
        output = _bash(script, self.tops[which], {**self.env, **env})
        return output, compilations(self.counter) - before

    def program(self, which: int) -> Path:
        top = self.tops[which]
        return next(p for p in (top / "build" / "tally", top / "tally") if p.exists())

    def same_binaries(self) -> None:
        compared = []
        for name in BINARIES:
            first, second = (top / name for top in self.tops)
            if first.exists() and first.read_bytes()[:4] == b"\x7fELF":
                assert first.read_bytes() == second.read_bytes(), name
                compared.append(name)
        assert len(compared) == 2, compared  # the program and the shared library
        expected = (PROGRAMS / "tally" / "expected.txt").read_text()
        done = subprocess.run([self.program(1)], capture_output=True, text=True)
        assert done.stdout == expected


def test_every_recipe_compiles_through_the_launcher() -> None:
    for name, body in recipes().items():
        assert "$(cached-dist flags --launcher" in body, name
    assert set(launcher_blocks()) == {"ccache", "ccache-base-dir"}


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_the_second_checkout_compiles_nothing(tmp_path: Path, name: str) -> None:
    _missing(name)
    recipe = recipes()[name]
    co = Checkouts(tmp_path, name)
    output, compiled = co.build(recipe, 0)
    assert _summaries(output) == [(jobs, 0, jobs) for jobs in LINKS], output
    output, compiled = co.build(recipe, 1)
    assert _summaries(output) == [(jobs, jobs, 0) for jobs in LINKS], output
    assert compiled == 0
    co.same_binaries()
    assert stats(tmp_path / "cache")["modules_absolute_source"] == 0

    # The depfiles name headers by relative paths now: a header's change still rebuilds.
    program = co.program(1)
    built = program.stat().st_mtime_ns
    header = co.tops[1] / "counts.h"
    header.write_text(header.read_text() + "/* edited */\n")
    output, compiled = co.build(rebuild_script(recipe), 1)
    assert program.stat().st_mtime_ns != built, output  # the library's objects were rebuilt
    assert compiled == 0  # the same bitcode: a comment is no change to it


@requires_redis
def test_two_machines_share_through_a_remote_tier(tmp_path: Path) -> None:
    """Each checkout with a local cache of its own, both with one redis-server."""
    _missing("cmake-ninja")
    redis = start_redis(tmp_path / "redis")
    try:
        co = Checkouts(tmp_path, CACHED_DIST_REMOTE_STORAGE=redis.url)
        recipe = recipes()["cmake-ninja"]
        output, _ = co.build(recipe, 0, CACHED_DIST_DIR=str(tmp_path / "cache-a"))
        assert _summaries(output) == [(jobs, 0, jobs) for jobs in LINKS], output
        output, compiled = co.build(recipe, 1, CACHED_DIST_DIR=str(tmp_path / "cache-b"))
    finally:
        redis.stop()
    assert compiled == 0
    assert sorted(re.findall(r"(\d+) jobs: (\d+) hits \((\d+) from the remote\)", output)) == [
        (str(j), str(j), str(j)) for j in LINKS
    ], output
    assert stats(tmp_path / "cache-b")["remote_hits"] == JOBS
    co.same_binaries()


def _ccache_stats(env: dict[str, str]) -> dict[str, int]:
    done = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return {k: int(v) for k, v in (ln.split("\t") for ln in done.stdout.splitlines()) if
            v.isdigit()}  # fmt: skip


@requires_ccache
def test_ccache_as_a_second_launcher(tmp_path: Path) -> None:
    _missing("cmake-ninja")
    co = Checkouts(tmp_path)
    block = launcher_blocks()["ccache"]
    output, _ = co.build(block, 0)
    assert _summaries(output) == [(jobs, 0, jobs) for jobs in LINKS], output
    first = _ccache_stats(co.env)
    assert first["cache_miss"] == 5, first  # the 5 sources, each compiled once by ccache
    output, compiled = co.build(block, 1)
    assert compiled == 0 and _summaries(output) == [(j, j, 0) for j in LINKS], output
    second = _ccache_stats(co.env)
    hits = second["direct_cache_hit"] + second["preprocessed_cache_hit"]
    assert (hits, second["cache_miss"]) == (5, 5), second  # ccache shared its results too
    co.same_binaries()


@requires_ccache
def test_ccache_before_the_launcher_caches_nothing(tmp_path: Path) -> None:
    """The other order: ccache takes the compiler after the launcher for a second source."""
    _missing("cmake-ninja")
    co = Checkouts(tmp_path)
    block = launcher_blocks()["ccache"].replace(
        '="$(cached-dist flags --launcher=cmake);ccache"',
        '="ccache;$(cached-dist flags --launcher=cmake)"',
    )
    assert 'launcher="ccache;$(cached-dist' in block
    co.build(block, 0)
    counted = _ccache_stats(co.env)
    assert counted["multiple_source_files"] == 5, counted
    assert counted.get("cache_miss", 0) == 0 and counted.get("direct_cache_hit", 0) == 0


@requires_ccache
def test_the_ccache_alternative_base_dir(tmp_path: Path) -> None:
    _missing("cmake-ninja")
    co = Checkouts(tmp_path)
    block = launcher_blocks()["ccache-base-dir"]
    co.build(block, 0)
    output, compiled = co.build(block, 1)
    assert compiled == 0 and _summaries(output) == [(j, j, 0) for j in LINKS], output
    co.same_binaries()


def _without_launcher(recipe: str) -> str:
    """The recipe without its launcher lines (the command taking it, its uses)."""
    lines = [ln for ln in recipe.splitlines() if "launcher" not in ln.lower()]
    return "\n".join(lines) + "\n"


def test_without_the_launcher_nothing_is_shared_and_the_hint_says_why(tmp_path: Path) -> None:
    _missing("cmake-ninja")
    recipe = _without_launcher(recipes()["cmake-ninja"])
    assert "cmake --build build" in recipe and "LAUNCHER" not in recipe
    co = Checkouts(tmp_path)
    co.build(recipe, 0)
    output, compiled = co.build(recipe, 1, CACHED_DIST_VERBOSE="1")
    assert compiled == JOBS
    top = co.tops[1]
    hints = [ln for ln in output.splitlines() if "absolute source paths" in ln]
    assert sorted(hints) == sorted([
        f"cached-dist: 1 of 1 modules were compiled from absolute source paths "
        f"({top}/fixed.cpp): checkouts at other paths will not share their results; "
        f"{HINT_END}",
        f"cached-dist: 4 of 4 modules were compiled from absolute source paths "
        f"({top}/main.cpp, ...): checkouts at other paths will not share their results; "
        f"{HINT_END}",
    ]), output  # fmt: skip
    assert stats(tmp_path / "cache")["modules_absolute_source"] == 2 * JOBS
    done = subprocess.run([cached_dist_exe(), "stats", f"--cache-dir={tmp_path / 'cache'}"],
                          capture_output=True, text=True)  # fmt: skip
    assert (
        f"absolute sources     {2 * JOBS} compiled modules named their source by absolute "
        f"path: checkouts at other paths will not share them; {HINT_END}\n"
    ) in done.stdout


HINT_END = ('compile through the launcher cached-dist-cc (`cached-dist flags --launcher`; '
            'see "Sharing a cache" in the guide)')  # fmt: skip


def test_the_hint_reads_bitcode_only_for_compiles_and_with_verbose(tmp_path: Path) -> None:
    """Modules compiled by absolute path, linked by hand: misses are counted as they compile,
    a full hit reads no module unless --verbose asks; relative names give no hint."""
    cache = tmp_path / "cache"

    def compile_and_link(work: Path, absolute: bool, *extra: str) -> tuple[list[Path], str]:
        if not work.exists():
            shutil.copytree(PROGRAMS / "calc", work)
        sources = sorted(work.glob("*.c"))
        for src in sources:
            name = str(src) if absolute else src.name
            cmd = [str(CLANG), "-flto=thin", "-O2", "-c", name, "-o", f"{src.stem}.o"]
            done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
        cmd = [str(CLANG), "-flto=thin", "-O2", "-fuse-ld=lld",
               *(s.with_suffix(".o").name for s in sources), "-o", "app",
               f"-fthinlto-distributor={cached_dist_exe()}",
               f"-Xthinlto-distributor=--cache-dir={cache}",
               *(f"-Xthinlto-distributor={e}" for e in extra)]  # fmt: skip
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return sources, done.stderr

    sources, output = compile_and_link(tmp_path / "abs", True)
    assert "absolute source paths" not in output  # said with --verbose only
    assert stats(cache)["modules_absolute_source"] == len(sources) == 5
    sources, output = compile_and_link(tmp_path / "abs", True, "--verbose")
    assert "5 jobs: 5 hits, 0 compiled" in output
    assert (f"cached-dist: 5 of 5 modules were compiled from absolute source paths "
            f"({sources[0]}, ...): checkouts at other paths will not share their results; "
            f"{HINT_END}\n") in output  # fmt: skip
    assert stats(cache)["modules_absolute_source"] == 5  # hits add nothing
    _, output = compile_and_link(tmp_path / "rel", False, "--verbose")
    assert "5 jobs: 0 hits, 5 compiled" in output  # other bitcode: other source names
    assert "absolute source paths" not in output
    assert stats(cache)["modules_absolute_source"] == 5
