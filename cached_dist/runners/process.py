"""Child processes in groups of their own, so stopping one stops everything it started.

A compiler or an inner distributor may start processes of its own (a driver running cc1, a
distributor running compilers). Each is spawned as the leader of a new process group; on an
interrupt or an error the whole group gets SIGTERM, then SIGKILL if it lingers, so no stray
compiler writes an object after the link has given up.
"""

import contextlib
import os
import signal
import time
from collections.abc import Sequence

_GRACE = 1.0  # seconds a group has to exit after SIGTERM before SIGKILL


def spawn(command: Sequence[str], *, stdout: int | None = None) -> int:
    """Starts ``command`` (searched on PATH) as a new process group leader; stdin is
    /dev/null; stdout and stderr go to ``stdout`` when given. OSError names the program."""
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
    ]
    if stdout is not None:
        actions += [(os.POSIX_SPAWN_DUP2, stdout, 1), (os.POSIX_SPAWN_DUP2, stdout, 2)]
    try:
        return os.posix_spawnp(
            command[0], list(command), os.environ, file_actions=actions, setpgroup=0
        )
    except OSError as e:
        if e.filename is None:
            e.filename = command[0]
        raise


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
