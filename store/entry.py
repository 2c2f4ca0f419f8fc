"""An entry as one byte value, the form in which entries travel between tiers.

    b"CDR1" | header length (4 bytes, big-endian) | header JSON | output bytes, in header order

The header lists each output's role, XXH3-128 digest and size, plus the entry's meta (compile
duration, toolchain, key format). Keeping everything in one value is what lets a single MGET
(or one GET per key, concurrently) fetch all a link misses. Decoding re-hashes every byte, so
a damaged, truncated or foreign value is a miss, never a wrong output.
"""

from __future__ import annotations

import json

import xxhash

from .manifest import valid_digest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

MAGIC = b"CDR1"
_MAX_HEADER = 1 << 20


def encode(
    outputs: dict[str, bytes],
    meta: Mapping[str, Any],
    expected: Mapping[str, tuple[str, int]] | None = None,
) -> bytes:
    """The value for these outputs (role -> bytes) and meta. With ``expected`` (role ->
    (digest, size), from a manifest), ValueError unless every output matches it."""
    listed = [(role, xxhash.xxh3_128_hexdigest(data), len(data)) for role, data in outputs.items()]
    if expected is not None and any(tuple(expected[r]) != (d, n) for r, d, n in listed):
        raise ValueError("an output does not match its recorded digest")
    header = json.dumps({"outputs": listed, "meta": dict(meta)}, separators=(",", ":")).encode()
    return b"".join([MAGIC, len(header).to_bytes(4, "big"), header, *outputs.values()])


def decode(value: bytes) -> tuple[dict[str, tuple[str, bytes]], dict[str, Any]] | None:
    """(role -> (digest, bytes), meta) if ``value`` is well formed and every digest matches,
    else None."""
    if not isinstance(value, bytes | bytearray | memoryview) or value[:4] != MAGIC:
        return None
    view = memoryview(value)
    length = int.from_bytes(view[4:8], "big")
    if length > _MAX_HEADER or 8 + length > len(view):
        return None
    try:
        header = json.loads(bytes(view[8 : 8 + length]))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(header, dict):
        return None
    listed, meta = header.get("outputs"), header.get("meta")
    if not isinstance(listed, list) or not listed or not isinstance(meta, dict):
        return None
    outputs: dict[str, tuple[str, bytes]] = {}
    offset = 8 + length
    for item in listed:
        if not (isinstance(item, list) and len(item) == 3):
            return None
        role, digest, size = item
        if not isinstance(role, str) or not valid_digest(digest):
            return None
        if type(size) is not int or size < 0 or offset + size > len(view):
            return None
        data = bytes(view[offset : offset + size])
        digest = digest.lower()
        if xxhash.xxh3_128_hexdigest(data) != digest:
            return None
        outputs[role] = (digest, data)
        offset += size
    if offset != len(view):
        return None  # trailing bytes: not what encode() wrote
    return outputs, meta
