"""The local-store writes a link can leave behind: memos and promoted remote hits.

A link that compiles nothing still learns things worth keeping: shard and toolchain digests
(memos) and the entries a remote tier served (promotions). Its outputs do not depend on them,
so they are gathered here and written once, when the link ends: in the link's process when it
has opened the store for writing anyway (it compiled something), else behind it
(Store.write_behind), so that such a link costs what a local hit costs plus the network.

Reads go through here too: before the link's first miss is final (a memo or an entry), it
waits once for the writes that earlier links left running, so that a link started after
another has ended sees everything that link learned.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from store import Store


class LinkWrites:
    """A memo for the keys (reads through, writes gathered) and the promotions of one link."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.memos: list[tuple[str, str, str]] = []  # (namespace, key, value)
        self.promotions: list[tuple[str, bytes]] = []
        self._settled = False

    def settle(self) -> bool:
        """Waits for earlier links' writes, the first time only; True when it did."""
        if self._settled:
            return False
        self._settled = True
        self.store.settle()
        return True

    def memo_get(self, namespace: str, key: str) -> str | None:
        found = self.store.memo_get(namespace, key)
        if found is None and self.settle():
            found = self.store.memo_get(namespace, key)
        return found

    def memo_get_many(self, namespace: str, keys: Sequence[str]) -> dict[str, str]:
        found = self.store.memo_get_many(namespace, keys)
        if len(found) < len(set(keys)) and self.settle():
            found.update(self.store.memo_get_many(namespace, [k for k in keys if k not in found]))
        return found

    def memo_put(self, namespace: str, key: str, value: str) -> None:
        self.memos.append((namespace, key, value))

    def memo_put_many(self, namespace: str, items: Sequence[tuple[str, str]]) -> None:
        self.memos.extend((namespace, key, value) for key, value in items)

    def promote(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Entries a remote served (each value already verified): the next link hits here."""
        self.promotions.extend(items)

    def flush(self) -> None:
        """Writes what was gathered: here if the store is open for writing, else behind."""
        memos, promotions = self.memos, self.promotions
        self.memos, self.promotions = [], []
        self.store.write_behind(memos, promotions)
