"""A real LLVM 21 DTLTO toolchain for the tests: clang and LLD 21.1 from the ziglang wheel.

The wheel (a ``test`` extra) ships one ``zig`` binary that is also ``clang`` (``zig clang``,
bare: no C headers, enough for backend jobs), a C compiler with headers (``zig cc``) and
``ld.lld`` (``zig ld.lld``). The clang-22 driver links with ``--ld-path`` set to a script
running that LLD 21, and LLD 21 names a script running that clang 21 in its job files.
"""

import importlib.util
import os
from pathlib import Path

import pytest

from .toolchain import LLVM_BIN, Archive, Project, build

_SPEC = importlib.util.find_spec("ziglang")
ZIG = Path(_SPEC.origin).parent / "zig" if _SPEC and _SPEC.origin else Path("/nonexistent/zig")

requires_llvm21 = pytest.mark.skipif(
    not ZIG.exists() or not (LLVM_BIN / "clang").exists(),
    reason="LLVM 21 comes from the ziglang wheel (pip install -e '.[test]') and the link "
    "driver from clang-22 (scripts/setup)",
)


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
        cc: list[str | Path] = [ZIG, "cc", "-target", "x86_64-linux-gnu", "-flto=thin", "-O2"]
        return build(name, dest, archive, compile_prefix=cc, env=self.env, drop_members=True)

    def link_command(self, project: Project, out: str, distributor_args: list[str],
                     distributor: str | None = None) -> list[str]:  # fmt: skip
        cmd = project.link_command(out, distributor=distributor, remote_compiler=self.clang,
                                   distributor_args=distributor_args)  # fmt: skip
        return [*cmd, f"--ld-path={self.lld}"]
