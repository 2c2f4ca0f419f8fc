"""Which files a backend command writes, read as clang-22's driver reads its command line.

The job file checks (checks.py) let a compile write where its job says and nowhere else it
names. clang takes its object's file in many spellings (``-o F``, ``-oF``, ``--output=F``,
``--output F``; in clang-cl mode ``/o F``, ``/FoF``, ``/Fo:F``, ``/clang:-oF``), other options
name files it writes too (``-MJ F``, ``-ftime-trace=F``, ``-Xclang -stats-file=F``...) or a
directory or prefix for files it names itself (``-dumpdir P``). Each is read here as clang-22's
option parser reads it (longest name first, the last object option winning), as measured with
``clang -###``; docs/reference.md lists them and what the checks decide for each.

Left alone: options that write under names clang derives from the object's or the module's
(``-ftime-trace``, ``-gsplit-dwarf``, ``-save-temps``, clang-cl's ``/FA``...: a user's
debugging request through LLD, which no job file could declare; the key never caches those
jobs, keys/side_outputs.py), options that make the built program write
(``-fprofile-generate=``) and crash reports under fresh names (``-fcrash-diagnostics-dir=``).
Nothing here runs clang: the checks run on every link, before anything is touched.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# What an option's value is: the object's file, another file the compile writes, a stream
# of arguments for another parser (cc1, LLVM, or the driver itself), or nothing to read.
OBJECT, FILE, CC1, LLVM, DRIVER, SKIP = "object", "file", "cc1", "llvm", "driver", "skip"
# Refused whatever the job declares: a directory or prefix where clang names files itself,
# and arguments read from elsewhere.
PLACE, ELSEWHERE = "place", "elsewhere"

_PLACE_WHY = "which makes clang write files of its own naming where the job does not say"
_ELSEWHERE_WHY = "which makes clang read arguments these checks cannot see"
_OBJECT_WHY = "which leaves clang-cl to name the object after the module"

# The driver in its GNU modes (gcc, g++, cpp): options whose value is the next argument.
_GNU_SEPARATE = {
    "-o": OBJECT, "--output": OBJECT,
    "-MF": FILE, "-MJ": FILE, "-dependency-file": FILE, "-dependency-dot": FILE,
    "--serialize-diagnostics": FILE,
    "-dumpdir": PLACE, "--config": ELSEWHERE,
    "-Xclang": CC1, "-mllvm": LLVM, "-Xarch_host": DRIVER, "-Xarch_device": DRIVER,
    "-Xassembler": SKIP, "-Xlinker": SKIP, "-Xpreprocessor": SKIP, "-Xclangas": SKIP,
    "-Xanalyzer": SKIP, "-Xopenmp-target": SKIP, "-Xcuda-ptxas": SKIP,
    "-Xcuda-fatbinary": SKIP, "-MT": SKIP, "-MQ": SKIP,
}  # fmt: skip
# ... and whose value is joined to the name (checked in this order: longest first).
_GNU_JOINED = (
    ("--output=", OBJECT), ("-ftime-trace=", FILE), ("-foptimization-record-file=", FILE),
    ("-fproc-stat-report=", FILE),
    ("-fthin-link-bitcode=", FILE), ("-fmodule-output=", FILE), ("-MF", FILE), ("-MJ", FILE),
    ("--config", ELSEWHERE), ("-Xclang=", CC1), ("-mllvm=", LLVM),
    ("-Xopenmp-target=", SKIP), ("-Xclangas=", SKIP),
)  # fmt: skip
# "-oFILE" is the object, unless the argument is one of these longer options.
_GNU_NOT_O = ("-object-file-name=",)
_GNU_FLAGS_NOT_O = ("-object",)

# clang -cc1, reached through -Xclang: its own names for the same files.
_CC1_SEPARATE = {
    "-o": OBJECT,
    "-dependency-file": FILE, "-dependency-dot": FILE, "-serialize-diagnostic-file": FILE,
    "-opt-record-file": FILE, "-split-dwarf-output": FILE, "-stack-usage-file": FILE,
    "-coverage-notes-file": FILE, "-header-include-file": FILE, "-diagnostic-log-file": FILE,
    "-dumpdir": PLACE, "-mllvm": LLVM,
    "-MT": SKIP, "-MQ": SKIP, "-split-dwarf-file": SKIP, "-main-file-name": SKIP,
    "-opt-record-format": SKIP, "-opt-record-passes": SKIP,
}  # fmt: skip
_CC1_JOINED = (
    ("-ftime-trace=", FILE), ("-stats-file=", FILE), ("-coverage-notes-file=", FILE),
    ("-fthin-link-bitcode=", FILE), ("-fmodule-output=", FILE),
)  # fmt: skip
_CC1_NOT_O = ("-object-file-name", "-objc-isystem", "-objcxx-isystem", "-opt-record-")

# LLVM's own options (-mllvm) of LLVM 22 that write a file they name, and those that write
# files named by LLVM in a directory or after a prefix they give.
_LLVM_FILES = frozenset((
    "info-output-file", "lto-pass-remarks-output", "lto-stats-file", "dot-cfg-mssa",
    "lowertypetests-write-summary", "wholeprogramdevirt-write-summary", "as-secure-log-file",
    "amdgpu-module-splitting-print-module-dotcfg",
    "amdgpu-module-splitting-print-partition-summaries",
))  # fmt: skip
_LLVM_PLACES = frozenset((
    "ir-dump-directory", "dot-cfg-dir", "cfg-dot-filename-prefix",
    "callgraph-dot-filename-prefix", "attributor-depgraph-dot-filename-prefix",
    "dot-ddg-filename-prefix", "mcfg-dot-filename-prefix", "memprof-dot-file-path-prefix",
))  # fmt: skip

# clang-cl mode: options spelled with "/" or "-", by the name after it.
_CL_SEPARATE = {"o": OBJECT, "Fo:": OBJECT}
_CL_NOT_O = frozenset(("openmp", "openmp-", "openmp:experimental"))
# GNU options clang-cl also reads (any other "-" option it ignores, with a warning).
_CL_GNU_SEPARATE = {"-Xclang": CC1, "-mllvm": LLVM, "-Xlinker": SKIP, "--config": ELSEWHERE}
_CL_GNU_JOINED = (
    ("-ftime-trace=", FILE), ("-fthin-link-bitcode=", FILE), ("-fmodule-output=", FILE),
    ("--config", ELSEWHERE), ("-Xclang=", CC1), ("-mllvm=", LLVM),
)  # fmt: skip

#: What clang's driver makes of its program's name (clang's parseDriverSuffix, in order).
_SUFFIXES = (("clang", "gcc"), ("clang++", "g++"), ("clang-c++", "g++"), ("clang-cc", "gcc"),
             ("clang-cpp", "cpp"), ("clang-g++", "g++"), ("clang-gcc", "gcc"),
             ("clang-cl", "cl"), ("cc", "gcc"), ("cpp", "cpp"), ("cl", "cl"), ("++", "g++"),
             ("flang", "flang"), ("flang-new", "flang"), ("clang-dxc", "dxc"))  # fmt: skip
#: Driver modes whose output options are read here (flang's are the GNU ones).
MODES = ("gcc", "g++", "cpp", "flang", "cl")


def _suffix_mode(name: str) -> str | None:
    return next((mode for suffix, mode in _SUFFIXES if name.endswith(suffix)), None)


def program_mode(program: str) -> str | None:
    """The driver mode clang infers from its program's name (``clang-cl-22`` -> ``cl``,
    ``x86_64-linux-gnu-g++`` -> ``g++``), or None if the name is not a compiler driver's."""
    name = program.rpartition("/")[2]
    mode = _suffix_mode(name)
    if mode is None and name.endswith(".exe"):
        name = name[:-4]
        mode = _suffix_mode(name)
    if mode is None:
        name = name.rstrip("0123456789.")
        mode = _suffix_mode(name)
    if mode is None and "-" in name:
        mode = _suffix_mode(name[: name.rfind("-")])
    return mode


def driver_mode(program: str, args: Sequence[str]) -> str:
    """The mode clang runs in: the last ``--driver-mode=`` argument, else its name's."""
    mode = None
    for arg in args:
        if arg.startswith("--driver-mode="):
            mode = arg[14:]
    return mode if mode is not None else program_mode(program) or "gcc"


class Found:
    """What a command line writes: each ``(shown, path)`` of the object (the last one
    counts, but each is checked) and of other files, the first ``(shown, why)`` refused
    whatever the job declares, and whether every option got its value."""

    __slots__ = ("clean", "files", "objects", "refused")

    def __init__(self) -> None:
        self.objects: list[tuple[str, str]] = []
        self.files: list[tuple[str, str]] = []
        self.refused: tuple[str, str] | None = None
        self.clean = True

    def refuse(self, shown: str, why: str) -> None:
        if self.refused is None:
            self.refused = (shown, why)

    def then(self, more: Found) -> Found:
        """This command part followed by ``more``."""
        both = Found()
        both.objects = self.objects + more.objects
        both.files = self.files + more.files
        both.refused = self.refused or more.refused
        both.clean = more.clean
        return both


def read(args: Sequence[str], mode: str) -> Found:
    """What ``args`` (a command line after its program) write, in driver mode ``mode``
    (one of MODES)."""
    found = Found()
    stream = _Cl(found) if mode == "cl" else _Gnu(found)
    for arg in args:
        stream.feed(arg)
    found.clean = stream.idle()
    return found


def cl_output(value: str, extension: str = ".obj") -> str | None:
    """The file clang-cl writes for ``/FoVALUE`` or ``/o VALUE`` (``/FaVALUE``: ``.asm``):
    the extension is added when the name has none; None when it names no file (empty, or a
    directory), where clang-cl names the file after the module."""
    if not value or value.endswith("/"):
        return None
    name = value.rpartition("/")[2]
    return value if "." in name and name not in (".", "..") else value + extension


class _Stream:
    """One parser's arguments: the driver's, or those it passes to cc1 or LLVM."""

    def __init__(self, found: Found, label: str = "") -> None:
        self.found = found
        self.label = label  # how its arguments are passed: "-Xclang ", "-mllvm "...
        self.waiting: tuple[str, str] | None = None  # (kind, option) awaiting its value
        self.inner: _Stream | None = None  # -Xclang/-mllvm: the next argument is for it
        self.streams: dict[str, _Stream] = {}

    def idle(self) -> bool:
        return self.waiting is None and self.inner is None and all(
            s.idle() for s in self.streams.values())  # fmt: skip

    def feed(self, arg: str) -> None:
        if self.inner is not None:
            inner, self.inner = self.inner, None
            inner.feed(arg)
        elif self.waiting is not None:
            (kind, option), self.waiting = self.waiting, None
            self.value(kind, f"{option} {arg}", arg)
        else:
            self.option(arg)

    def option(self, arg: str) -> None:
        raise NotImplementedError

    def separate(self, kind: str, arg: str) -> None:
        """``arg`` takes the next argument (of this stream) as its value."""
        if kind in (CC1, LLVM, DRIVER):
            self.inner = self.stream(kind)
        else:
            self.waiting = (kind, arg)

    def stream(self, kind: str) -> _Stream:
        found = self.streams.get(kind)
        if found is None:
            if kind == CC1:
                found = _Cc1(self.found, "-Xclang ")
            elif kind == LLVM:
                found = _Llvm(self.found, "-mllvm ")
            else:
                found = type(self)(self.found, self.label)
            self.streams[kind] = found
        return found

    def value(self, kind: str, shown: str, value: str) -> None:
        if kind == OBJECT:
            self.found.objects.append((self.label + shown, value))
        elif kind == FILE:
            self.found.files.append((self.label + shown, value))
        elif kind == PLACE:
            self.found.refuse(self.label + shown, _PLACE_WHY)
        elif kind == ELSEWHERE:
            self.found.refuse(self.label + shown, _ELSEWHERE_WHY)
        elif kind in (CC1, LLVM, DRIVER):
            self.stream(kind).feed(value)


class _Gnu(_Stream):
    """The driver's own arguments in its GNU modes."""

    def option(self, arg: str) -> None:
        if arg[:1] != "-":
            if arg[:1] == "@":
                self.found.refuse(self.label + arg, _ELSEWHERE_WHY)
            return
        kind = _GNU_SEPARATE.get(arg)
        if kind is not None:
            self.separate(kind, arg)
        elif arg.startswith("-Xarch_"):
            self.separate(DRIVER, arg)
        elif arg.startswith("-Xoffload-linker"):
            self.separate(SKIP, arg)
        elif arg[1:2] == "o":
            if arg not in _GNU_FLAGS_NOT_O and not arg.startswith(_GNU_NOT_O):
                self.value(OBJECT, arg, arg[2:])
        else:
            for prefix, kind in _GNU_JOINED:
                if arg.startswith(prefix):
                    if kind == FILE and len(arg) == len(prefix):
                        break  # -ftime-trace= names no file: clang writes none
                    self.value(kind, arg, arg[len(prefix) :])
                    break


class _Cc1(_Stream):
    """Arguments for clang -cc1, passed with -Xclang."""

    def option(self, arg: str) -> None:
        if arg[:1] != "-":
            return
        kind = _CC1_SEPARATE.get(arg)
        if kind is not None:
            self.separate(kind, arg)
        elif arg[1:2] == "o":
            if not arg.startswith(_CC1_NOT_O):
                self.value(OBJECT, arg, arg[2:])
        else:
            for prefix, kind in _CC1_JOINED:
                if arg.startswith(prefix):
                    self.value(kind, arg, arg[len(prefix) :])
                    break


class _Llvm(_Stream):
    """LLVM's own options, passed with -mllvm: ``-NAME=VALUE``, or ``-NAME`` then VALUE."""

    def option(self, arg: str) -> None:
        name, eq, value = arg.lstrip("-").partition("=")
        if name in _LLVM_PLACES:
            self.found.refuse(self.label + arg, _PLACE_WHY)
        elif name in _LLVM_FILES:
            if eq:
                self.value(FILE, arg, value)
            else:
                self.waiting = (FILE, arg)
        elif name == "dataflow-log" and eq:
            self.value(FILE, arg, value)


class _Cl(_Stream):
    """The driver's arguments in clang-cl mode: its own options, spelled ``/NAME`` or
    ``-NAME``, and the GNU ones it reads too."""

    def stream(self, kind: str) -> _Stream:
        if kind == DRIVER:  # /clang:ARG: an argument for the driver as in its GNU modes
            if "gnu" not in self.streams:
                self.streams["gnu"] = _Gnu(self.found, "/clang:")
            return self.streams["gnu"]
        return super().stream(kind)

    def value(self, kind: str, shown: str, value: str) -> None:
        if kind == OBJECT:
            path = cl_output(value)
            if path is None:
                self.found.refuse(self.label + shown, _OBJECT_WHY)
                return
            self.found.objects.append((shown, path))
            return
        super().value(kind, shown, value)

    def option(self, arg: str) -> None:
        if arg[:1] not in ("/", "-"):
            if arg[:1] == "@":
                self.found.refuse(arg, _ELSEWHERE_WHY)
            return
        name = arg[1:]
        kind = _CL_SEPARATE.get(name)
        if kind is None and arg[0] == "-":
            kind = _CL_GNU_SEPARATE.get(arg)
        if kind is not None:
            self.separate(kind, arg)
        elif name.startswith("clang:"):
            self.stream(DRIVER).feed(name[6:])
        elif name[:1] == "o" and name not in _CL_NOT_O:
            self.value(OBJECT, arg, name[1:])
        elif name.startswith("Fo"):
            self.value(OBJECT, arg, name[3:] if name.startswith("Fo:") else name[2:])
        elif name.startswith("Fa") and len(name) > 2:  # /Fa alone: named after the module
            path = cl_output(name[2:], ".asm")
            if path is None:
                self.found.refuse(arg, _PLACE_WHY)
            else:
                self.found.files.append((arg, path))
        elif arg[0] == "-":
            for prefix, kind in _CL_GNU_JOINED:
                if arg.startswith(prefix):
                    self.value(kind, arg, arg[len(prefix) :])
                    break
