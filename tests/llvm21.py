"""A real LLVM 21 DTLTO toolchain for the tests: clang and LLD 21.1 from the ziglang wheel.

The wheel (a ``test`` extra) ships one ``zig`` binary that is also ``clang`` (``zig clang``,
bare: no C headers, enough for backend jobs), a C compiler with headers (``zig cc``) and
``ld.lld`` (``zig ld.lld``). The clang-22 driver links with ``--ld-path`` set to a script
running that LLD 21, and LLD 21 names a script running that clang 21 in its job files.
"""

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from .toolchain import LLVM_BIN, PROGRAMS, Archive, Project, run

_SPEC = importlib.util.find_spec("ziglang")
ZIG = Path(_SPEC.origin).parent / "zig" if _SPEC and _SPEC.origin else Path("/nonexistent/zig")

requires_llvm21 = pytest.mark.skipif(
    not ZIG.exists() or not (LLVM_BIN / "clang").exists(),
    reason="LLVM 21 comes from the ziglang wheel (pip install -e '.[test]') and the link "
    "driver from clang-22 (scripts/setup)",
)

_LIBRARY = {"calc": ("ops", "strutil")}


def script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def zig_env(where: Path) -> dict[str, str]:
    """zig keeps caches under $HOME by default; the tests keep them in their own directory."""
    return {**os.environ, "ZIG_GLOBAL_CACHE_DIR": str(where / "zig-cache"),
            "ZIG_LOCAL_CACHE_DIR": str(where / "zig-cache")}  # fmt: skip


class Llvm21:
    """Scripts for one test: LLD 21, a clang 21 that counts its compilations."""

    def __init__(self, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.where = where
        self.env = zig_env(where)
        self.lld = script(where / "ld.lld-21", f"exec '{ZIG}' ld.lld \"$@\"")
        self.counter = where / "compilations.log"
        self.clang = script(where / "clang-21",
                            f"echo \"$$\" >> '{self.counter}'\nexec '{ZIG}' clang \"$@\"")  # fmt: skip

    def compilations(self) -> int:
        return len(self.counter.read_text().splitlines()) if self.counter.exists() else 0

    def build(self, name: str, dest: Path, archive: Archive = "none") -> Project:
        """tests/programs/NAME compiled to LLVM 21 ThinLTO bitcode by ``zig cc``."""
        dest.mkdir(parents=True, exist_ok=True)
        sources = sorted(p for p in (PROGRAMS / name).iterdir() if p.suffix == ".c")
        for p in (PROGRAMS / name).iterdir():
            shutil.copy(p, dest / p.name)
        objects = []
        for src in sources:
            obj = src.stem + ".o"
            done = run([ZIG, "cc", "-target", "x86_64-linux-gnu", "-flto=thin", "-O2", "-c",
                        src.name, "-o", obj], dest, env=self.env)  # fmt: skip
            assert done.returncode == 0, done.stderr
            objects.append(obj)
        if archive == "none":
            return Project(name, dest, objects, False)
        members = [f"{stem}.o" for stem in _LIBRARY[name]]
        flags = "rcsT" if archive == "thin" else "rcs"
        done = run([LLVM_BIN / "llvm-ar", flags, f"lib{name}.a", *members], dest)
        assert done.returncode == 0, done.stderr
        for member in members:  # only the archive holds them now, as in a real build
            if archive == "regular":
                (dest / member).unlink()
        rest = [o for o in objects if o not in members]
        return Project(name, dest, [*rest, f"lib{name}.a"], False)

    def link_command(self, project: Project, out: str, distributor_args: list[str],
                     distributor: str | None = None) -> list[str]:  # fmt: skip
        cmd = project.link_command(out, distributor=distributor, remote_compiler=self.clang,
                                   distributor_args=distributor_args)  # fmt: skip
        return [*cmd, f"--ld-path={self.lld}"]
