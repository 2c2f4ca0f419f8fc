"""The shard ingredient of the key: canonical summary shards, memoized and decoded in parallel.

A shard names modules by path and values by per-link ids (see docs/shards.md); its canonical
form (:mod:`cached_dist.bitcode.shard`, computed by the C extension when it is built, see
:mod:`cached_dist.bitcode.native`) does not. Decoding still costs something, so:

- the canonical digest is memoized in the store under the raw shard's digest plus the job's
  own path -> content map (what the canonical form depends on): byte-identical shards, as
  with thin archives or no archives, are never decoded twice; shards of jobs that name a
  regular archive member (a per-link name) are neither looked up nor stored, as their memo
  key could never come again;
- the shards left to decode are split across forked workers when there are enough of them.
"""

from __future__ import annotations

import json
import os

import xxhash

from ..jobfile import Job
from .digests import Digests, read_regular

# Below this many bytes to decode, forking workers costs more than it saves (the pure-Python
# decoder does ~2 MB/s, the native one over 100 MB/s).
PARALLEL_MIN_BYTES = 64 * 1024
PARALLEL_MIN_BYTES_NATIVE = 32 * 1024 * 1024
#: With the native decoder, shards are decoded here unless there are at least this many bytes
#: of them to decode: 1 MB takes it ~25 ms, about one round trip to a remote tier over a WAN,
#: and asking a remote for shard digests is a round trip of its own (the results' lookup needs
#: the digests first). The pure-Python decoder (~1.4 MB/s) always asks.
SHARED_MIN_BYTES = 1 << 20


TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol

    class Memo(Protocol):
        def memo_get(self, namespace: str, key: str) -> str | None: ...
        def memo_put(self, namespace: str, key: str, value: str) -> None: ...
        def memo_put_many(self, namespace: str, items: Sequence[tuple[str, str]]) -> None: ...

    class SharedMemo(Protocol):
        """A memo other machines share (the remote tier): batched, best effort."""

        def memo_many(self, namespace: str, keys: Sequence[str]) -> dict[str, str]: ...
        def memo_share(self, namespace: str, items: Sequence[tuple[str, str]]) -> None: ...


def spellings(path: str, memo: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """How a shard may spell a path: as given, normalized, absolute (memoized per link)."""
    found = memo.get(path)
    if found is None:
        found = memo[path] = (path, os.path.normpath(path), os.path.abspath(path))
    return found


def module_map(
    job: Job, digests: Digests, memo: dict[str, tuple[str, ...]] | None = None
) -> dict[str, str]:
    """The job's module and imports, by every spelling a shard may use -> content digest."""
    memo = {} if memo is None else memo
    mapping: dict[str, str] = {}
    for path in (job.module, *job.imports):
        d = digests.of(path)
        for spelling in spellings(path, memo):
            mapping.setdefault(spelling, d)
    return mapping


def _decode(data: bytes, mapping: dict[str, str]) -> tuple[str, bool]:
    from ..bitcode.native import canonical_digest

    def module_digest(path: str) -> str | None:
        return mapping.get(path) or mapping.get(os.path.normpath(path))

    digest, exact, _ = canonical_digest(data, module_digest)
    return ("canon:" if exact else "raw:") + digest, exact


class ShardKeys:
    """Computes every job's shard digest for one link up front; then serves them to the key."""

    def __init__(self, memo: Memo, parallel: int, shared: SharedMemo | None = None) -> None:
        self.memo = memo
        self.shared = shared  # asked, in one batch, for what the local memo lacks
        self.parallel = max(1, parallel)
        self.digests: dict[int, str] = {}
        self.decoded = 0  # shards decoded in this link
        self.memoized = 0  # shards whose canonical digest came from the memo
        self.inexact = 0  # shards that fell back to the raw form (can only miss)

    def prepare(self, jobs: Sequence[Job], digests: Digests) -> None:
        """Looks up the memo for every job; decodes the rest, in parallel when worth it."""
        todo: list[tuple[int, str, bytes, dict[str, str]]] = []
        names: dict[str, tuple[str, ...]] = {}
        # Each distinct path is judged once: every job names the modules it imports again.
        members = {p for p in {m for j in jobs for m in (j.module, *j.imports)}
                   if per_link_member(p)}  # fmt: skip
        for job in jobs:
            if job.shard is None:
                self.digests[job.index] = "none"
                continue
            try:
                data = read_regular(job.shard)
                if members and not members.isdisjoint((job.module, *job.imports)):
                    # The memo key holds this link's member names: it could never hit again.
                    todo.append((job.index, "", data, module_map(job, digests, names)))
                    continue
                memo_key = _memo_key(data, job, digests)
                found = self.memo.memo_get("shard", memo_key)
                if found is not None:
                    self.digests[job.index] = found
                    self.memoized += 1
                    continue
                # Every spelling of every module path, for the decoder: only when decoding.
                todo.append((job.index, memo_key, data, module_map(job, digests, names)))
            except OSError:
                continue  # the key computation will fail on it too: not cacheable
        shareable = [t for t in todo if t[1]]  # per-link shards have no key another link knows
        shared = self.shared if self.shared and shareable and _worth_asking(shareable) else None
        if shared is not None:
            known = shared.memo_many("shard", [t[1] for t in shareable])
            for index, memo_key, _, _ in todo:
                found = known.get(memo_key)
                if found is not None:
                    self.digests[index] = found
                    self.memoized += 1
            self.memo.memo_put_many("shard", list(known.items()))
            todo = [t for t in todo if t[1] not in known]
        decoded = self._decode_all(todo)
        learned: list[tuple[str, str]] = []
        for (index, memo_key, _, _), (digest, exact) in zip(todo, decoded, strict=True):
            self.digests[index] = digest
            self.decoded += 1
            if not exact:
                self.inexact += 1
            if memo_key:  # none for shards whose key can never come again
                learned.append((memo_key, digest))
        self.memo.memo_put_many("shard", learned)  # one transaction for the whole link
        if learned and shared is not None:
            shared.memo_share("shard", learned)

    def __call__(self, job: Job, digests: Digests) -> str:
        """The :data:`cached_dist.keys.key.ShardDigest` for jobs given to :meth:`prepare`."""
        found = self.digests.get(job.index)
        if found is None:
            raise OSError(f"summary shard {job.shard} could not be read")
        return found

    def _decode_all(
        self, todo: list[tuple[int, str, bytes, dict[str, str]]]
    ) -> list[tuple[str, bool]]:
        if not todo:
            return []
        from ..bitcode.native import NATIVE

        total = sum(len(t[2]) for t in todo)
        workers = min(self.parallel, len(todo))
        if workers <= 1 or total < (PARALLEL_MIN_BYTES_NATIVE if NATIVE else PARALLEL_MIN_BYTES):
            return [_decode(data, mapping) for _, _, data, mapping in todo]
        return _decode_forked([(t[2], t[3]) for t in todo], workers)


def _worth_asking(todo: list[tuple[int, str, bytes, dict[str, str]]]) -> bool:
    """Whether to ask a shared memo for these shards (and tell it what was decoded): only
    when decoding them here would cost more than the round trip (see SHARED_MIN_BYTES)."""
    from ..bitcode.native import NATIVE

    return not NATIVE or sum(len(t[2]) for t in todo) >= SHARED_MIN_BYTES


def per_link_member(path: str) -> bool:
    """Whether ``path`` is LLD's name for a regular archive member, new in every link
    (``libx.a(t2.o at 106).2.244C.o``: offset, ordinal, linker pid in hex)."""
    head, paren, tail = path.rpartition(")")
    member = bool(paren) and " at " in head and "(" in head
    return member and tail.endswith(".o") and tail.count(".") == 3


def _memo_key(data: bytes, job: Job, digests: Digests) -> str:
    """The raw shard and the content of every module it names, by the path it names."""
    h = xxhash.xxh3_128(data)
    of = digests.of
    for path in (job.module, *job.imports):
        h.update(b"\0" + path.encode("utf-8", "surrogateescape") + b"\0" + of(path).encode())
    return h.hexdigest()


def _decode_forked(
    tasks: list[tuple[bytes, dict[str, str]]], workers: int
) -> list[tuple[str, bool]]:
    """Splits ``tasks`` over ``workers`` processes (this one included), balanced by size.

    Plain fork and a pipe per worker: no pool, no imports. A worker that fails leaves its
    share to be decoded here, so the result never depends on the workers' fate.
    """
    shares: list[list[int]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for i in sorted(range(len(tasks)), key=lambda i: -len(tasks[i][0])):
        w = loads.index(min(loads))
        shares[w].append(i)
        loads[w] += len(tasks[i][0])
    results: list[tuple[str, bool] | None] = [None] * len(tasks)
    children: list[tuple[int, int, list[int]]] = []
    for share in shares[1:]:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            try:
                os.close(read_fd)
                out = json.dumps([_decode(*tasks[i]) for i in share]).encode()
                with os.fdopen(write_fd, "wb") as pipe:
                    pipe.write(out)
            finally:
                os._exit(0)
        os.close(write_fd)
        children.append((pid, read_fd, share))
    for i in shares[0]:
        results[i] = _decode(*tasks[i])
    for pid, read_fd, share in children:
        with os.fdopen(read_fd, "rb") as r:
            raw = r.read()
        os.waitpid(pid, 0)
        try:
            decoded = [(str(d), bool(e)) for d, e in json.loads(raw)]
        except ValueError:
            decoded = []
        if len(decoded) != len(share):
            decoded = [_decode(*tasks[i]) for i in share]
        for i, value in zip(share, decoded, strict=True):
            results[i] = value
    return [r for r in results if r is not None]
