"""usage: cached-dist flags [--server] [--cc COMPILER]... [OPTIONS] [-- INNER [ARGS...]]

Prints, as one line of shell words, the compiler-driver flags that link through cached-dist:

  -fuse-ld=lld -flto=thin -fthinlto-distributor=/abs/path/cached-dist [-Xthinlto-distributor=...]

so that LDFLAGS="$(cached-dist flags)" works (and CMAKE_EXE_LINKER_FLAGS, c_link_args).
With --server, the distributor is the warm server's client, which runs cached-dist itself
whenever `cached-dist serve` cannot serve a link (see `cached-dist serve --help`).
OPTIONS are cached-dist options, checked now and passed to every link (relative paths made
absolute); the environment and config file are read at link time instead.

It first checks that the compiler the build links with can do DTLTO (clang 21 or later with
lld): each --cc COMPILER, else $CC (default: clang) and $CXX when set. If it cannot: one
error line, exit status 2."""

import os
import shlex
import shutil
import sys

from ...errors import UsageError
from ...options import BY_FLAG, parse_flags
from .. import driver


def main(args: list[str]) -> int:
    server = "--server" in args[: args.index("--") if "--" in args else len(args)]
    if server:
        args = list(args)
        args.remove("--server")
    compilers, words = _take_cc(args)
    options, inner = _split_inner(words)
    parse_flags(options)  # a typo fails now, at configure time, not in every link
    distributor = distributor_path()
    for words_of_driver in driver.drivers(compilers, os.environ):
        driver.check(words_of_driver, distributor, os.environ)
    flags = link_flags(distributor, options, inner)
    if server:
        flags = _through_client(flags, distributor)
    print(" ".join(shlex.quote(flag) for flag in flags))
    return 0


def _through_client(flags: list[str], distributor: str) -> list[str]:
    """The client as the distributor, cached-dist its first word (what it runs when the
    server does not serve a link)."""
    from ...serve import require_client

    client = require_client()
    if "," in distributor:
        raise UsageError(f"the path {distributor!r} contains a comma, which clang would split")
    at = flags.index(f"-fthinlto-distributor={distributor}")
    return [*flags[:at], f"-fthinlto-distributor={client}",
            f"-Xthinlto-distributor={distributor}", *flags[at + 1 :]]  # fmt: skip


def link_flags(distributor: str, options: list[str], inner: list[str]) -> list[str]:
    """The driver flags: one ``-Xthinlto-distributor=`` per option word, one for the inner command.

    clang splits ``-Xthinlto-distributor=`` values on commas, so a word with a comma cannot be
    passed this way (the environment or the config file can carry it).
    """
    for word in [*options, *inner]:
        if "," in word:
            raise UsageError(f"{word!r} contains a comma, which clang would split: "
                             "set it in the environment or the config file instead")  # fmt: skip
    flags = ["-fuse-ld=lld", "-flto=thin", f"-fthinlto-distributor={distributor}"]
    flags += [f"-Xthinlto-distributor={word}" for word in _absolute_paths(options)]
    if inner:
        flags.append("-Xthinlto-distributor=" + ",".join(["--", *inner]))
    return flags


def distributor_path() -> str:
    """This program's absolute path: the console script that is running, else the one on PATH."""
    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script).startswith("cached-dist") and os.path.isfile(script):
        return os.path.abspath(script)
    found = shutil.which("cached-dist")
    if found is None:
        raise UsageError("cannot find the cached-dist program on PATH (is it installed?)")
    return os.path.abspath(found)


def _take_cc(args: list[str]) -> tuple[list[str], list[str]]:
    compilers: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args) and args[i] != "--":
        word = args[i]
        if word == "--cc":
            if i + 1 >= len(args):
                raise UsageError("option --cc needs a value (COMPILER)")
            compilers.append(args[i + 1])
            i += 2
            continue
        if word.startswith("--cc="):
            compilers.append(word.removeprefix("--cc="))
        else:
            rest.append(word)
        i += 1
    return compilers, rest + args[i:]


def _split_inner(words: list[str]) -> tuple[list[str], list[str]]:
    if "--" not in words:
        return words, []
    cut = words.index("--")
    if cut + 1 == len(words):
        raise UsageError("'--' must be followed by the inner distributor's command")
    return words[:cut], words[cut + 1 :]


def _absolute_paths(options: list[str]) -> list[str]:
    """Path values made absolute: a link runs in the build directory, not here."""
    out: list[str] = []
    takes_path = False
    for word in options:
        if takes_path:
            out.append(_absolute(word))
            takes_path = False
            continue
        flag, eq, value = word.partition("=")
        spec = BY_FLAG.get(flag)
        is_path = spec is not None and spec.metavar in {"DIR", "FILE"}
        if is_path and eq:
            out.append(f"{flag}={_absolute(value)}")
        else:
            out.append(word)
            takes_path = is_path
    return out


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))
