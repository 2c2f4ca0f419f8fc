"""The code bases the benchmark links: built by their own build systems, links replayed.

Each code base is built once by its own build system (make, cmake, configure + make) with
``-flto=thin`` and DTLTO link flags injected through the variables that build system offers.
The benchmark then replays the exact link command that build system ran, with each
configuration's flags in place of the build's own DTLTO flags, so every configuration links
the same bitcode the same way. Touches and edits are rebuilt by the build system again.
"""

import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .. import lua, sources
from .configs import LLVM_BIN, build_ldflags, is_dtlto_flag

OUT = "@OUT@"  # the placeholder for the output file in a captured link command
ENV = {**os.environ, "PATH": f"{LLVM_BIN}:/usr/bin:/bin"}
SOURCE_SUFFIXES = (".c", ".h", ".cc", ".cpp", ".hpp")


@dataclass(frozen=True)
class Edit:
    """A one-line body edit: an inline-asm comment after the first ``{`` that follows
    ``anchor`` in ``path``. It changes the module's bitcode (and any copy ThinLTO imports
    elsewhere) without changing what the program does; ``n`` makes each edit distinct."""

    path: str
    anchor: str

    def apply(self, root: Path, n: int) -> str:
        """Edits the file under ``root`` and returns its previous text (to revert to)."""
        file = root / self.path
        text = file.read_text()
        at = text.index("{", text.index(self.anchor)) + 1
        file.write_text(f'{text[:at]} __asm__ volatile("# bench edit {n}");{text[at:]}')
        return text


@dataclass(frozen=True)
class Build:
    root: Path  # the source tree that touches and edits change
    cwd: Path  # where the build system ran the link
    link: tuple[str, ...]  # that link, output replaced by OUT, its DTLTO flags dropped
    top: Path  # the directory holding the whole build (copied for the copy scenario)

    def moved(self, top: Path) -> "Build":
        """The same build after ``self.top`` was copied to ``top``."""

        def move(p: Path) -> Path:
            return top / p.relative_to(self.top)

        return replace(self, root=move(self.root), cwd=move(self.cwd), top=top)

    def command(self, out: str, flags: Sequence[str], opt: str = "-O2") -> list[str]:
        """The replayed link writing ``out`` with ``flags`` at LTO level ``opt``, whatever
        level the build system linked at (leveldb's Release build links at -O3, which would
        make the -O2 -> -O3 scenario a no-op)."""
        cmd = [out if t == OUT else t for t in self.link]
        cmd = [t for t in cmd if not (t.startswith("-O") and len(t) == 3)] + [opt]
        return [cmd[0], *flags, *cmd[1:]]


def capture(cmd: Sequence[str], output: str) -> tuple[str, ...]:
    """A link command with its output named OUT and its DTLTO flags removed."""
    tokens = list(cmd)
    at = tokens.index("-o") + 1
    if tokens[at] != output:
        raise ValueError(f"link writes {tokens[at]}, expected {output}")
    tokens[at] = OUT
    return tuple(t for t in tokens if not is_dtlto_flag(t))


def run(cmd: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(list(cmd), cwd=cwd, env=env or ENV, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} (in {cwd}) failed:\n{done.stderr[-3000:]}")
    return done.stdout


class CodeBase:
    """One real program. Subclasses say how their build system builds and links it."""

    name = ""
    package = ""  # the Debian source package
    language = ""
    build_system = ""
    program = ""  # the binary the benchmark links
    leaf: Edit
    hub: Edit
    packages: tuple[str, ...] = ()  # Debian packages its build needs (installed if missing)
    # A full run's budget: None means the requested rounds; every code base runs every
    # scenario, with these concurrent links.
    max_cold_rounds: int | None = None
    uncached_rounds: int | None = None  # rounds in which (a) and (b) link (None: all)
    concurrency: tuple[int, ...] = (2, 4)

    def build(self, top: Path, cache: Path) -> Build:
        """A fresh build in ``top`` by the code base's build system; links use ``cache``."""
        raise NotImplementedError

    def rebuild(self, build: Build, cache: Path) -> None:
        """Runs the build system again after a touch or an edit."""
        raise NotImplementedError

    def smoke(self, binary: Path, build: Build) -> list[str]:
        """A command that runs ``binary`` on a small workload and fails if it misbehaves."""
        raise NotImplementedError

    def touch(self, build: Build) -> int:
        """Touches every source file without changing it; returns how many."""
        count = 0
        for dirpath, _, files in os.walk(build.root):
            for f in files:
                if f.endswith(SOURCE_SUFFIXES):
                    os.utime(os.path.join(dirpath, f))
                    count += 1
        return count


LUA_SCRIPT = (
    "local t = {} for i = 1, 2000 do t[i] = (i * 7919) % 2003 end table.sort(t) "
    "local s = 0 for _, v in ipairs(t) do s = s + v end "
    "local co = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i) end end) "
    "assert(co() + co() + co() == 6) "
    "assert(#t == 2000 and t[1] <= t[2000] and string.format('%5.2f', math.pi) == ' 3.14') "
    "assert(('lua'):rep(3):upper():find('ALU') == 3) print('lua ok', s)"
)


class Lua(CodeBase):
    name = "lua"
    package = "lua5.4"
    language = "C"
    build_system = "make (its own Makefile, `make linux`)"
    program = "lua (lua.o + liblua.a, a regular static archive)"
    leaf = Edit("src/lua.c", "static void print_usage")
    hub = Edit("src/lobject.c", "int luaO_ceillog2")

    def build(self, top: Path, cache: Path) -> Build:
        src = lua.build(top, ldflags=build_ldflags(cache))
        return Build(root=top, cwd=src, link=capture(lua.link_command(OUT, []), OUT), top=top)

    def rebuild(self, build: Build, cache: Path) -> None:
        run(["make", "-j2", "linux", *lua.make_vars(), f"MYLDFLAGS={build_ldflags(cache)}"],
            build.cwd)  # fmt: skip

    def smoke(self, binary: Path, build: Build) -> list[str]:
        return [str(binary), "-e", LUA_SCRIPT]


class LevelDB(CodeBase):
    name = "leveldb"
    package = "leveldb"
    language = "C++"
    build_system = "cmake (Unix Makefiles)"
    program = "db_bench (db_bench.o + libleveldb.a, a regular static archive)"
    # db_bench includes util/testutil.h, which includes gmock (Debian's source has no
    # third_party/ copy of googletest).
    packages = ("libgmock-dev", "libgtest-dev")
    leaf = Edit("benchmarks/db_bench.cc", "void PrintWarnings()")
    hub = Edit("util/coding.cc", "void PutFixed32(")

    def build(self, top: Path, cache: Path) -> Build:
        if top.exists():
            shutil.rmtree(top)
        top.mkdir(parents=True)
        shutil.copytree(sources.fetch(self.package), top / "src")
        out = top / "build"
        run(["cmake", "-G", "Unix Makefiles", "-S", "src", "-B", "build",
             "-DCMAKE_BUILD_TYPE=Release",
             "-DCMAKE_C_COMPILER=clang", "-DCMAKE_CXX_COMPILER=clang++",
             "-DCMAKE_AR=" + str(LLVM_BIN / "llvm-ar"),
             "-DCMAKE_RANLIB=" + str(LLVM_BIN / "llvm-ranlib"),
             "-DCMAKE_C_FLAGS=-flto=thin", "-DCMAKE_CXX_FLAGS=-flto=thin",
             f"-DCMAKE_EXE_LINKER_FLAGS={build_ldflags(cache)}",
             "-DLEVELDB_BUILD_TESTS=OFF", "-DLEVELDB_BUILD_BENCHMARKS=ON",
             "-DLEVELDB_INSTALL=OFF"], top)  # fmt: skip
        build = Build(root=top / "src", cwd=out, link=(), top=top)
        self.rebuild(build, cache)
        link_txt = out / "CMakeFiles" / "db_bench.dir" / "link.txt"
        (line,) = [s for s in link_txt.read_text().splitlines() if s.strip()]
        return replace(build, link=capture(shlex.split(line), "db_bench"))

    def rebuild(self, build: Build, cache: Path) -> None:
        run(["cmake", "--build", ".", "--target", "db_bench", "-j2"], build.cwd)

    def smoke(self, binary: Path, build: Build) -> list[str]:
        db = build.top / "smoke-db"
        shutil.rmtree(db, ignore_errors=True)
        return [str(binary), "--benchmarks=fillseq,fillrandom,readrandom,readseq",
                "--num=20000", f"--db={db}"]  # fmt: skip


# Setup lines for the modules CPython 3.11 still builds with setup.py, with the flags its
# setup.py gives them. No "=" in a line: makesetup reads such a line as a make variable.
SETUP_PY_MODULES = [
    "_ctypes _ctypes/_ctypes.c _ctypes/callbacks.c _ctypes/callproc.c _ctypes/stgdict.c"
    " _ctypes/cfield.c -DHAVE_FFI_PREP_CIF_VAR -DHAVE_FFI_PREP_CLOSURE_LOC"
    " -DHAVE_FFI_CLOSURE_ALLOC -lffi",
    "_curses _cursesmodule.c -DHAVE_NCURSESW -I/usr/include/ncursesw -lncursesw -ltinfo",
    "_curses_panel _curses_panel.c -DHAVE_NCURSESW -I/usr/include/ncursesw -lpanelw"
    " -lncursesw -ltinfo",
    "readline readline.c -lreadline -ltinfo",
]
PYTHON_SMOKE = (
    "import json, math, _decimal, hashlib, re, collections, itertools, zlib, sys\n"
    "d = json.loads(json.dumps({'a': [1, 2.5, 'x']}))\n"
    "assert d['a'][2] == 'x' and math.isclose(sum(d['a'][:2]), 3.5)\n"
    "assert str(_decimal.Decimal(1) / _decimal.Decimal(7))[:8] == '0.142857'\n"
    "assert hashlib.sha256(b'abc').hexdigest().startswith('ba7816bf')\n"
    "assert re.sub(r'(\\w)(\\d)', r'\\2\\1', 'a1b2') == '1a2b'\n"
    "assert zlib.decompress(zlib.compress(b'x' * 1000)) == b'x' * 1000\n"
    "import ctypes, _curses, readline, _gdbm, sqlite3\n"
    "assert ctypes.CDLL(None).strlen(b'abcd') == 4\n"
    "assert sqlite3.connect(':memory:').execute('select 6 * 7').fetchone() == (42,)\n"
    "print('python ok', sys.version.split()[0], len(sys.builtin_module_names), 'built-in')\n"
)


class Python(CodeBase):
    name = "python3.11"
    package = "python3.11"
    language = "C"
    build_system = "configure + make (`--with-lto=thin`, stdlib modules built in)"
    program = (
        "python (its ~240 object files, stdlib modules included, and the regular static "
        "archives libmpdec.a and libexpat.a)"
    )
    leaf = Edit("Programs/python.c", "main(int argc, char **argv)")
    hub = Edit("Objects/object.c", "PyObject_Repr(PyObject *v)")
    # What configure looks for: without one of these, a module (and its jobs) drops out.
    packages = ("libbz2-dev", "libffi-dev", "libgdbm-dev", "liblzma-dev", "libncurses-dev",
                "libreadline-dev", "libsqlite3-dev", "libssl-dev", "tk-dev", "uuid-dev",
                "zlib1g-dev", "libnsl-dev", "libtirpc-dev", "libcrypt-dev")  # fmt: skip
    # Every uncached link compiles 253 modules (~1.8 min on 2 cores): cold scenarios run
    # once; in warm ones (a) and (b), a full compile each time, link in the first round
    # only; 2 concurrent links, not 4.
    max_cold_rounds = 1
    uncached_rounds = 1
    concurrency = (2,)

    def _make(self, cache: Path) -> list[str]:
        # LDFLAGS_NODIST is where configure's --with-lto puts -flto; DTLTO goes with it.
        return ["make", "-j2", "python", f"LDFLAGS_NODIST={build_ldflags(cache)}"]

    def build(self, top: Path, cache: Path) -> Build:
        if top.exists():
            shutil.rmtree(top)
        shutil.copytree(sources.fetch(self.package), top)
        env = {**ENV, "MODULE_BUILDTYPE": "static"}
        run(["./configure", "CC=clang", "--with-lto=thin", "LDFLAGS=-fuse-ld=lld",
             "AR=llvm-ar", "RANLIB=llvm-ranlib"], top, env)  # fmt: skip
        # Setup.local is CPython's own hook for building extension modules into the
        # interpreter. It gets the stdlib's list that configure wrote (marked *static*) to
        # Setup.stdlib, less _testinternalcapi (it needs the frozen getpath, which the
        # bootstrap program _freeze_module links without), plus the modules 3.11 still
        # builds with setup.py, whose lines Setup.stdlib leaves commented out.
        stdlib = (top / "Modules" / "Setup.stdlib").read_text().splitlines()
        at = stdlib.index("*static*") + 1
        modules = [s for s in stdlib if not s.startswith("_testinternalcapi ")]
        (top / "Modules" / "Setup.local").write_text(
            "\n".join([*modules[:at], *SETUP_PY_MODULES, *modules[at:]]) + "\n"
        )
        run(self._make(cache), top)
        kept = top / "python.kept"
        (top / "python").rename(kept)
        try:
            dry = run([*self._make(cache), "-n"], top)
        finally:
            kept.rename(top / "python")
        (line,) = [s for s in dry.splitlines() if " -o python " in s]
        return Build(root=top, cwd=top, link=capture(shlex.split(line), "python"), top=top)

    def rebuild(self, build: Build, cache: Path) -> None:
        run(self._make(cache), build.cwd)

    def smoke(self, binary: Path, build: Build) -> list[str]:
        return [str(binary), "-E", "-c", PYTHON_SMOKE]


CODEBASES: dict[str, CodeBase] = {c.name: c for c in (Lua(), LevelDB(), Python())}
