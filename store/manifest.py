"""Action entries: what a cached action produced, and the metadata explaining it."""

from __future__ import annotations

from .jsonload import loads

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms to import; the hot path avoids them
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

#: Version of the manifest encoding; an entry with another version reads as a miss. 2: the
#: manifest names its key (1 did not).
FORMAT = 2
_HEX = frozenset("0123456789abcdefABCDEF")
_DIGEST_LEN = 32  # XXH3-128 in hex


def valid_key(key: object) -> bool:
    """Action keys name lock files and index rows, so only short hex strings are accepted."""
    return isinstance(key, str) and 0 < len(key) <= 128 and _HEX.issuperset(key)


def valid_digest(digest: object) -> bool:
    """Digests name blob files: exactly 32 lowercase-or-uppercase hex characters."""
    return isinstance(digest, str) and len(digest) == _DIGEST_LEN and _HEX.issuperset(digest)


class Manifest:
    """The outputs of one action by role (digest, size), plus how and when they were made.

    Its encoding names the key it answers: a row holding the manifest of another key (a
    writer's bug, a row copied or moved) reads as damage, a miss, as a remote value of
    another key does (store/entry.py).

    `meta` holds created (epoch seconds), duration (compile seconds, credited as time saved on a
    hit), toolchain (identity string), key_version (key format of the distributor) and, when
    known, wall (the share of the link's wall time the compile accounted for).
    """

    __slots__ = ("key", "meta", "outputs")

    def __init__(
        self, key: str, outputs: dict[str, tuple[str, int]], meta: dict[str, Any] | None = None
    ) -> None:
        self.key = key
        self.outputs = outputs
        self.meta: dict[str, Any] = {} if meta is None else meta

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Manifest):
            return NotImplemented
        return (self.key, self.outputs, self.meta) == (other.key, other.outputs, other.meta)

    __hash__ = None  # type: ignore[assignment]  # mutable dicts inside

    def __repr__(self) -> str:
        return f"Manifest(key={self.key!r}, outputs={self.outputs!r}, meta={self.meta!r})"

    @property
    def duration(self) -> float:
        """Compile time the entry saves on each hit."""
        value = self.meta.get("duration", 0.0)
        return float(value) if isinstance(value, int | float) else 0.0

    @property
    def wall(self) -> float | None:
        """Wall time of its link the compile accounted for, if recorded."""
        value = self.meta.get("wall")
        return float(value) if isinstance(value, int | float) else None

    @property
    def size(self) -> int:
        """Bytes a hit serves."""
        return sum(size for _, size in self.outputs.values())

    def encode(self) -> str:
        """Serialize as compact JSON, small enough to live inline in the index database."""
        body = {
            "v": FORMAT,
            "key": self.key,
            "outputs": {role: [d, s] for role, (d, s) in self.outputs.items()},
            "meta": self.meta,
        }
        import json  # only when storing: a hit never imports json (see .jsonload)

        return json.dumps(body, separators=(",", ":"), sort_keys=True)

    @classmethod
    def decode(cls, key: str, text: object) -> Manifest | None:
        """Parse the index value of ``key``; None unless it is a well-formed manifest of this
        format naming ``key``."""
        if not isinstance(text, str):
            return None
        try:
            body = loads(text)
        except ValueError:
            return None
        if not isinstance(body, dict) or body.get("v") != FORMAT or body.get("key") != key:
            return None
        raw_outputs, meta = body.get("outputs"), body.get("meta")
        if not isinstance(raw_outputs, dict):
            return None
        if not all(isinstance(ref, list) and len(ref) == 2 for ref in raw_outputs.values()):
            return None
        return cls.of_parts(key, ((role, *ref) for role, ref in raw_outputs.items()), meta)

    @staticmethod
    def other_format(text: object) -> bool:
        """Whether an index value that did not decode is a manifest of another FORMAT (one
        stored by an older cached-dist: a miss, not damage). For the miss path only."""
        try:
            body = loads(text) if isinstance(text, str) else None
        except ValueError:
            return False
        version = body.get("v") if isinstance(body, dict) else None
        return type(version) is int and version != FORMAT

    @classmethod
    def of_parts(cls, key: str, refs: Iterable[Any], meta: object) -> Manifest | None:
        """The manifest of outputs given as (role, digest, size) and its metadata; None
        unless there is one output at least, each with a str role, a digest and a size of 0
        or more, and ``meta`` is a dict. Items that are not triples raise (ValueError,
        TypeError): a row (decode) and a pack (store/pack.py) are checked alike."""
        if not isinstance(meta, dict):
            return None
        outputs: dict[str, tuple[str, int]] = {}
        for role, digest, size in refs:
            if type(role) is not str or not valid_digest(digest) or type(size) is not int:
                return None
            if size < 0:
                return None
            outputs[role] = (digest.lower(), size)
        return cls(key, outputs, meta) if outputs else None
