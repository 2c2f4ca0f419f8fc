"""Build real DTLTO summary shards with clang-22/ld.lld-22 for tests and benchmarks.

A link is run through DTLTO with a throwaway distributor that copies the job
file, every shard and every job input aside (LLD deletes the archive members
it writes out once the link ends), then exits 1 so no backend runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

LLVM_BIN = Path("/usr/lib/llvm-22/bin")
CLANG = LLVM_BIN / "clang"
LLVM_AR = LLVM_BIN / "llvm-ar"
BCANALYZER = LLVM_BIN / "llvm-bcanalyzer"

TOOLCHAIN_MISSING_REASON = f"{CLANG} (clang-22 with DTLTO) is not installed"


def have_toolchain() -> bool:
    """True when clang-22, ld.lld-22, llvm-ar and llvm-bcanalyzer are present."""
    return all((LLVM_BIN / t).exists() for t in ("clang", "ld.lld", "llvm-ar", "llvm-bcanalyzer"))


# The capturing distributor.  It runs with the link's working directory.
_DISTRIBUTOR = textwrap.dedent(
    """\
    import json, os, shutil, sys
    dest = sys.argv[1]
    jobfile = sys.argv[-1]
    os.makedirs(dest, exist_ok=True)
    with open(jobfile) as f:
        spec = json.load(f)
    files = {}
    for job in spec["jobs"]:
        for path in job["inputs"]:
            if path not in files:
                copy = os.path.join(dest, "f%d" % len(files))
                shutil.copyfile(path, copy)
                files[path] = copy
    with open(os.path.join(dest, "capture.json"), "w") as f:
        json.dump({"cwd": os.getcwd(), "spec": spec, "files": files}, f)
    sys.exit(1)
    """
)


def _run(cmd: Sequence[str | os.PathLike[str]], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)


def file_digest(path: Path) -> str:
    """Content digest used to name modules in tests (xxh3_128 of the bytes)."""
    return xxhash.xxh3_128_hexdigest(path.read_bytes())


@dataclass
class CapturedJob:
    """One backend job as LLD sent it, with copies of its files."""

    module: str  # inputs[0] as written in the job file
    shard_path: str  # inputs[1] as written in the job file
    inputs: list[str]
    shard: bytes
    digests: dict[str, str] = field(default_factory=dict)  # job input path -> digest
    cwd: str = ""

    def module_digest(self) -> Callable[[str], str | None]:
        """A ``module_digest`` callback as a caller of canonical_shard builds it.

        Paths are tried as written, then normalized against the link's
        working directory, because the shard and job file may spell a module
        relative or absolute.
        """
        table: dict[str, str] = {}
        for path, digest in self.digests.items():
            table[path] = digest
            table[os.path.normpath(os.path.join(self.cwd, path))] = digest

        def lookup(path: str) -> str | None:
            found = table.get(path)
            if found is None:
                found = table.get(os.path.normpath(os.path.join(self.cwd, path)))
            return found

        return lookup


@dataclass
class LinkCapture:
    """Everything a DTLTO link handed its distributor."""

    spec: dict[str, object]
    jobs: list[CapturedJob]

    def job(self, module_suffix: str) -> CapturedJob:
        """The job whose primary module's member/file name contains ``module_suffix``."""
        found = [j for j in self.jobs if module_suffix in j.module]
        if len(found) != 1:
            raise KeyError(f"{module_suffix!r} matches {[j.module for j in self.jobs]}")
        return found[0]


def write_sources(directory: Path, sources: Mapping[str, str]) -> None:
    """Write ``sources`` (file name -> text) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in sources.items():
        (directory / name).write_text(text)


def compile_thin(directory: Path, names: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """Compile each source in ``directory`` to ThinLTO bitcode ``<stem>.o``."""
    objects = []
    procs = []
    for name in names:
        obj = Path(name).with_suffix(".o").name
        objects.append(obj)
        cmd = [str(CLANG), "-flto=thin", "-O2", "-c", name, "-o", obj, *extra]
        procs.append(subprocess.Popen(cmd, cwd=directory, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"clang failed: {err}")
    return objects


def archive(directory: Path, name: str, members: Sequence[str], thin: bool = False) -> str:
    """Create a regular (or thin) static archive of ``members``."""
    (directory / name).unlink(missing_ok=True)
    res = _run([LLVM_AR, "rcsT" if thin else "rcs", name, *members], directory)
    if res.returncode:
        raise RuntimeError(f"llvm-ar failed: {res.stderr}")
    return name


def dtlto_capture(
    directory: Path,
    inputs: Sequence[str],
    capture_dir: Path,
    extra: Sequence[str] = (),
    output: str = "app",
    cxx: bool = False,
) -> LinkCapture:
    """Run a DTLTO link in ``directory`` and return what LLD sent the distributor."""
    if capture_dir.exists():
        shutil.rmtree(capture_dir)
    script = capture_dir.parent / f"{capture_dir.name}-dist.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(_DISTRIBUTOR)
    driver = str(CLANG) + ("++" if cxx else "")
    cmd = [
        driver,
        "-flto=thin",
        "-O2",
        "-fuse-ld=lld",
        *inputs,
        "-o",
        output,
        f"-fthinlto-distributor={sys.executable}",
        f"-Xthinlto-distributor={script}",
        f"-Xthinlto-distributor={capture_dir}",
        *extra,
    ]
    res = _run(cmd, directory)
    manifest = capture_dir / "capture.json"
    if not manifest.exists():
        raise RuntimeError(f"DTLTO link did not reach the distributor: {res.stderr}")
    data = json.loads(manifest.read_text())
    spec: dict[str, object] = data["spec"]
    files: dict[str, str] = data["files"]
    jobs = []
    for job in data["spec"]["jobs"]:
        ins: list[str] = job["inputs"]
        digests = {p: file_digest(Path(files[p])) for i, p in enumerate(ins) if i != 1}
        jobs.append(
            CapturedJob(
                module=ins[0],
                shard_path=ins[1],
                inputs=ins,
                shard=Path(files[ins[1]]).read_bytes(),
                digests=digests,
                cwd=data["cwd"],
            )
        )
    return LinkCapture(spec, jobs)


# -- sample programs -----------------------------------------------------------

C_PROGRAM: dict[str, str] = {
    "main.c": textwrap.dedent(
        """\
        int foo(int);
        int bar(int);
        int baz(int);
        extern int gv;
        int main(int argc, char **argv) { return foo(argc) + bar(argc) + baz(argc) + gv; }
        """
    ),
    "t2.c": textwrap.dedent(
        """\
        int gv = 3;
        static int helper(int x) { return x * gv; }
        int foo(int x) { return helper(x) + 1; }
        int unused(int x) { return x - 1; }
        """
    ),
    "t3.c": textwrap.dedent(
        """\
        int bar(int x) { return x * 7; }
        int bar_alias(int) __attribute__((alias("bar")));
        """
    ),
    "t4.c": textwrap.dedent(
        """\
        int bar_alias(int);
        static const int table[4] = {1, 2, 3, 4};
        int baz(int x) { return bar_alias(x) + table[x & 3]; }
        """
    ),
}

CXX_PROGRAM: dict[str, str] = {
    "shapes.h": textwrap.dedent(
        """\
        #pragma once
        struct Shape {
          virtual ~Shape();
          virtual double area() const = 0;
          virtual const char *name() const { return "shape"; }
        };
        template <typename T> T twice(T v) { return v + v; }
        template <typename T> struct Box {
          T value;
          explicit Box(T v) : value(v) {}
          T get() const { return twice(value); }
        };
        Shape *make_square(double);
        Shape *make_circle(double);
        double total(Shape **, int);
        """
    ),
    "main.cpp": textwrap.dedent(
        """\
        #include "shapes.h"
        int main(int argc, char **) {
          Shape *s[2] = {make_square(argc), make_circle(argc)};
          Box<int> b(argc);
          return (int)total(s, 2) + b.get() + twice(argc);
        }
        """
    ),
    "shape.cpp": textwrap.dedent(
        """\
        #include "shapes.h"
        Shape::~Shape() {}
        double total(Shape **s, int n) {
          double t = 0;
          for (int i = 0; i < n; ++i) t += s[i]->area();
          return t + Box<double>(t).get();
        }
        """
    ),
    "square.cpp": textwrap.dedent(
        """\
        #include "shapes.h"
        namespace {
        struct Square : Shape {
          double side;
          explicit Square(double s) : side(s) {}
          double area() const override { return side * side; }
          const char *name() const override { return "square"; }
        };
        }
        Shape *make_square(double s) { return new Square(twice(s)); }
        """
    ),
    "circle.cpp": textwrap.dedent(
        """\
        #include "shapes.h"
        struct Circle : Shape {
          double r;
          explicit Circle(double v) : r(v) {}
          double area() const override { return 3.14159 * r * r; }
        };
        Shape *make_circle(double r) { return new Circle(Box<double>(r).get()); }
        """
    ),
}


def many_module_program(count: int) -> dict[str, str]:
    """A program of ``count`` modules that call across each other (for benchmarks).

    Each module defines a few small functions, a global table and calls into
    its neighbours, so every backend job imports from several modules.
    """
    sources: dict[str, str] = {}
    for i in range(count):
        nxt = [(i + k) % count for k in (1, 2, 5)]
        decls = "".join(f"int f{j}_{k}(int);\n" for j in nxt for k in range(3))
        body = [f"int g{i}[8] = {{{', '.join(str(i * 8 + k) for k in range(8))}}};"]
        for k in range(3):
            calls = " + ".join(f"f{j}_{(k + 1) % 3}(x - 1)" for j in nxt)
            body.append(
                f"int f{i}_{k}(int x) {{ if (x <= 0) return g{i}[x & 7]; return x * {k + 1}"
                f" + {calls}; }}"
            )
        body.append(f"static int local{i}(int x) {{ return x ^ {i}; }}")
        body.append(f"int entry{i}(int x) {{ return local{i}(x) + f{i}_0(x); }}")
        sources[f"m{i}.c"] = decls + "\n".join(body) + "\n"
    calls = " + ".join(f"entry{i}(argc)" for i in range(count))
    decls = "".join(f"int entry{i}(int);\n" for i in range(count))
    sources["main.c"] = decls + f"int main(int argc, char **argv) {{ return {calls}; }}\n"
    return sources
