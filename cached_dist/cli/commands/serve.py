"""usage: cached-dist serve [--idle-exit SECONDS] [--verbose | --quiet]
       cached-dist serve --status | --stop

Runs the warm server in the foreground until SIGTERM or SIGINT (or SECONDS without a link):
links whose distributor is cached-dist-client (what `cached-dist flags` prints) are served
by a child of this process when every job is a hit in the local cache, without starting an
interpreter; any other link the client runs through cached-dist as usual. A link through
the client that finds no server starts one itself, in the background, once it is done
(--no-server: not). The socket is $CACHED_DIST_SOCKET, else
$XDG_RUNTIME_DIR/cached-dist.sock, else /tmp/cached-dist-$UID/server.sock; one server per
socket (a socket a dead server left is replaced, anything else at that path refused).
--verbose: a line per link.

--status: whether a server listens on the socket (its pid; exit status 0), or not (1).
--stop: ends that server (SIGTERM) and waits for it to exit; exit status 0, also when none
listens."""

import os

from ...errors import UsageError
from ...log import Log
from ...options import idle_seconds
from ...serve import require_client, socket_path


def main(args: list[str]) -> int:
    if "--status" in args or "--stop" in args:
        return _control(args)
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


def _control(args: list[str]) -> int:
    """``--status`` or ``--stop``, alone."""
    if len(args) != 1:
        raise UsageError("serve: --status and --stop take no other argument")
    from ...serve import control

    path = socket_path(os.environ)
    pid = control.find(path)
    if args[0] == "--status":
        print(f"a server listens on {path} (pid {pid})" if pid else
              f"no server listens on {path}")  # fmt: skip
        return 0 if pid else 1
    if not pid:
        print(f"no server listens on {path}")
        return 0
    if not control.stop(pid):
        Log().error(f"the server on {path} (pid {pid}) did not exit within "
                    f"{control.STOP_WAIT:g} s of SIGTERM")  # fmt: skip
        return 1
    print(f"stopped the server on {path} (pid {pid})")
    return 0
