"""Child processes in groups of their own, so stopping one stops everything it started.

A compiler or an inner distributor may start processes of its own (a driver running cc1, a
distributor running compilers). Each is spawned as the leader of a new process group; on an
interrupt or an error the whole group gets SIGTERM, then SIGKILL if it lingers, so no stray
compiler writes an object after the link has given up.

A link can also end without a word (SIGKILL, a crash): then nothing here runs. So each
child is started through the guard (guard.c, built beside this file): the group's leader,
which runs the command as its child and relays how it ended, and which stops the whole group
when the link's process ends (a parent-death signal, which Linux sends when the thread that
started the guard ends: children are started from the main thread, which lasts as long as
the process). Without the guard (not built: no C compiler) the command is started directly.
"""

import contextlib
import os
import signal
import threading
import time
from collections.abc import Sequence

_GRACE = 1.0  # seconds a group has to exit after SIGTERM before SIGKILL
GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cached-dist-guard")
_guard_built: list[bool] = []  # looked for once


def guarded() -> bool:
    """Whether children started from this thread are stopped when this process ends."""
    if not _guard_built:
        _guard_built.append(os.access(GUARD, os.X_OK))
    return _guard_built[0] and threading.current_thread() is threading.main_thread()


def spawn(command: Sequence[str], *, stdout: int | None = None) -> int:
    """Starts ``command`` (searched on PATH) as a new process group leader (the guard, see
    above); stdin is /dev/null; stdout and stderr go to ``stdout`` when given. OSError names
    the program."""
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
    ]
    if stdout is not None:
        actions += [(os.POSIX_SPAWN_DUP2, stdout, 1), (os.POSIX_SPAWN_DUP2, stdout, 2)]
    if not guarded():
        return _spawn(command, actions)
    # The guard says on descriptor 3 why the command could not be executed (an errno); the
    # descriptor closes when it is.
    told, tell = os.pipe()
    try:
        actions.append((os.POSIX_SPAWN_DUP2, tell, 3))
        pid = _spawn([GUARD, str(os.getpid()), *command], actions, command[0])
        os.close(tell)
        tell = -1
        error = _read_all(told)
    finally:
        os.close(told)
        if tell >= 0:
            os.close(tell)
    if len(error) == 4:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)  # it exits at once: the command did not start
        code = int.from_bytes(error, "little")
        raise OSError(code, os.strerror(code), command[0])
    return pid


def _spawn(
    argv: Sequence[str],
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]],
    name: str | None = None,
) -> int:
    try:
        return os.posix_spawnp(argv[0], list(argv), os.environ, file_actions=actions, setpgroup=0)
    except OSError as e:
        if e.filename is None or name is not None:
            e.filename = name or argv[0]
        raise


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return False
    return True


def stop_group(pgid: int, *, reap: bool = False) -> None:
    """SIGTERM to the group led by ``pgid``, SIGKILL after a grace period; ``reap`` also
    waits for the leader (our child). Never raises; does nothing if the group is gone."""
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGTERM)
    if reap:
        deadline = time.monotonic() + _GRACE
        while True:
            try:
                done, _ = os.waitpid(pgid, os.WNOHANG)
            except ChildProcessError:
                break
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    deadline = time.monotonic() + _GRACE
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)
    if _group_alive(pgid):
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    if reap:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, 0)
