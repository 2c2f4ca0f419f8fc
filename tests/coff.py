"""Windows-style (COFF) builds of tests/programs/win*, linked by a real lld-link 22.

There are no Windows headers or C runtime on Linux, so the programs are freestanding and
linked with ``/nodefaultlib /entry:main``; and a PE executable does not run here, so a link
is checked by its bytes against an uncached link (``/brepro``: the header's timestamp is
then a hash of the image, not the time of the link).
"""

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .toolchain import CLANG, LLVM_BIN, PROGRAMS, cached_dist_exe, run

LLD_LINK = LLVM_BIN / "lld-link"
CLANG_CL = LLVM_BIN / "clang-cl"
TARGET = "x86_64-pc-windows-msvc"

Archive = Literal["none", "regular", "thin"]
#: How the sources are compiled: clang-cl's options (what CMake and MSBuild pass) or clang's.
Style = Literal["clang-cl", "clang"]

# Which sources of each program go into its library when it is built with one.
_LIBRARY = {"wincalc": ("ops", "strutil"), "winshapes": ("square", "circle")}


@dataclass
class CoffProject:
    """A program compiled to ThinLTO bitcode for x86_64-pc-windows-msvc in ``dir``."""

    name: str
    dir: Path
    link_inputs: list[str]

    def link_command(
        self,
        out: str = "app.exe",
        *,
        distributor: str | None = None,
        distributor_args: Sequence[str] = (),
        remote_compiler: str | Path | None = CLANG,
        extra: Sequence[str] = (),
    ) -> list[str]:
        cmd = [str(LLD_LINK), "/brepro", "/subsystem:console", "/entry:main", "/nodefaultlib",
               *self.link_inputs, f"/out:{out}",
               f"/thinlto-distributor:{distributor or cached_dist_exe()}"]  # fmt: skip
        cmd += [f"/thinlto-distributor-arg:{a}" for a in distributor_args]
        if remote_compiler is not None:
            cmd.append(f"/thinlto-remote-compiler:{remote_compiler}")
        return cmd + list(extra)

    def link(
        self, out: str = "app.exe", *, env: dict[str, str] | None = None, **kw: object
    ) -> subprocess.CompletedProcess[str]:
        return run(self.link_command(out, **kw), self.dir, env=env)  # type: ignore[arg-type]

    def image(self, out: str = "app.exe") -> bytes:
        """The linked executable's bytes, after checking that it is an x64 PE image."""
        done = run([LLVM_BIN / "llvm-readobj", "--file-headers", out], self.dir)
        assert done.returncode == 0, done.stderr
        assert "IMAGE_FILE_MACHINE_AMD64" in done.stdout, done.stdout
        return (self.dir / out).read_bytes()


def build_coff(
    name: str, dest: Path, archive: Archive = "none", style: Style = "clang-cl"
) -> CoffProject:
    """Copies tests/programs/NAME to ``dest`` and compiles each source to ThinLTO bitcode
    (``.obj`` files, as clang-cl names them), archiving the library's with llvm-lib."""
    dest.mkdir(parents=True, exist_ok=True)
    sources = sorted(p for p in (PROGRAMS / name).iterdir() if p.suffix in {".c", ".cpp"})
    for p in (PROGRAMS / name).iterdir():
        (dest / p.name).write_bytes(p.read_bytes())
    objects = []
    for src in sources:
        obj = src.stem + ".obj"
        cmd: list[str | Path]
        if style == "clang-cl":  # /GS-: the stack cookie would need the C runtime
            cmd = [CLANG_CL, f"--target={TARGET}", "-flto=thin", "/O2", "/GS-", "/GR-", "/c",
                   src.name, f"/Fo{obj}"]  # fmt: skip
        else:
            cmd = [CLANG, f"--target={TARGET}", "-flto=thin", "-O2", "-fno-exceptions",
                   "-fno-rtti", "-c", src.name, "-o", obj]  # fmt: skip
        done = run(cmd, dest)
        assert done.returncode == 0, done.stderr
        objects.append(obj)
    if archive == "none":
        return CoffProject(name, dest, objects)
    members = [f"{stem}.obj" for stem in _LIBRARY[name]]
    thin = ["/llvmlibthin"] if archive == "thin" else []
    done = run([LLVM_BIN / "llvm-lib", *thin, f"/out:{name}.lib", *members], dest)
    assert done.returncode == 0, done.stderr
    rest = [o for o in objects if o not in members]
    return CoffProject(name, dest, [*rest, f"{name}.lib"])


def summary(stderr: str) -> tuple[int, int, int]:
    """(jobs, hits, compiled) from cached-dist's summary line."""
    found = re.search(r"cached-dist: (\d+) jobs: (\d+) hits, (\d+) compiled", stderr)
    assert found is not None, stderr
    jobs, hits, compiled = (int(g) for g in found.groups())
    return jobs, hits, compiled
