"""Real clang-22/ld.lld-22 builds of the sample programs in tests/programs, for e2e tests."""

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

LLVM_BIN = Path("/usr/lib/llvm-22/bin")
CLANG = LLVM_BIN / "clang"
PROGRAMS = Path(__file__).parent / "programs"

requires_toolchain = pytest.mark.skipif(
    not (LLVM_BIN / "ld.lld").exists(), reason="clang-22/lld-22 not installed (run scripts/setup)"
)

Archive = Literal["none", "regular", "thin"]

# Which objects of each program go into its library when it is built with an archive.
_LIBRARY = {"calc": ("ops", "strutil"), "shapes": ("square", "circle")}


def cached_dist_exe() -> str:
    """The command installed next to this interpreter (what `command -v` finds)."""
    beside = Path(sys.executable).parent / "cached-dist"
    if beside.exists():
        return str(beside)
    found = shutil.which("cached-dist")
    if found is None:
        pytest.fail("cached-dist is not installed: run scripts/setup")
    return found


def run(
    cmd: Sequence[str | os.PathLike[str]], cwd: Path, **kw: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload,no-any-return]
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, **kw
    )


@dataclass
class Project:
    """A sample program compiled to ThinLTO bitcode in ``dir``, ready to link."""

    name: str
    dir: Path
    link_inputs: list[str]
    cxx: bool

    @property
    def expected_output(self) -> str:
        return (PROGRAMS / self.name / "expected.txt").read_text()

    def link_command(
        self,
        out: str = "app",
        *,
        distributor: str | None = None,
        distributor_args: Sequence[str] = (),
        remote_compiler: Path | None = None,
        extra: Sequence[str] = (),
        opt: str = "-O2",
    ) -> list[str]:
        driver = str(LLVM_BIN / ("clang++" if self.cxx else "clang"))
        cmd = [driver, "-flto=thin", opt, "-fuse-ld=lld", *self.link_inputs, "-o", out]
        cmd.append(f"-fthinlto-distributor={distributor or cached_dist_exe()}")
        cmd += [f"-Xthinlto-distributor={a}" for a in distributor_args]
        if remote_compiler is not None:
            cmd.append(f"-Wl,--thinlto-remote-compiler={remote_compiler}")
        return cmd + list(extra)

    def link(
        self, out: str = "app", *, env: dict[str, str] | None = None, cwd: Path | None = None,
        **kw: object,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        return run(self.link_command(out, **kw), cwd or self.dir, env=env)  # type: ignore[arg-type]

    def run_program(self, out: str = "app", cwd: Path | None = None) -> str:
        done = run([f"./{out}"], cwd or self.dir)
        assert done.returncode == 0, done.stderr
        return done.stdout


def build(
    name: str,
    dest: Path,
    archive: Archive = "none",
    opt: str = "-O2",
    cflags: Sequence[str] = (),
    *,
    compile_prefix: Sequence[str | Path] = (),
    env: dict[str, str] | None = None,
    drop_members: bool = False,
) -> Project:
    """Copies tests/programs/NAME to ``dest`` and compiles each source to ThinLTO bitcode
    (with clang-22, or with ``compile_prefix`` such as another toolchain's ``cc -flto=thin``);
    ``drop_members`` leaves a regular archive's members only in the archive, as a real build
    that deletes its objects does."""
    dest.mkdir(parents=True, exist_ok=True)
    sources = sorted(p for p in (PROGRAMS / name).iterdir() if p.suffix in {".c", ".cpp"})
    cxx = any(p.suffix == ".cpp" for p in sources)
    for p in (PROGRAMS / name).iterdir():
        shutil.copy(p, dest / p.name)
    prefix = compile_prefix or [LLVM_BIN / ("clang++" if cxx else "clang"), "-flto=thin", opt]
    objects = []
    for src in sources:
        obj = src.stem + ".o"
        done = run([*prefix, *cflags, "-c", src.name, "-o", obj], dest, env=env)
        assert done.returncode == 0, done.stderr
        objects.append(obj)
    if archive == "none":
        return Project(name, dest, objects, cxx)
    members = [f"{stem}.o" for stem in _LIBRARY[name]]
    flags = "rcsT" if archive == "thin" else "rcs"
    done = run([LLVM_BIN / "llvm-ar", flags, f"lib{name}.a", *members], dest)
    assert done.returncode == 0, done.stderr
    if drop_members and archive == "regular":
        for member in members:
            (dest / member).unlink()
    rest = [o for o in objects if o not in members]
    return Project(name, dest, [*rest, f"lib{name}.a"], cxx)


def counting_compiler(where: Path, sleep: float = 0.0) -> tuple[Path, Path]:
    """A remote-compiler wrapper that records each backend compilation, then runs clang."""
    counter = where / "compilations.log"
    script = where / "counting-clang"
    pause = f"sleep {sleep}\n" if sleep else ""
    script.write_text(f"#!/bin/sh\necho \"$$\" >> '{counter}'\n{pause}exec '{CLANG}' \"$@\"\n")
    script.chmod(0o755)
    return script, counter


def stats(cache: Path) -> dict[str, float]:
    """``cached-dist stats --json`` for ``cache``."""
    done = run([cached_dist_exe(), "stats", "--json", f"--cache-dir={cache}"], cache.parent)
    assert done.returncode == 0, done.stderr
    result: dict[str, float] = json.loads(done.stdout)
    return result


def compilations(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0
