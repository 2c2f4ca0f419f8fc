"""Single-flight claims: one process computes a key while the others wait, then read.

A claim is a lease marker at claims/<key>.lock (see lease.py for when a holder's marker may be
taken over). Waiting is bounded: after `wait` seconds the waiter computes the key itself, so a
wedged holder costs at most one duplicate compile, never a hung build.
"""

from __future__ import annotations

import contextlib
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType
    from typing import Literal

    from .lease import HostAwareLease

    Reason = Literal["acquired", "entry", "timeout", "unusable", "error"]
_POLL_MIN = 0.02
_POLL_MAX = 0.2


class Claim:
    """Context manager for a claim. `acquired` tells the caller whether it should compute.

    `reason` says why: acquired, entry (someone stored the key meanwhile: read it), timeout
    (waited long enough: compute without the claim), unusable or error (store degraded).
    """

    def __init__(self, acquired: bool, reason: Reason, lease: HostAwareLease | None = None) -> None:
        self.acquired = acquired
        self.reason: Reason = reason
        self._lease = lease

    def release(self) -> None:
        """Give the claim up (removes the marker); safe to call twice, never raises."""
        lease, self._lease = self._lease, None
        if lease is not None:
            with contextlib.suppress(Exception):
                lease.release(force=True)

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Claim(acquired={self.acquired}, reason={self.reason!r})"


def claim(path: str, mode: int, wait: float, stored: Callable[[], bool]) -> Claim:
    """Try to take the claim at `path` for up to `wait` seconds, giving up early if `stored()`.

    A marker left by a dead process on this host is broken on the first poll, one that holds
    no record (empty, junk) once UNREADABLE_GRACE old, one left by another host after
    LEASE_DURATION without heartbeat (see lease.py). The holder's heartbeat thread keeps its
    marker fresh for as long as it holds the claim, however long the compile takes.
    """
    from .lease import Timeout, make_lease

    lease = make_lease(path, mode)
    deadline = time.monotonic() + max(0.0, wait)
    poll = _POLL_MIN
    while True:
        try:
            lease.acquire(blocking=False)
        except Timeout:
            pass
        else:
            if stored():  # the previous holder finished between our checks: read, don't redo
                Claim(True, "acquired", lease).release()
                return Claim(False, "entry")
            return Claim(True, "acquired", lease)
        if stored():
            return Claim(False, "entry")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Claim(False, "timeout")
        time.sleep(min(poll, remaining))
        poll = min(poll * 1.5, _POLL_MAX)


def claim_path(root: str, key: str) -> str:
    """Claims live next to the data they protect, so every host sharing the store sees them."""
    return os.path.join(root, "claims", f"{key}.lock")
