"""Lua 5.4 from Debian's source package, built by its own Makefile through cached-dist.

After `rm lua luac` the relink compiles nothing, the binary is byte-identical to a link
without any cache, and recompiling every hit (--verify-hits=1.0) finds no mismatch.
"""

import shutil
from pathlib import Path

import pytest

from benchmarks import lua, sources

from .toolchain import (
    LLVM_BIN,
    cached_dist_exe,
    compilations,
    counting_compiler,
    requires_toolchain,
    run,
)

pytestmark = [requires_toolchain, pytest.mark.e2e]


@pytest.fixture(scope="module")
def lua_tree() -> Path:
    try:
        return sources.fetch("lua5.4")
    except (OSError, RuntimeError) as e:
        pytest.skip(f"cannot fetch Debian's lua5.4 source package: {e}")


def make(src: Path, ldflags: str) -> str:
    done = run(["make", "-j2", "linux", *lua.make_vars(), f"MYLDFLAGS={ldflags}"], src,
               env={"PATH": f"{LLVM_BIN}:/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stderr


def test_lua_relinks_from_the_cache(tmp_path: Path, lua_tree: Path) -> None:
    tree = tmp_path / "lua"
    shutil.copytree(lua_tree, tree, ignore=shutil.ignore_patterns("*.o", "*.a", "lua", "luac"))
    src = tree / "src"
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    dist = f"-fthinlto-distributor={cached_dist_exe()} -Wl,--thinlto-remote-compiler={wrapper}"
    flags = f"-fuse-ld=lld -flto=thin {dist} -Xthinlto-distributor=--cache-dir={cache}"
    make(src, flags)
    cold = compilations(counter)
    assert cold >= 33  # lua's 33 jobs; luac's are partly shared through the cache
    for binary in ("lua", "luac"):
        (src / binary).unlink()
    err = make(src, flags)
    assert compilations(counter) == cold, err  # zero compilations
    assert "33 jobs: 33 hits, 0 compiled" in err and "22 jobs: 22 hits, 0 compiled" in err
    # The Makefile's own link line, through cached-dist with no cache at all.
    plain = run([str(LLVM_BIN / "clang"), "-o", "lua.plain", "-fuse-ld=lld", "-flto=thin",
                 f"-fthinlto-distributor={cached_dist_exe()}", "-Xthinlto-distributor=--disable",
                 "lua.o", "liblua.a", "-lm", "-Wl,-E", "-ldl"], src)  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    assert (src / "lua").read_bytes() == (src / "lua.plain").read_bytes()
    (src / "lua").unlink()
    err = make(src, f"{flags} -Xthinlto-distributor=--verify-hits=1.0")
    assert "MISMATCH" not in err and "33 jobs: 33 hits, 0 compiled" in err
    assert compilations(counter) == cold + 33  # every hit recompiled once, for the comparison
    assert (src / "lua").read_bytes() == (src / "lua.plain").read_bytes()
    script = run(["./lua", "-e", "local t = {} for i = 1, 10 do t[i] = i * i end "
                  "print(table.concat(t, ','), string.format('%5.2f', math.pi))"], src)  # fmt: skip
    assert script.stdout == "1,4,9,16,25,36,49,64,81,100\t 3.14\n"
