"""An entry as one byte value, the form in which entries travel between tiers.

    b"CDR" | format version (one ASCII digit: 3) | header length (4 bytes, big-endian)
    | XXH3-128 of the header (16 bytes) | header JSON | payload | [MAC tag (32 bytes)]

The header names the key the value answers (``key``), each output's role, XXH3-128 digest
and size (``outputs``) and the entry's meta (compile duration, toolchain, key format); two
more fields say how the payload is to be read:

- ``compression``: ``"zstd"``: the payload is one zstd frame of the outputs' bytes, in
  header order (one frame for all: small side outputs compress with their object); ``"none"``:
  those bytes as they are.
- ``mac``: absent, or ``"hmac-sha256"``: a 32-byte tag follows the payload, HMAC-SHA256
  under the team's signing key of the key asked for and everything before the tag.

Keeping everything in one value is what lets a single MGET (or one GET per key, concurrently)
fetch all a link misses. The header is covered by its own digest and names the digest of every
output *as placed* (uncompressed), so every byte a hit writes is checked: decoding
decompresses, re-hashes them all and compares the key with the one asked for, so a damaged,
truncated or foreign value, or a whole valid value of another key (a writer's bug, a proxy
mixing up paths), is a miss, never a wrong output. A frame that declares another size than
the outputs' total is refused before it is decompressed.

Digests catch damage, not a writer who can reach the server: a reader given a signing key
accepts only values whose tag verifies (``"rejected"`` otherwise: unsigned, signed with
another key, or changed since); the tag covers the key asked for, so another key's value
signed by the same team is refused as well (as ``"key"``: its header names its own key).

A reader refuses a header field it does not know (a later writer's: a miss, never misread).
Values of version 2 (the same frame, a header of exactly ``key``, ``outputs`` and ``meta``,
written before issue 43) are read as they were (a version digit changed to 2 thus reads as
a version-2 value with a field it does not know: a miss); a value of another version
(``CDR1``, which named no key, or a later one) is a miss too, not damage: the next upload
replaces it.
"""

from __future__ import annotations

import xxhash

from .jsonload import dumps, loads
from .manifest import valid_digest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

#: The format's name; the version digit follows it.
MAGIC = b"CDR"
VERSION = 3
PREFIX = MAGIC + str(VERSION).encode()
#: Version 2, still read: no compression, no MAC (its header has exactly _FIELDS_2).
PREFIX_2 = MAGIC + b"2"
#: Bytes before the header: prefix, header length, header digest.
FRAME = len(PREFIX) + 4 + 16
_FIELDS_2 = frozenset(("key", "outputs", "meta"))
_FIELDS = _FIELDS_2 | {"compression"}
_OPTIONAL = frozenset(("mac",))
_MAX_HEADER = 1 << 20
#: The MAC scheme and its tag's length.
MAC = "hmac-sha256"
TAG = 32
_MAC_DOMAIN = b"cached-dist value\0"


class Refused(ValueError):
    """Why a value is not the entry asked for. ``reason``: ``"damaged"`` (not what encode()
    wrote, or changed since), ``"format"`` (another version of this format, or a field this
    reader does not know), ``"key"`` (a whole value, but of another key) or ``"rejected"``
    (a reader with a signing key: no MAC, or one that does not verify)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _tag(signing_key: bytes, key: str, signed: bytes | memoryview) -> bytes:
    import hashlib
    import hmac

    mac = hmac.new(signing_key, _MAC_DOMAIN + key.encode() + b"\0", hashlib.sha256)
    mac.update(signed)
    return mac.digest()


def encode(
    key: str,
    outputs: dict[str, bytes],
    meta: Mapping[str, Any],
    expected: Mapping[str, tuple[str, int]] | None = None,
    *,
    level: int = 0,
    signing_key: bytes | None = None,
) -> bytes:
    """The value of ``key`` for these outputs (role -> bytes) and meta, compressed with zstd
    at ``level`` (0: not compressed) and signed with ``signing_key`` when given. With
    ``expected`` (role -> (digest, size), from a manifest), ValueError unless every output
    matches it."""
    listed = [(role, xxhash.xxh3_128_hexdigest(data), len(data)) for role, data in outputs.items()]
    if expected is not None and any(tuple(expected[r]) != (d, n) for r, d, n in listed):
        raise ValueError("an output does not match its recorded digest")
    body: dict[str, Any] = {"key": key, "outputs": listed, "meta": dict(meta),
                            "compression": "zstd" if level > 0 else "none"}  # fmt: skip
    payload: list[bytes] = list(outputs.values())
    if level > 0:
        from . import zstd

        payload = [zstd.compress(b"".join(payload), level)]
    if signing_key is not None:
        body["mac"] = MAC
    header = dumps(body).encode()  # json's own encoder, without importing json
    value = b"".join([PREFIX, len(header).to_bytes(4, "big"), xxhash.xxh3_128_digest(header),
                      header, *payload])  # fmt: skip
    if signing_key is not None:
        value += _tag(signing_key, key, value)
    return value


def decode(
    value: bytes, key: str, signing_key: bytes | None = None
) -> tuple[dict[str, tuple[str, bytes]], dict[str, Any]]:
    """(role -> (digest, bytes), meta) if ``value`` is a well-formed value of this format for
    ``key`` and every digest matches (and, with ``signing_key``, its MAC verifies); else
    :class:`Refused`, before any output is decompressed or hashed when the header already
    says no."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise Refused("damaged")
    view = memoryview(value)
    prefix = view[:4]
    if prefix != PREFIX and prefix != PREFIX_2:
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
    if not isinstance(header, dict) or not header.keys() >= _FIELDS_2:
        raise Refused("damaged")
    if prefix == PREFIX_2:
        if len(header) != len(_FIELDS_2):
            raise Refused("format")  # a field this reader does not know (a later writer's)
    elif "compression" not in header:
        raise Refused("damaged")
    elif not header.keys() - _FIELDS <= _OPTIONAL:
        raise Refused("format")  # a field this reader does not know (a later writer's)
    if header["key"] != key:
        raise Refused("key" if isinstance(header["key"], str) else "damaged")
    compression, mac = header.get("compression", "none"), header.get("mac")
    if compression not in ("none", "zstd") or mac not in (None, MAC):
        raise Refused("format")  # a scheme this reader does not know
    end = len(view)
    if mac is not None:
        end -= TAG
        if end < FRAME + length:
            raise Refused("damaged")
    if signing_key is not None:
        import hmac

        if mac is None or not hmac.compare_digest(_tag(signing_key, key, view[:end]), view[end:]):
            raise Refused("rejected")
    listed, meta = header["outputs"], header["meta"]
    if not isinstance(listed, list) or not listed or not isinstance(meta, dict):
        raise Refused("damaged")
    for item in listed:
        if not (isinstance(item, list) and len(item) == 3):
            raise Refused("damaged")
        role, digest, size = item
        if not isinstance(role, str) or not valid_digest(digest):
            raise Refused("damaged")
        if type(size) is not int or size < 0:
            raise Refused("damaged")
    payload = view[FRAME + length : end]
    if compression == "zstd":
        from . import zstd

        try:
            payload = memoryview(zstd.decompress(payload, sum(item[2] for item in listed)))
        except zstd.Error:
            raise Refused("damaged") from None
    outputs: dict[str, tuple[str, bytes]] = {}
    offset = 0
    for role, digest, size in listed:
        if role in outputs or offset + size > len(payload):
            raise Refused("damaged")
        data = bytes(payload[offset : offset + size])
        digest = digest.lower()
        if xxhash.xxh3_128_hexdigest(data) != digest:
            raise Refused("damaged")
        outputs[role] = (digest, data)
        offset += size
    if offset != len(payload):
        raise Refused("damaged")  # trailing bytes: not what encode() wrote
    return outputs, meta
