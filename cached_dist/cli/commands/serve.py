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
from ...options import idle_seconds
from ...serve import require_client, socket_path


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
            try:
                idle = idle_seconds(text)  # as the options' idle times: 0 turns it off
            except ValueError as e:
                raise UsageError(f"serve: --idle-exit: {e}") from None
        else:
            raise UsageError(f"serve: unknown argument {word!r} (see cached-dist serve --help)")
    require_client()
    from ...serve.server import Server

    return Server(socket_path(os.environ), idle, Log(quiet=quiet, verbose=verbose)).run()
