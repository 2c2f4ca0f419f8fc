"""HPACK (RFC 7541), HTTP/2's header compression, for the lookup client (store/remote/h2grpc.py).

Decoding is complete, since a server may use any of it: the static and dynamic tables,
integers, and Huffman-coded strings. The Huffman code of Appendix B is canonical, so its
code lengths (one per symbol, EOS last) define it. Every length and index from the server is
checked; any error is :class:`HpackError` (the connection cannot be used after it).
Encoding sends every header as a literal without indexing and without Huffman coding, which
any decoder takes and which leaves the server's table untouched.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


class HpackError(ValueError):
    """A header block that does not decode."""


STATIC = (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
    (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
    (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
    ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
    ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
    ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
    ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""),
    ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""),
    ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""),
    ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
)  # fmt: skip

#: Code length in bits of each symbol 0-255 and EOS (256), RFC 7541 Appendix B.
_LENGTHS = bytes.fromhex(
    "0d171c1c1c1c1c1c1c181e1c1c1e1c1c1c1c1c1c1c1c1e1c1c1c1c1c1c1c1c1c060a0a0c0d06080b0a0a080b08060606"
    "0505050606060606060607080f060c0a0d06070707070707070707070707070707070707070707070807080d130d0e06"
    "0f05060506050606060507070606060506070605050607070707070f0b0e0d1c14161414161616171617171717171817"
    "181816171817171717151617161717181615141616171715171616181516171715151615171617171416161617161617"
    "1a1a1413161716191a1a1a1b1b1a181913151a1b1b1a1b1815151a1a1c1b1b1b14181415161515171616191918181a17"
    "1a1b1a1a1b1b1b1b1b1c1b1b1b1b1b1a1e"
)
_EOS = 256
#: The canonical decoding tables, built on first use: per length, the first code, and the
#: symbols in code order.
_first: list[int] = []
_count: list[int] = []
_offset: list[int] = []
_symbols: list[int] = []


def _tables() -> None:
    order = sorted(range(257), key=lambda s: (_LENGTHS[s], s))
    counts = [0] * 31
    for s in order:
        counts[_LENGTHS[s]] += 1
    first, offset = [0] * 31, [0] * 31
    code = seen = 0
    for n in range(1, 31):
        code = (code + counts[n - 1]) << 1
        first[n], offset[n] = code, seen
        seen += counts[n]
    _count[:], _first[:], _offset[:], _symbols[:] = counts, first, offset, order


def huffman_decode(data: bytes) -> bytes:
    if not _symbols:
        _tables()
    out = bytearray()
    code = length = 0
    first, count, offset, symbols = _first, _count, _offset, _symbols
    for byte in data:
        for shift in range(7, -1, -1):
            code = code << 1 | (byte >> shift) & 1
            length += 1
            index = code - first[length]
            if index < count[length]:
                symbol = symbols[offset[length] + index]
                if symbol == _EOS:
                    raise HpackError("EOS in a Huffman string")
                out.append(symbol)
                code = length = 0
            elif length >= 30:
                raise HpackError("not a Huffman code")
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("bad Huffman padding")
    return bytes(out)


def _integer(block: bytes, pos: int, prefix: int) -> tuple[int, int]:
    limit = (1 << prefix) - 1
    n = block[pos] & limit
    pos += 1
    if n < limit:
        return n, pos
    shift = 0
    while pos < len(block) and shift <= 21:  # at most 2**28 more: far above any limit here
        b = block[pos]
        pos += 1
        n += (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7
    raise HpackError("truncated or overlong integer")


def _string(block: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(block):
        raise HpackError("truncated header block")
    huffman = block[pos] & 0x80
    n, pos = _integer(block, pos, 7)
    if n > len(block) - pos:
        raise HpackError("a string beyond the header block")
    raw = block[pos : pos + n]
    data = huffman_decode(raw) if huffman else raw
    return data.decode("latin-1"), pos + n


class Decoder:
    """One connection's decoding state (the dynamic table)."""

    def __init__(self, max_size: int = 4096) -> None:
        self.max_size = max_size  # our SETTINGS_HEADER_TABLE_SIZE: the most the server may use
        self.size_limit = max_size
        self.table: list[tuple[str, str]] = []  # newest first
        self.size = 0

    def _entry(self, index: int) -> tuple[str, str]:
        if 0 < index <= len(STATIC):
            return STATIC[index - 1]
        i = index - len(STATIC) - 1
        if 0 <= i < len(self.table):
            return self.table[i]
        raise HpackError(f"header index {index} out of range")

    def _add(self, name: str, value: str) -> None:
        self.table.insert(0, (name, value))
        self.size += len(name) + len(value) + 32
        self._evict()

    def _evict(self) -> None:
        while self.size > self.size_limit and self.table:
            name, value = self.table.pop()
            self.size -= len(name) + len(value) + 32

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        headers = []
        pos = 0
        while pos < len(block):
            b = block[pos]
            if b & 0x80:
                index, pos = _integer(block, pos, 7)
                headers.append(self._entry(index))
                continue
            if b & 0xE0 == 0x20:
                size, pos = _integer(block, pos, 5)
                if size > self.max_size:
                    raise HpackError("table size above the one allowed")
                self.size_limit = size
                self._evict()
                continue
            indexing = b & 0xC0 == 0x40
            index, pos = _integer(block, pos, 6 if indexing else 4)
            if index:
                name = self._entry(index)[0]
            else:
                name, pos = _string(block, pos)
            value, pos = _string(block, pos)
            headers.append((name, value))
            if indexing:
                self._add(name, value)
        return headers


def _put_integer(n: int, prefix: int, first: int = 0) -> bytes:
    limit = (1 << prefix) - 1
    if n < limit:
        return bytes([first | n])
    out = bytearray([first | limit])
    n -= limit
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode(headers: Sequence[tuple[str, str | bytes]]) -> bytes:
    """A header block of literals without indexing (names must be lower case)."""
    out = bytearray()
    for name, value in headers:
        raw_name = name.encode("latin-1")
        raw = value if isinstance(value, bytes) else value.encode("latin-1")
        out += b"\x00" + _put_integer(len(raw_name), 7) + raw_name
        out += _put_integer(len(raw), 7) + raw
    return bytes(out)
