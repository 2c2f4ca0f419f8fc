"""usage: cached-dist serve [--idle-exit SECONDS] [--verbose | --quiet]

Runs the warm server in the foreground until SIGTERM or SIGINT (or SECONDS without a link):
links whose distributor is cached-dist-client (`cached-dist flags --server` prints the link
flags) are served by a child of this process when every job is a hit in the local cache,
without starting an interpreter; any other link the client runs through cached-dist as
usual. The socket is $CACHED_DIST_SOCKET, else $XDG_RUNTIME_DIR/cached-dist.sock, else
/tmp/cached-dist-$UID/server.sock; one server per socket. --verbose: a line per link."""

import os

from ...errors import UsageError
from ...log import Log
from ...serve import CLIENT, socket_path


def main(args: list[str]) -> int:
    idle, verbose, quiet = 0.0, False, False
    words = iter(args)
    for word in words:
        if word in ("-v", "--verbose"):
            verbose = True
        elif word in ("-q", "--quiet"):
            quiet = True
        elif word == "--idle-exit" or word.startswith("--idle-exit="):
            text = word.partition("=")[2] if "=" in word else next(words, "")
            idle = _seconds(text)
        else:
            raise UsageError(f"serve: unknown argument {word!r} (see cached-dist serve --help)")
    if not os.access(CLIENT, os.X_OK):
        raise UsageError(f"the warm server's client {CLIENT} is not built: reinstall cached-dist "
                         "where a C compiler is available")  # fmt: skip
    from ...serve.server import Server

    return Server(socket_path(os.environ), idle, Log(quiet=quiet, verbose=verbose)).run()


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"serve: --idle-exit needs a number of seconds >= 0, not {text!r}")
    return value
