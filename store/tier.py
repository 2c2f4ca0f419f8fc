"""The storage protocol: what every cache tier does, the disk store and the remotes alike.

A tier maps action keys to entries. Between tiers an entry travels as one byte value in the
form of :mod:`store.entry` (a header naming its key and each output's digest, then the
bytes), and every tier re-hashes a value and compares the key it names before trusting it.
Operations come in batches, so that a chain of tiers costs one round trip per tier and per
link, however many jobs the link has (ccache's local/remote storage split, sccache's single
``Storage`` trait and its multi-level chain):

    get_many(keys)  -> [value or None]   one lookup batch; None is a miss, never an error
    put_many(items, release=None)        store (key, value) pairs; with ``release`` (a claim
                                         token) also drop those claims, in the same trip
    close()

A tier that can arbitrate between machines (``claims`` is True: Redis) also offers leases
for single-flight across machines; the others keep single-flight per machine (the disk
store's own file claims, ``Store.claim``):

    claim_many(keys, token, lease_ms, contested=()) -> [claimed?]
    renew(keys, token, lease_ms);  release(keys, token)

``Store`` (the disk tier, in front) and the backends under ``store.remote`` implement this;
the chain itself (lookup order, promotion into the local tier, uploads beside the link) is the
caller's. A remote tier raises ``store.remote.RemoteError`` for transport problems; the disk
store, as always, degrades to misses and no-ops instead of raising.

This module defines types only, for the type checker: importing it costs nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from typing import Protocol

    class Tier(Protocol):
        """One cache tier: batched lookups and stores of entry values."""

        #: Whether claim_many/renew/release arbitrate between machines.
        claims: bool
        #: Network round trips so far (0 for the disk store; a batch counts once).
        round_trips: int

        def get_many(self, keys: Sequence[str]) -> list[bytes | None]: ...
        def put_many(
            self, items: Sequence[tuple[str, bytes]], release: str | None = None
        ) -> None: ...
        def close(self) -> None: ...

    class ClaimingTier(Tier, Protocol):
        """A tier that leases keys to one machine at a time (``claims`` is True)."""

        def claim_many(
            self, keys: Sequence[str], token: str, lease_ms: int, contested: Collection[str] = ()
        ) -> list[bool]: ...
        def renew(self, keys: Sequence[str], token: str, lease_ms: int) -> None: ...
        def release(self, keys: Sequence[str], token: str) -> None: ...
