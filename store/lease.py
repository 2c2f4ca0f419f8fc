"""The lock primitive for claims and maintenance: filelock's SoftFileLease, made host-aware.

Imported lazily (filelock costs ~50 ms to import), only by processes that compute or evict.
"""

from __future__ import annotations

from filelock import SoftFileLease, Timeout
from filelock._identity import host_name, owner_is_stale

#: A holder on another host must leave its marker unrefreshed this long (as seen on the
#: waiter's own monotonic clock) before a waiter may take the lock over.
LEASE_DURATION = 30.0
#: How often a holder refreshes its marker's mtime (a third of the lease: two refreshes may fail).
HEARTBEAT = LEASE_DURATION / 3

__all__ = ["HEARTBEAT", "LEASE_DURATION", "HostAwareLease", "Timeout", "make_lease"]


class HostAwareLease(SoftFileLease):
    """A lease whose live holder on this host is never broken, even if its heartbeat stalls.

    SoftFileLease already breaks a marker whose same-host owner is provably dead (pid and
    process start time), and expires a foreign owner's marker once it stops being refreshed.
    It would also expire a live local holder whose heartbeat thread was starved or stopped
    (SIGSTOP, a debugger); here a provably live local holder always keeps its claim.
    """

    def _try_break_pinned_lock(self, pinned: int | None) -> None:
        peer = self._read_peer()
        if peer is not None:
            owner = peer[0]
            if owner.hostname == host_name() and not owner_is_stale(
                owner.pid, owner.hostname, owner.start
            ):
                return
        super()._try_break_pinned_lock(pinned)


def make_lease(path: str, mode: int) -> HostAwareLease:
    """One lease object per acquisition attempt; not shared between threads."""
    return HostAwareLease(
        path,
        lease_duration=LEASE_DURATION,
        heartbeat_interval=HEARTBEAT,
        mode=mode,
        thread_local=False,
        is_singleton=False,
    )
