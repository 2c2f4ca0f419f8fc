"""The compiler launcher ``cached-dist-cc`` (``cc.c``, built at install), which makes bitcode
independent of the checkout's path so that checkouts at other paths share backend results.

clang records a source file's path as given in the module's ``source_filename``, and ThinLTO
derives local symbols' GUIDs and the module hash from it; CMake compiles by absolute path, so
without the launcher two checkouts compile different bitcode and share nothing. The launcher
rewrites absolute paths under a base directory relative to the compiler's working directory,
then execs the compiler (see cc.c). ``cached-dist flags --launcher`` prints its command line.
"""

from __future__ import annotations

import os

from ..errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: The launcher, next to this file once built (setup.py).
LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cached-dist-cc")


def require_launcher() -> str:
    """LAUNCHER, or the error ``flags --launcher`` gives without it."""
    if not os.access(LAUNCHER, os.X_OK):
        raise UsageError(f"the compiler launcher {LAUNCHER} is not built: reinstall "
                         "cached-dist where a C compiler is available")  # fmt: skip
    return LAUNCHER


def command_line(args: Sequence[str], form: str, environ: Mapping[str, str]) -> str:
    """What ``cached-dist flags --launcher[=FORM] ARGS`` prints: the launcher's command as
    words quoted for a POSIX shell (FORM ``""``: ``CC="$(...) clang"``), or as a CMake list
    (FORM ``cmake``: ``-DCMAKE_C_COMPILER_LAUNCHER="$(...)"``; CMake runs the first element of
    a string with spaces as one program name)."""
    if form not in ("", "cmake"):
        raise UsageError(f"--launcher={form}: expected --launcher or --launcher=cmake")
    base, prefix_map = _launcher_options(args)
    if base is None:
        base = _configured_base(environ)
    words = [require_launcher()]
    if base is not None:
        words.append(f"--base-dir={_directory(base)}")
    if prefix_map is not None:
        words.append(prefix_map)
    if form == "cmake":
        for word in words:
            if ";" in word:
                raise UsageError(f"{word!r} contains ';', which CMake would split")
        return ";".join(words)
    import shlex

    return " ".join(shlex.quote(word) for word in words)


def _launcher_options(args: Sequence[str]) -> tuple[str | None, str | None]:
    """(--base-dir's value, the --prefix-map word) of ``flags --launcher``'s arguments."""
    base = prefix_map = None
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--base-dir":
            if i + 1 >= len(args):
                raise UsageError("option --base-dir needs a value (DIR)")
            base = args[i + 1]
            i += 1
        elif word.startswith("--base-dir="):
            base = word.removeprefix("--base-dir=")
        elif word == "--prefix-map" or (word.startswith("--prefix-map=") and len(word) > 13):
            prefix_map = word
        else:
            raise UsageError(f"{word!r} is not a launcher option: `cached-dist flags --launcher` "
                             "takes --base-dir and --prefix-map")  # fmt: skip
        i += 1
    return base, prefix_map


def _configured_base(environ: Mapping[str, str]) -> str | None:
    """The config file's ``base-dir`` (the same file links read), if it has one."""
    from ..options import config_table, default_config_file

    named = environ.get("CACHED_DIST_CONFIG")
    path = os.path.expanduser(named) if named else default_config_file(environ)
    value = config_table(path, required=bool(named)).get("base-dir")
    if value is not None and (not isinstance(value, str) or not value):
        raise UsageError(f"config file {path}: base-dir: expected a directory, got {value!r}")
    return value


def _directory(path: str) -> str:
    """``path`` made absolute (the launcher runs in build directories), checked to be one."""
    absolute = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(absolute):
        what = "not a directory" if os.path.exists(absolute) else "no such directory"
        raise UsageError(f"base directory {absolute}: {what}")
    if absolute == "/":
        raise UsageError("base directory /: it would rewrite system paths; use the checkout's "
                         "top directory")  # fmt: skip
    return absolute
