"""The protobuf wire format, for the few REAPI messages of a lookup (store/remote/reapi_wire.py).

Importing protobuf and the generated REAPI modules costs more than a whole cached link; the
lookups need a handful of messages, encoded and decoded here. Decoding treats every byte as
untrusted: each length is checked against what remains, varints are at most 10 bytes,
unknown fields are skipped, groups and bad wire types raise :class:`Malformed`.

Encoding follows what protobuf's own serializer produces for proto3 messages (fields in
field-number order, default values left out), so that a digest of an encoded message equals
the digest of the same message serialized by protobuf (tests/test_reapi_wire.py checks it).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator


class Malformed(ValueError):
    """Bytes that are not the message they should be."""


_MAX_VARINT = 10


def varint(n: int) -> bytes:
    """``n`` as a varint (negative int32/int64 values as their 64-bit two's complement)."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it); Malformed if truncated or longer than 10 bytes."""
    result = 0
    shift = 0
    end = min(len(buf), pos + _MAX_VARINT)
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & ((1 << 64) - 1), pos
        shift += 7
    raise Malformed("truncated or overlong varint")


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field: an int for varints and fixed-size
    fields, bytes for length-delimited ones. Malformed on any inconsistency. A field whose
    wire type is not its declared one is skipped by the caller, as protobuf treats it as an
    unknown field."""
    pos = 0
    n = len(buf)
    while pos < n:
        tag, pos = read_varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise Malformed("field number 0")
        if wire == 0:
            value, pos = read_varint(buf, pos)
            yield number, wire, value
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            if length > n - pos:
                raise Malformed("a length beyond the message")
            yield number, wire, buf[pos : pos + length]
            pos += length
        elif wire == 1 or wire == 5:
            size = 8 if wire == 1 else 4
            if size > n - pos:
                raise Malformed("a fixed-size field beyond the message")
            yield number, wire, int.from_bytes(buf[pos : pos + size], "little")
            pos += size
        else:
            raise Malformed(f"wire type {wire}")


def as_bytes(value: int | bytes) -> bytes:
    if isinstance(value, int):
        raise Malformed("a number where bytes were expected")
    return value


def as_int(value: int | bytes) -> int:
    if not isinstance(value, int):
        raise Malformed("bytes where a number was expected")
    return value


def as_int64(value: int | bytes) -> int:
    n = as_int(value)
    return n - (1 << 64) if n >= 1 << 63 else n


def as_int32(value: int | bytes) -> int:
    """An int32 field: protobuf truncates to 32 bits (negative ones come sign-extended)."""
    n = as_int(value) & 0xFFFFFFFF
    return n - (1 << 32) if n >= 1 << 31 else n


def as_text(value: int | bytes) -> str:
    try:
        return as_bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed("a string that is not UTF-8") from None


def packed_varints(value: int | bytes) -> list[int]:
    """A repeated scalar field's occurrence: one varint, or a packed run of them."""
    if isinstance(value, int):
        return [value]
    out = []
    pos = 0
    while pos < len(value):
        n, pos = read_varint(value, pos)
        out.append(n)
    return out


def put_bytes(number: int, data: bytes) -> bytes:
    """A length-delimited field (empty: left out, as proto3 does for singular fields; a
    repeated field's empty element goes through :func:`put_always`)."""
    return put_always(number, data) if data else b""


def put_always(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def put_text(number: int, text: str) -> bytes:
    return put_bytes(number, text.encode("utf-8"))


def put_varint(number: int, n: int) -> bytes:
    return varint(number << 3) + varint(n) if n else b""
