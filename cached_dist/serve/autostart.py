"""The warm server started on first use: after a link the client found no server for.

``cached-dist-client`` (client.c) runs cached-dist with ``CACHED_DIST_AUTOSTART=1`` when
nothing listens at the socket. Once that link is over (its outputs written, its summary
printed: cached_dist/link/flow.py), cached-dist starts ``cached-dist serve --idle-exit
SECONDS --quiet`` in the background and does not wait for it, so the next link is served
warm. The server is detached from everything the link had: a session of its own (no
terminal, no signal meant for the build's process group), the root directory as its
working directory, standard streams on /dev/null and no other descriptor (a build tool
waits for the end of the pipes it gave the link: make's output, its jobserver's). Two links
that start one at once are fine: the server's lock on ``SOCKET.lock`` makes the second exit.

Not started where a server could not be ours to keep (:func:`may_start`), nor for a program
the server could not stand in for (:func:`program`). ``os.posix_spawn``: no ``subprocess``
import (~10 ms) in the link that starts it.
"""

from __future__ import annotations

import os
import stat
import sys

from . import default_socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    from collections.abc import Mapping
else:  # signal's own core, built in: `signal` imports enum (~25 ms of the link starting it)
    import _signal

#: Set by the client for cached-dist when no server listens at the socket (read by
#: cached_dist/link/flow.py, which imports this module only then).
VARIABLE = "CACHED_DIST_AUTOSTART"
#: What the started server resets to their defaults: a link may run with some ignored (under
#: nohup, or by a build tool), which a server started from a shell would not inherit.
_DEFAULT_SIGNALS = (_signal.SIGHUP, _signal.SIGINT, _signal.SIGQUIT, _signal.SIGTERM,
                    _signal.SIGPIPE, _signal.SIGXFSZ)  # fmt: skip


def may_start(path: str) -> bool:
    """Whether a server may be started for ``path``: its directory is one of this user's
    that this user can write (the default one under /tmp may be missing: the server makes it,
    private), and nothing but a socket (one a server left) lies at the path itself. A
    directory of someone else's (a shared /tmp, another user's runtime directory) would let
    them replace the socket or its lock: no server of ours is started there."""
    directory = os.path.dirname(path) or "."
    uid = os.getuid()
    try:
        if path == default_socket():  # the server's own rules for it (server.py)
            try:
                st = os.lstat(directory)
            except FileNotFoundError:
                return os.access(os.path.dirname(directory), os.W_OK | os.X_OK)
            if st.st_mode & 0o077 or stat.S_ISLNK(st.st_mode):
                return False
        else:
            st = os.stat(directory)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            return False
        if not os.access(directory, os.W_OK | os.X_OK):
            return False
    except OSError:
        return False
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def program() -> str | None:
    """The program this process runs as, which the server is started as (it serves links
    for the program it was started as: server.py ``Identity``), if it can be run: not a
    ``python -m cached_dist``."""
    path = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        return None
    return path


def start(path: str, idle_exit: float, environ: Mapping[str, str]) -> int:
    """Starts the server for the socket ``path`` in the background: its pid, or 0 if it was
    not started (nothing says so: the warm path is an optimisation)."""
    exe = program()
    if exe is None or not may_start(path):
        return 0
    env = {k: v for k, v in environ.items() if k != VARIABLE}
    if "CACHED_DIST_SOCKET" in env:
        env["CACHED_DIST_SOCKET"] = os.path.abspath(path)  # the server runs in /
    argv = [exe, "serve", f"--idle-exit={idle_exit!r}", "--quiet"]
    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        actions: list[tuple[int, ...]] = [
            (os.POSIX_SPAWN_DUP2, null, 0),
            (os.POSIX_SPAWN_DUP2, null, 1),
            (os.POSIX_SPAWN_DUP2, null, 2),
        ]
        actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited(null)]
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.chdir("/")  # posix_spawn cannot: this process is done with its directory
            return os.posix_spawn(exe, argv, env, file_actions=actions, setsid=True,
                                  setsigdef=_DEFAULT_SIGNALS, setsigmask=())  # fmt: skip
        finally:
            os.fchdir(here)
            os.close(here)
    except (OSError, NotImplementedError):  # NotImplementedError: no POSIX_SPAWN_SETSID
        return 0
    finally:
        os.close(null)


def _inherited(keep: int) -> list[int]:
    """This process's descriptors above the standard streams that the server would inherit:
    those without close-on-exec (a jobserver's pipe, any pipe the build tool gave the link)."""
    import fcntl

    found = []
    for name in os.listdir("/proc/self/fd"):  # its own descriptor is closed by now
        fd = int(name)
        if fd <= 2 or fd == keep:
            continue
        try:
            if not fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
                found.append(fd)
        except OSError:
            pass
    return found
