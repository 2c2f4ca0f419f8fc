"""Lua 5.4 from Debian's source package, built with its own Makefile as ThinLTO bitcode."""

import shutil
import subprocess
from pathlib import Path

from .sources import WORK, fetch

LLVM_BIN = Path("/usr/lib/llvm-22/bin")


def make_vars(thin: bool = False) -> list[str]:
    ar = "AR=llvm-ar rcuT" if thin else "AR=llvm-ar rcu"
    return ["CC=clang", ar, "RANLIB=llvm-ranlib", "MYCFLAGS=-flto=thin"]


def build(
    dest: Path | None = None, ldflags: str = "-fuse-ld=lld -flto=thin", thin: bool = False
) -> Path:
    """A fresh copy of lua's tree under ``dest``, compiled by ``make linux``; returns src/.

    ``thin`` makes liblua.a a thin archive (``llvm-ar rcuT``) instead of a regular one.
    """
    tree = fetch("lua5.4")
    dest = dest or WORK / "lua"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(tree, dest)
    src = dest / "src"
    env = {"PATH": f"{LLVM_BIN}:/usr/bin:/bin"}
    subprocess.run(
        ["make", "-j2", "linux", *make_vars(thin), f"MYLDFLAGS={ldflags}"],
        cwd=src, env=env, check=True, capture_output=True,
    )  # fmt: skip
    return src


def link_command(out: str, extra: list[str]) -> list[str]:
    """The link of the `lua` interpreter exactly as its Makefile does it, plus ``extra``."""
    return [str(LLVM_BIN / "clang"), "-o", out, "-fuse-ld=lld", "-flto=thin", "-O2", *extra,
            "lua.o", "liblua.a", "-lm", "-Wl,-E", "-ldl"]  # fmt: skip
