"""usage: cached-dist flags [--no-server] [--libtool | --lld-link] [--cc COMPILER]... [OPTIONS]
                         [-- INNER [ARGS...]]
       cached-dist flags --launcher[=cmake] [--base-dir DIR] [--prefix-map[=NAME]]

Prints, as one line of shell words, the compiler-driver flags that link through cached-dist:

  -fuse-ld=lld -flto=thin -fthinlto-distributor=/abs/path/cached_dist/serve/cached-dist-client
  -Xthinlto-distributor=/abs/path/cached-dist [-Xthinlto-distributor=...]

so that LDFLAGS="$(cached-dist flags)" works (and CMAKE_EXE_LINKER_FLAGS, c_link_args).
The distributor is the warm server's client: it hands each link to `cached-dist serve`,
which serves full hits without starting Python, and runs cached-dist itself for any other
link (the first link with no server running starts one: see `cached-dist serve --help`).
With --no-server (or where the client was not built), cached-dist itself is the distributor.
--server, the client form, is accepted too. With --libtool, the same as linker flags
(-Wl,--thinlto-distributor=... and the jobs' compiler), which libtool passes to every link,
shared libraries' included (autotools).
With --lld-link, lld-link's own flags for a Windows-style build (clang-cl or clang with
lld-link, which clang's driver does not pass a distributor to): /thinlto-distributor:...,
/thinlto-remote-compiler: naming the clang beside the compiler, /thinlto-distributor-arg:...
for each option word (CMAKE_EXE_LINKER_FLAGS with CMAKE_LINKER=lld-link; clang-cl's /link).
OPTIONS are cached-dist options, checked now and passed to every link (relative paths made
absolute); the environment and config file are read at link time instead.

It first checks that the compiler the build links with can do DTLTO (clang 21 or later with
lld; with --lld-link, a clang or clang-cl and an lld-link 21 or later beside it or on PATH):
each --cc COMPILER, else $CC (default: clang) and $CXX when set. If it cannot: one error
line, exit status 2.

With --launcher, it prints instead the compiler launcher's command (cached-dist-cc), which
rewrites absolute paths under the base directory relative to the compiler's working
directory so that checkouts at other paths share results: CC="$(cached-dist flags
--launcher) clang", or with --launcher=cmake as a CMake list for CMAKE_<LANG>_COMPILER_LAUNCHER.
--base-dir DIR (else the config file's base-dir; else, at compile time, $CACHED_DIST_BASE_DIR
or the checkout's top directory) and --prefix-map[=NAME] (-ffile-prefix-map=BASE=NAME on
every compile, NAME default '.') go into that command."""

import os
import shlex
import shutil
import sys

from ...errors import UsageError
from ...options import BY_FLAG, resolve
from .. import driver


def main(args: list[str]) -> int:
    own = args[: args.index("--") if "--" in args else len(args)]
    form = next((a for a in own if a == "--launcher" or a.startswith("--launcher=")), None)
    if form is not None:
        from ...launcher import command_line

        rest = list(args)
        rest.remove(form)
        print(command_line(rest, form.partition("=")[2], os.environ))
        return 0
    server, libtool, lld_link = _through_server(own), "--libtool" in own, "--lld-link" in own
    if libtool and lld_link:
        raise UsageError("--libtool and --lld-link cannot be combined (libtool drives "
                         "clang's driver, not lld-link)")  # fmt: skip
    args = [a for a in own if a not in MODES] + args[len(own) :]
    compilers, words = _take_cc(args)
    options, inner = _split_inner(words)
    # Everything a link would check, now, at configure time, not in every link: the options
    # baked in, and the environment and config file the links will read as well.
    resolve(options, inner, os.environ, "flags")
    distributor = distributor_path()
    if lld_link:
        backend = [driver.check_lld_link(words, os.environ)
                   for words in driver.drivers(compilers, os.environ)]  # fmt: skip
        flags = lld_link_flags(distributor, options, inner, backend[0], server)
        print(" ".join(shlex.quote(flag) for flag in flags))
        return 0
    backend = [driver.check(words, distributor, os.environ)
               for words in driver.drivers(compilers, os.environ)]  # fmt: skip
    flags = link_flags(distributor, options, inner)
    if server:
        flags = _through_client(flags, distributor)
    if libtool:
        flags = through_linker(flags, backend[0])
    print(" ".join(shlex.quote(flag) for flag in flags))
    return 0


MODES = ("--server", "--no-server", "--libtool", "--lld-link")


def lld_link_flags(
    distributor: str, options: list[str], inner: list[str], compiler: str, server: bool
) -> list[str]:
    """lld-link's flags: the distributor (the server's client, cached-dist its first word,
    with ``server``), the backend compiler, and one ``/thinlto-distributor-arg:`` per word,
    which lld-link passes as it is (no comma splitting, unlike clang's driver)."""
    words = [*_absolute_paths(options), *(["--", *inner] if inner else [])]
    if server:
        from ...serve import require_client

        words = [distributor, *words]
        distributor = require_client()
    return [f"/thinlto-distributor:{distributor}", f"/thinlto-remote-compiler:{compiler}",
            *(f"/thinlto-distributor-arg:{word}" for word in words)]  # fmt: skip


def _through_server(own: list[str]) -> bool:
    """Whether the client is the distributor: by default where it was built (the warm path
    is an optimisation: without it, nothing is said), always with --server (an error
    without it), never with --no-server."""
    if "--server" in own and "--no-server" in own:
        raise UsageError("--server and --no-server cannot be combined")
    if "--no-server" in own:
        return False
    from ...serve import CLIENT

    return "--server" in own or os.access(CLIENT, os.X_OK)


def through_linker(flags: list[str], compiler: str) -> list[str]:
    """The same flags given to lld itself with ``-Wl,``, which libtool passes on: it drops
    ``-fthinlto-distributor=`` from a shared library's link (which then does its ThinLTO in
    process, silently; a program's link keeps it, with libtool 2.4.7). The driver names
    itself as the jobs' compiler; here ``compiler``, the one the check found, is named
    instead."""
    if "," in compiler:
        raise UsageError(f"the compiler path {compiler!r} contains a comma, which clang would "
                         "split")  # fmt: skip
    out = []
    for flag in flags:
        if flag.startswith("-fthinlto-distributor="):
            out += [f"-Wl,--thinlto-distributor={flag.partition('=')[2]}",
                    f"-Wl,--thinlto-remote-compiler={compiler}"]  # fmt: skip
        elif flag.startswith("-Xthinlto-distributor="):
            out += [f"-Wl,--thinlto-distributor-arg={word}"
                    for word in flag.partition("=")[2].split(",")]  # fmt: skip
        else:
            out.append(flag)
    return out


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
