"""The lock primitive for claims and maintenance: filelock's SoftFileLease, made host-aware.

Imported lazily (filelock costs ~50 ms to import), only by processes that compute or evict.
"""

from __future__ import annotations

import os

from filelock import SoftFileLease, Timeout
from filelock._identity import host_name, owner_is_stale

#: A holder on another host must leave its marker unrefreshed this long (as seen on the
#: waiter's own monotonic clock) before a waiter may take the lock over. Every process sharing
#: a store must agree on it (STORE_LEASE_DURATION overrides it, e.g. for tests).
LEASE_DURATION = float(os.environ.get("STORE_LEASE_DURATION", "30"))

__all__ = ["LEASE_DURATION", "HostAwareLease", "Timeout", "make_lease"]


class HostAwareLease(SoftFileLease):
    """A lease whose live holder on this host is never broken, even if its heartbeat stalls.

    SoftFileLease already breaks a marker whose same-host owner is provably dead (pid and
    process start time), and expires a foreign owner's marker once it stops being refreshed.
    It would also expire a live local holder whose heartbeat thread was starved or stopped
    (SIGSTOP, a debugger); here a provably live local holder always keeps its claim.
    """

    # Hooks into filelock's private break path (checked against filelock 4.2); should it be
    # renamed, this override goes unused and the plain lease rules (heartbeat) still hold.
    def _try_break_pinned_lock(self, pinned: int | None) -> None:
        read_peer = getattr(self, "_read_peer", None)
        peer = read_peer() if read_peer is not None else None
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
        # Refresh three times per lease, so two refreshes may fail before a peer may take over.
        heartbeat_interval=LEASE_DURATION / 3,
        mode=mode,
        thread_local=False,
        is_singleton=False,
    )
