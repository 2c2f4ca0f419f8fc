"""An entry as one byte value, the form in which entries travel between tiers.

    b"CDR" | format version (one ASCII digit: 2) | header length (4 bytes, big-endian)
    | XXH3-128 of the header (16 bytes) | header JSON | output bytes, in header order

The header names the key the value answers (``key``), each output's role, XXH3-128 digest
and size (``outputs``) and the entry's meta (compile duration, toolchain, key format). Keeping
everything in one value is what lets a single MGET (or one GET per key, concurrently) fetch
all a link misses. The header is covered by its own digest and names the digest of every
output, so every byte of a value is checked: decoding re-hashes them all and compares the key
with the one asked for, so a damaged, truncated or foreign value, or a whole valid value of
another key (a writer's bug, a proxy mixing up paths), is a miss, never a wrong output.

The header holds exactly these three fields. Later additions (issue 43: zstd compression of
the outputs and an HMAC over the value) are more header fields (``compression``, ``mac``,
whose tag would follow the outputs); a reader that does not know a field refuses the value
(a miss), so none is ever misread. A value of another format version (``CDR1``, which named
no key) is a miss too, not damage: the next upload replaces it.
"""

from __future__ import annotations

import xxhash

from .jsonload import loads
from .manifest import valid_digest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: The format's name; the version digit follows it.
MAGIC = b"CDR"
VERSION = 2
PREFIX = MAGIC + str(VERSION).encode()
#: Bytes before the header: prefix, header length, header digest.
FRAME = len(PREFIX) + 4 + 16
_FIELDS = frozenset(("key", "outputs", "meta"))
_MAX_HEADER = 1 << 20


class Refused(ValueError):
    """Why a value is not the entry asked for. ``reason``: ``"damaged"`` (not what encode()
    wrote, or changed since), ``"format"`` (another version of this format) or ``"key"`` (a
    whole value, but of another key)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encode(
    key: str,
    outputs: dict[str, bytes],
    meta: Mapping[str, Any],
    expected: Mapping[str, tuple[str, int]] | None = None,
) -> bytes:
    """The value of ``key`` for these outputs (role -> bytes) and meta. With ``expected``
    (role -> (digest, size), from a manifest), ValueError unless every output matches it."""
    listed = [(role, xxhash.xxh3_128_hexdigest(data), len(data)) for role, data in outputs.items()]
    if expected is not None and any(tuple(expected[r]) != (d, n) for r, d, n in listed):
        raise ValueError("an output does not match its recorded digest")
    import json  # only when exporting: a remote hit decodes with store.jsonload

    body = {"key": key, "outputs": listed, "meta": dict(meta)}
    header = json.dumps(body, separators=(",", ":")).encode()
    return b"".join([PREFIX, len(header).to_bytes(4, "big"), xxhash.xxh3_128_digest(header),
                     header, *outputs.values()])  # fmt: skip


def decode(value: bytes, key: str) -> tuple[dict[str, tuple[str, bytes]], dict[str, Any]]:
    """(role -> (digest, bytes), meta) if ``value`` is a well-formed value of this format for
    ``key`` and every digest matches; else :class:`Refused`, before any output is hashed
    when the header already says no."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise Refused("damaged")
    view = memoryview(value)
    if view[:4] != PREFIX:
        other = len(view) >= 4 and view[:3] == MAGIC and 0x30 <= view[3] <= 0x39
        raise Refused("format" if other else "damaged")
    length = int.from_bytes(view[4:8], "big")
    if len(view) < FRAME or length > _MAX_HEADER or FRAME + length > len(view):
        raise Refused("damaged")
    raw = bytes(view[FRAME : FRAME + length])
    if xxhash.xxh3_128_digest(raw) != view[8:FRAME]:
        raise Refused("damaged")
    try:
        header = loads(raw.decode())
    except (ValueError, UnicodeDecodeError):
        raise Refused("damaged") from None
    if not isinstance(header, dict) or not header.keys() >= _FIELDS:
        raise Refused("damaged")
    if len(header) != len(_FIELDS):
        raise Refused("format")  # a field this reader does not know (a later writer's)
    if header["key"] != key:
        raise Refused("key" if isinstance(header["key"], str) else "damaged")
    listed, meta = header["outputs"], header["meta"]
    if not isinstance(listed, list) or not listed or not isinstance(meta, dict):
        raise Refused("damaged")
    outputs: dict[str, tuple[str, bytes]] = {}
    offset = FRAME + length
    for item in listed:
        if not (isinstance(item, list) and len(item) == 3):
            raise Refused("damaged")
        role, digest, size = item
        if not isinstance(role, str) or role in outputs or not valid_digest(digest):
            raise Refused("damaged")
        if type(size) is not int or size < 0 or offset + size > len(view):
            raise Refused("damaged")
        data = bytes(view[offset : offset + size])
        digest = digest.lower()
        if xxhash.xxh3_128_hexdigest(data) != digest:
            raise Refused("damaged")
        outputs[role] = (digest, data)
        offset += size
    if offset != len(view):
        raise Refused("damaged")  # trailing bytes: not what encode() wrote
    return outputs, meta
