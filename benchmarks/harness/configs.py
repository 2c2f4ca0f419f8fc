"""The five ways of linking that the benchmark compares, as extra link flags.

Every configuration except in-process ThinLTO sends its backend compilations through a
counting remote-compiler wrapper, so compilations are counted the same way for all of them,
whoever decides to skip one (LLD's cache, cached-dist, or nobody).
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path

LLVM_BIN = Path("/usr/lib/llvm-22/bin")
BARE = Path(__file__).parent.parent / "bare_distributor.py"


def cached_dist() -> str:
    """The console script beside this interpreter (the venv's)."""
    return str(Path(sys.executable).parent / "cached-dist")


def parallelism() -> int:
    return len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Config:
    key: str
    label: str
    cached: bool  # has a cache whose outputs must equal the uncached (b)'s byte for byte
    counted: bool  # backend compilations go through the counting wrapper

    def flags(self, cache: Path, wrapper: Path) -> list[str]:
        """The link flags of this configuration, with ``cache`` as its cache directory."""
        n = parallelism()
        bare = [f"-fthinlto-distributor={sys.executable}",
                f"-Xthinlto-distributor={BARE},--jobs={n}"]  # fmt: skip
        remote = [f"-Wl,--thinlto-remote-compiler={wrapper}"]
        ours = f"-fthinlto-distributor={cached_dist()}"
        if self.key == "a":
            return [f"-Wl,--thinlto-jobs={n}"]
        if self.key == "b":
            return [*bare, *remote]
        if self.key == "c":
            return [*bare, *remote, f"-Wl,--thinlto-cache-dir={cache}"]
        if self.key == "d":
            inner = f"--,{sys.executable},{BARE},--jobs={n}"
            return [ours, f"-Xthinlto-distributor=--cache-dir={cache},{inner}", *remote]
        if self.key == "e":
            return [ours, f"-Xthinlto-distributor=--cache-dir={cache},--jobs={n}", *remote]
        raise ValueError(self.key)


CONFIGS = [
    Config("a", "in-process ThinLTO", cached=False, counted=False),
    Config("b", "DTLTO, bare distributor", cached=False, counted=True),
    Config("c", "DTLTO + LLD cache", cached=True, counted=True),
    Config("d", "cached-dist + bare distributor", cached=True, counted=True),
    Config("e", "cached-dist local runner", cached=True, counted=True),
]
BY_KEY = {c.key: c for c in CONFIGS}


def counting_wrapper(where: Path, timed: bool = False) -> Path:
    """A remote compiler that appends a line to ``$BENCH_COUNT`` per compilation, then
    runs clang: what every counted configuration compiles with. ``timed``: the line is
    ``PID REAL USER SYS`` (seconds, bash's ``time`` of the clang process), written when the
    compilation ends."""
    where.mkdir(parents=True, exist_ok=True)
    clang = f"'{LLVM_BIN / 'clang'}'"
    if timed:
        script = where / "counting-clang-timed"
        script.write_text(
            f'#!/bin/bash\n[ -z "$BENCH_COUNT" ] && exec {clang} "$@"\n'
            'TIMEFORMAT="$$ %3R %3U %3S"\n'
            f'{{ time {clang} "$@" 2>&3 3>&-; }} 3>&2 2>>"$BENCH_COUNT"\n'
        )
    else:
        script = where / "counting-clang"
        script.write_text(
            f'#!/bin/sh\n[ -n "$BENCH_COUNT" ] && echo "$$" >> "$BENCH_COUNT"\nexec {clang} "$@"\n'
        )
    script.chmod(0o755)
    return script


def build_ldflags(cache: Path) -> str:
    """LDFLAGS for the code bases' own build systems: DTLTO through cached-dist with a cache
    of its own, so that rebuilds after a touch or an edit relink quickly. Never measured."""
    return (f"-fuse-ld=lld -flto=thin -fthinlto-distributor={cached_dist()} "
            f"-Xthinlto-distributor=--quiet,--cache-dir={cache}")  # fmt: skip


def is_dtlto_flag(token: str) -> bool:
    """Flags a replayed link drops before adding a configuration's own."""
    return token.startswith(("-fthinlto-distributor=", "-Xthinlto-distributor=", "-Wl,--thinlto-"))
