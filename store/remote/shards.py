"""One tier over several servers: keys spread by rendezvous hashing, with optional weights.

A team past one Redis names several in one ``--remote-storage`` word, in either form:

    redis://cache-a:6379/0|redis://cache-b:6379/0(2)    URLs joined by '|', each with an
                                                        optional (WEIGHT)
    redis://cache-*:6379/0|shards=a,b(2)                ccache's form: '*' replaced by each
                                                        shard name, with optional (WEIGHT)

Each key lives on the server where ``weight / -ln(h)`` is highest, ``h`` a hash of the
server's name and the key in (0, 1) (weighted rendezvous hashing, as ccache's ``shards=``):
every machine agrees without talking, and adding or removing a server moves only the keys
it gains or loses. A server that fails is skipped for the rest of the link: its share of
the lookups are misses, its uploads and claims are dropped (its failure is reported once,
through ``on_error``), and the other servers go on.
"""

from __future__ import annotations

import contextlib
import math
import re

import xxhash

from .urls import RemoteError, redact, scheme

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from ..tier import ClaimingTier, Tier

_WEIGHT = re.compile(r"^(.*)\(([0-9]+(?:\.[0-9]+)?)\)$")
_SCALE = 1.0 / 2**64


def parse(word: str) -> list[tuple[str, float]]:
    """The (URL, weight) of each server a sharded word names; ValueError (redacted) when it
    names fewer than two, a weight is not positive or their schemes differ."""
    parts = word.split("|")
    if len(parts) == 2 and parts[1].startswith("shards="):
        template = parts[0]
        if "*" not in template:
            raise ValueError(f"shards= needs a '*' in the URL to replace: {redact(template)!r}")
        names = [_weighted(n) for n in parts[1].removeprefix("shards=").split(",")]
        shards = [(template.replace("*", name), weight) for name, weight in names]
    else:
        shards = [_weighted(p) for p in parts]
    if len(shards) < 2 or any(not url for url, _ in shards):
        raise ValueError(f"a sharded tier names two servers or more: {redact(word)!r}")
    kinds = {scheme(url).rstrip("s") for url, _ in shards}
    if len(kinds) != 1:
        raise ValueError(f"the servers of one tier share a scheme: {redact(word)!r}")
    if len({url for url, _ in shards}) != len(shards):
        raise ValueError(f"a server named twice in one tier: {redact(word)!r}")
    return shards


def _weighted(text: str) -> tuple[str, float]:
    found = _WEIGHT.match(text)
    if found is None:
        return text, 1.0
    weight = float(found.group(2))
    if not weight > 0:
        raise ValueError(f"a shard's weight must be positive: {redact(text)!r}")
    return found.group(1), weight


def _name(url: str) -> str:
    head, sep, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    return f"{head.lower()}{sep}{authority.rpartition('@')[2]}{slash}{path}"


def owner(key: str, shards: Sequence[tuple[str, float]]) -> int:
    """The index of the shard that holds ``key`` (weighted rendezvous hashing)."""
    best, best_score = 0, -1.0
    for i, (name, weight) in enumerate(shards):
        h = (xxhash.xxh3_64_intdigest(f"{name}\0{key}".encode()) + 0.5) * _SCALE
        score = -weight / math.log(h)
        if score > best_score:
            best, best_score = i, score
    return best


class ShardedStorage:
    """A tier whose keys are spread over ``backends`` (each a tier of its own)."""

    def __init__(
        self, urls: Sequence[str], backends: Sequence[Tier], weights: Sequence[float]
    ) -> None:
        self.url = "|".join(b.url for b in backends)  # type: ignore[attr-defined]
        self.backends = list(backends)
        self.claims = all(b.claims for b in backends)
        #: (name, weight) of each shard: its URL without user or password names it in the
        #: hash, so that every machine agrees however it logs in.
        self._shards = [(_name(url), w) for url, w in zip(urls, weights, strict=True)]
        self._urls = [b.url for b in backends]  # type: ignore[attr-defined]
        self.failed = [False] * len(backends)
        self.round_trips = 0  # every server's, summed after each batch
        #: Called once per failed server with (its URL, why); set by the caller.
        self.on_error: Callable[[str, str], None] | None = None

    def _split(self, keys: Sequence[str]) -> dict[int, list[int]]:
        """Shard index -> the positions in ``keys`` it holds (failed shards included)."""
        by_shard: dict[int, list[int]] = {}
        for n, key in enumerate(keys):
            by_shard.setdefault(owner(key, self._shards), []).append(n)
        return by_shard

    def _each(self, keys: Sequence[str], work: Callable[[Tier, list[int]], None]) -> None:
        for i, positions in self._split(keys).items():
            if self.failed[i]:
                continue
            try:
                work(self.backends[i], positions)
            except Exception as e:  # a failed server is skipped, the others go on
                self.failed[i] = True
                if self.on_error is not None:
                    message = str(e) if isinstance(e, RemoteError) else type(e).__name__
                    self.on_error(self._urls[i], message)
        self.round_trips = sum(b.round_trips for b in self.backends)

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        values: list[bytes | None] = [None] * len(keys)

        def get(backend: Tier, positions: list[int]) -> None:
            found = backend.get_many([keys[n] for n in positions])
            for n, value in zip(positions, found, strict=True):
                values[n] = value

        self._each(keys, get)
        return values

    def put_many(self, items: Sequence[tuple[str, bytes]], release: str | None = None) -> None:
        def put(backend: Tier, positions: list[int]) -> None:
            backend.put_many([items[n] for n in positions], release)

        self._each([key for key, _ in items], put)

    def claim_many(
        self, keys: Sequence[str], token: str, lease_ms: int, contested: Collection[str] = ()
    ) -> list[bool]:
        """As one server's; a key of a failed server is ours (compiled here, not waited for)."""
        granted = [True] * len(keys)

        def claim(backend: Tier, positions: list[int]) -> None:
            claiming: ClaimingTier = backend  # type: ignore[assignment]
            answers = claiming.claim_many([keys[n] for n in positions], token, lease_ms,
                                          contested)  # fmt: skip
            for n, answer in zip(positions, answers, strict=True):
                granted[n] = answer

        self._each(keys, claim)
        return granted

    def renew(self, keys: Sequence[str], token: str, lease_ms: int) -> None:
        self._each(keys, lambda b, ps: b.renew([keys[n] for n in ps], token, lease_ms))  # type: ignore[attr-defined]

    def release(self, keys: Sequence[str], token: str) -> None:
        self._each(keys, lambda b, ps: b.release([keys[n] for n in ps], token))  # type: ignore[attr-defined]

    def close(self) -> None:
        for backend in self.backends:
            with contextlib.suppress(Exception):
                backend.close()
