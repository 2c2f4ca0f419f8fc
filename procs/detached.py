"""Starting a helper process the caller does not wait for: a fresh interpreter in a session of
its own, stdio on /dev/null and none of the caller's other descriptors.

A build tool reading the caller's output must not be held up by a helper that outlives it
(its pipe would stay open), and a fresh interpreter (posix_spawn, not fork) inherits no
sqlite or event-loop state. ``-P``: the caller's working directory may hold a package of the
same name as the helper's.
"""

from __future__ import annotations

import os
import sys


def spawn(module: str, args: list[str], keep: int | None = None) -> int:
    """Starts ``python -P -m MODULE ARGS...`` detached; ``keep`` is a descriptor the helper
    inherits (made inheritable here). Returns its pid; OSError if it cannot be started."""
    actions: list[tuple[object, ...]] = [
        (os.POSIX_SPAWN_OPEN, std, os.devnull, os.O_RDWR, 0) for std in (0, 1, 2)
    ]
    actions += [(os.POSIX_SPAWN_CLOSE, other) for other in _inherited(keep)]
    if keep is not None:
        os.set_inheritable(keep, True)
    argv = [sys.executable, "-P", "-m", module, *args]
    return os.posix_spawn(sys.executable, argv, os.environ, file_actions=actions, setsid=True)


def _inherited(keep: int | None) -> list[int]:
    """Descriptors above 2 a child would inherit, but ``keep``: pipes of whoever ran us."""
    try:
        found = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return []
    result = []
    for fd in found:
        if fd > 2 and fd != keep:
            try:
                if os.get_inheritable(fd):
                    result.append(fd)
            except OSError:
                continue  # the listing's own descriptor, closed by now
    return result
