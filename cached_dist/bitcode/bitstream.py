"""A fast, pure-Python reader for LLVM's bitstream container format.

The format (see LLVM's "LLVM Bitcode File Format" document) is a stream of
bit-packed fields, least significant bit first, grouped into nested blocks.
Every block is 32-bit aligned and starts with its length in 32-bit words, so a
reader can step over a block it does not care about without decoding it.

This module sits on the cache-hit path of the distributor, so it avoids
per-bit work: every field is read by taking up to 8 bytes at the current byte
offset with ``int.from_bytes`` and shifting, and the common operand encodings
(fixed, VBR, char6 and fixed-width arrays) have dedicated fast paths.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Final

__all__ = [
    "BLOCKINFO_BLOCK_ID",
    "END",
    "ENTER",
    "EOF",
    "RECORD",
    "BitcodeError",
    "BitstreamCursor",
    "Entry",
    "bitcode_payload",
    "iter_entries",
]

BLOCKINFO_BLOCK_ID: Final = 0

# Kinds returned by BitstreamCursor.advance().
EOF: Final = 0
ENTER: Final = 1
END: Final = 2
RECORD: Final = 3

# Builtin abbreviation ids.
_END_BLOCK: Final = 0
_ENTER_SUBBLOCK: Final = 1
_DEFINE_ABBREV: Final = 2
_UNABBREV_RECORD: Final = 3

# Operand encodings as stored in DEFINE_ABBREV (0 is our tag for literals).
_LITERAL: Final = 0
_FIXED: Final = 1
_VBR: Final = 2
_ARRAY: Final = 3
_CHAR6: Final = 4
_BLOB: Final = 5

_RAW_MAGIC: Final = b"BC\xc0\xde"
_WRAPPER_MAGIC: Final = 0x0B17C0DE

# char6 decoding: 'a'..'z', 'A'..'Z', '0'..'9', '.', '_' -> byte values.
_CHAR6_TABLE: Final = tuple(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._")

# SETBID record code inside the BLOCKINFO block.
_BLOCKINFO_CODE_SETBID: Final = 1

_from_bytes = int.from_bytes
_MASKS: Final = tuple((1 << w) - 1 for w in range(65))

# A compiled abbreviation: tuple of (encoding, width) operand pairs.  For an
# array the pair is (_ARRAY, element encoding) followed by the element's width
# as a third item; blobs and char6 carry width 0.
Op = tuple[int, int, int]
Abbrev = tuple[Op, ...]


class BitcodeError(ValueError):
    """The input is not well-formed bitstream data."""


class Entry:
    """One step of a bitstream walk, as yielded by :func:`iter_entries`.

    ``kind`` is ENTER (``block_id`` set, ``code`` holds the length in words),
    END (``block_id`` of the block being left) or RECORD.
    """

    __slots__ = ("blob", "block_id", "code", "kind", "ops")

    def __init__(
        self, kind: int, block_id: int, code: int, ops: list[int], blob: bytes | None
    ) -> None:
        self.kind = kind
        self.block_id = block_id
        self.code = code
        self.ops = ops
        self.blob = blob

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Entry) and (
            self.kind,
            self.block_id,
            self.code,
            self.ops,
            self.blob,
        ) == (other.kind, other.block_id, other.code, other.ops, other.blob)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Entry({self.kind}, {self.block_id}, {self.code}, {self.ops!r}, {self.blob!r})"


def bitcode_payload(data: bytes) -> tuple[int, int]:
    """Return the (start, end) byte range of the bitstream inside ``data``.

    Handles the optional bitcode wrapper header (used on Darwin) so callers do
    not have to care which flavour they were given.
    """
    if len(data) >= 20 and _from_bytes(data[0:4], "little") == _WRAPPER_MAGIC:
        offset = _from_bytes(data[8:12], "little")
        size = _from_bytes(data[12:16], "little")
        if offset + size > len(data) or offset < 20:
            raise BitcodeError("bitcode wrapper header points outside the file")
        start, end = offset, offset + size
    else:
        start, end = 0, len(data)
    if data[start : start + 4] != _RAW_MAGIC:
        raise BitcodeError("not LLVM bitcode (missing 'BC' 0xC0DE magic)")
    if (end - start) % 4:
        raise BitcodeError("bitcode size is not a multiple of 4 bytes")
    return start + 4, end


class BitstreamCursor:
    """Walks a bitstream block by block, record by record.

    Call :meth:`advance` repeatedly; it returns ENTER, END, RECORD or EOF and
    sets ``block_id``, ``code``, ``ops`` and ``blob`` accordingly.  Right after
    ENTER, :meth:`skip_block` steps over the whole block using its length word.
    BLOCKINFO blocks are consumed internally (their abbreviations are applied
    to later blocks) and never reported.
    """

    __slots__ = (
        "_abbrevs",
        "_blockinfo",
        "_data",
        "_end",
        "_pending_end",
        "_pos",
        "_stack",
        "_width",
        "blob",
        "block_id",
        "code",
        "ops",
    )

    def __init__(self, data: bytes, start: int | None = None, end: int | None = None) -> None:
        if start is None or end is None:
            start, end = bitcode_payload(data)
        self._data = data
        self._pos = start * 8
        self._end = end * 8
        self._width = 2
        self._abbrevs: list[Abbrev] = []
        # Each entry: (block_id, outer abbrev width, outer abbrevs, end bit).
        self._stack: list[tuple[int, int, list[Abbrev], int]] = []
        self._blockinfo: dict[int, list[Abbrev]] = {}
        self._pending_end = -1
        self.block_id = -1
        self.code = 0
        self.ops: list[int] = []
        self.blob: bytes | None = None

    @property
    def depth(self) -> int:
        """Nesting depth of the block the cursor is in (0 at top level)."""
        return len(self._stack)

    @property
    def bit_position(self) -> int:
        """Current bit offset into the underlying buffer."""
        return self._pos

    # -- primitive reads -------------------------------------------------

    def _fixed(self, width: int) -> int:
        pos = self._pos
        if pos + width > self._end:
            raise BitcodeError("read past end of bitstream")
        self._pos = pos + width
        if width <= 56:
            b = pos >> 3
            return (_from_bytes(self._data[b : b + 8], "little") >> (pos & 7)) & ((1 << width) - 1)
        lo = self._fixed_at(pos, 32)
        return lo | (self._fixed_at(pos + 32, width - 32) << 32)

    def _fixed_at(self, pos: int, width: int) -> int:
        b = pos >> 3
        return (_from_bytes(self._data[b : b + 8], "little") >> (pos & 7)) & ((1 << width) - 1)

    def _vbr(self, width: int) -> int:
        pos = self._pos
        b = pos >> 3
        chunk = (_from_bytes(self._data[b : b + 8], "little") >> (pos & 7)) & ((1 << width) - 1)
        hi = 1 << (width - 1)
        if not chunk & hi:
            pos += width
            if pos > self._end:
                raise BitcodeError("read past end of bitstream")
            self._pos = pos
            return chunk
        return self._vbr_many(1, width)[0]

    def _vbr_many(self, count: int, width: int) -> list[int]:
        """Decode ``count`` consecutive VBR fields from a 512-bit window."""
        data = self._data
        pos = self._pos
        if pos + count * width > self._end:
            # Every field takes at least ``width`` bits: fail now, not after a huge loop.
            raise BitcodeError("read past end of bitstream")
        out: list[int] = []
        append = out.append
        wmask = (1 << width) - 1
        hi = 1 << (width - 1)
        low = hi - 1
        b = pos >> 3
        buf = _from_bytes(data[b : b + 64], "little") >> (pos & 7)
        avail = 512 - (pos & 7)
        for _ in range(count):
            if avail < width:
                b = pos >> 3
                buf = _from_bytes(data[b : b + 64], "little") >> (pos & 7)
                avail = 512 - (pos & 7)
            chunk = buf & wmask
            buf >>= width
            avail -= width
            pos += width
            if not chunk & hi:
                append(chunk)
                continue
            value = chunk & low
            shift = width - 1
            while True:
                if avail < width:
                    b = pos >> 3
                    buf = _from_bytes(data[b : b + 64], "little") >> (pos & 7)
                    avail = 512 - (pos & 7)
                chunk = buf & wmask
                buf >>= width
                avail -= width
                pos += width
                value |= (chunk & low) << shift
                if not chunk & hi:
                    break
                shift += width - 1
                if shift > 64:
                    raise BitcodeError("malformed VBR value")
            append(value)
        if pos > self._end:
            raise BitcodeError("read past end of bitstream")
        self._pos = pos
        return out

    def _align32(self) -> None:
        self._pos = (self._pos + 31) & ~31

    # -- walking ---------------------------------------------------------

    def advance(self) -> int:
        """Move to the next entry and return its kind (ENTER/END/RECORD/EOF)."""
        while True:
            if self._pending_end >= 0:
                self._pop()
                return END
            if not self._stack and self._end - self._pos < 32:
                # Top level: trailing bits (if any) are padding.
                self.block_id = -1
                return EOF
            abbrev_id = self._fixed(self._width)
            if abbrev_id >= 3:
                if not self._stack:
                    raise BitcodeError("record at top level")
                if abbrev_id == _UNABBREV_RECORD:
                    self._read_unabbreviated()
                else:
                    self._read_abbreviated(abbrev_id)
                self.block_id = self._stack[-1][0]
                return RECORD
            if abbrev_id == _ENTER_SUBBLOCK:
                block_id = self._vbr(8)
                new_width = self._vbr(4)
                self._align32()
                num_words = self._fixed(32)
                body = self._pos
                end_bit = body + num_words * 32
                if end_bit > self._end or new_width < 1 or new_width > 32:
                    raise BitcodeError("malformed block header")
                if block_id == BLOCKINFO_BLOCK_ID:
                    self._read_blockinfo(new_width, end_bit)
                    continue
                self._stack.append((block_id, self._width, self._abbrevs, end_bit))
                self._width = new_width
                self._abbrevs = list(self._blockinfo.get(block_id, ()))
                self.block_id = block_id
                self.code = num_words
                self.ops = []
                self.blob = None
                return ENTER
            if abbrev_id == _END_BLOCK:
                if not self._stack:
                    raise BitcodeError("END_BLOCK at top level")
                self._align32()
                self._pop()
                return END
            # DEFINE_ABBREV
            if not self._stack:
                raise BitcodeError("DEFINE_ABBREV at top level")
            self._abbrevs.append(self._read_abbrev_def())

    def skip_block(self) -> None:
        """Skip the block just entered, using its length word.

        The next :meth:`advance` reports the END of that block, so walks stay
        balanced whether or not a block was decoded.
        """
        if not self._stack:
            raise BitcodeError("skip_block outside a block")
        self._pos = self._stack[-1][3]
        self._pending_end = 1

    def _pop(self) -> None:
        block_id, width, abbrevs, end_bit = self._stack.pop()
        if self._pending_end < 0 and self._pos != end_bit:
            raise BitcodeError(f"block {block_id} length word disagrees with its END_BLOCK")
        self._pos = end_bit
        self._pending_end = -1
        self._width = width
        self._abbrevs = abbrevs
        self.block_id = block_id
        self.code = 0
        self.ops = []
        self.blob = None

    def _read_abbrev_def(self) -> Abbrev:
        num_ops = self._vbr(5)
        ops: list[Op] = []
        i = 0
        while i < num_ops:
            if self._fixed(1):
                ops.append((_LITERAL, self._vbr(8), 0))
                i += 1
                continue
            enc = self._fixed(3)
            if enc in (_FIXED, _VBR):
                width = self._vbr(5)
                if width == 0:
                    # A zero-width field always reads as 0.
                    ops.append((_LITERAL, 0, 0))
                elif width > 64 or (enc == _VBR and width < 2):
                    raise BitcodeError("bad abbreviation operand width")
                else:
                    ops.append((enc, width, 0))
            elif enc == _ARRAY:
                if i + 2 != num_ops:
                    raise BitcodeError("array must be the next-to-last abbreviation operand")
                if self._fixed(1):
                    raise BitcodeError("array element cannot be a literal")
                elt = self._fixed(3)
                elt_width = 0
                if elt in (_FIXED, _VBR):
                    elt_width = self._vbr(5)
                    if not 0 < elt_width <= 64 or (elt == _VBR and elt_width < 2):
                        # Zero-width or one-bit VBR elements would never advance.
                        raise BitcodeError("bad array element width")
                elif elt != _CHAR6:
                    raise BitcodeError("unsupported array element encoding")
                ops.append((_ARRAY, elt, elt_width))
                i += 1
            elif enc == _CHAR6:
                ops.append((_CHAR6, 6, 0))
            elif enc == _BLOB:
                if i + 1 != num_ops:
                    raise BitcodeError("blob must be the last abbreviation operand")
                ops.append((_BLOB, 0, 0))
            else:
                raise BitcodeError(f"unknown abbreviation encoding {enc}")
            i += 1
        if not ops or ops[0][0] in (_ARRAY, _BLOB):
            raise BitcodeError("abbreviation has no scalar record code")
        return tuple(ops)

    def _read_blockinfo(self, width: int, end_bit: int) -> None:
        """Consume a BLOCKINFO block, registering abbreviations per block id."""
        outer_width = self._width
        self._width = width
        current: list[Abbrev] | None = None
        while True:
            abbrev_id = self._fixed(width)
            if abbrev_id == _END_BLOCK:
                self._align32()
                break
            if abbrev_id == _DEFINE_ABBREV:
                if current is None:
                    raise BitcodeError("BLOCKINFO abbreviation before SETBID")
                current.append(self._read_abbrev_def())
            elif abbrev_id == _UNABBREV_RECORD:
                code = self._vbr(6)
                num_ops = self._vbr(6)
                vals = self._vbr_many(num_ops, 6) if num_ops else []
                if code == _BLOCKINFO_CODE_SETBID:
                    if not vals:
                        raise BitcodeError("empty SETBID record")
                    current = self._blockinfo.setdefault(vals[0], [])
                # BLOCKNAME / SETRECORDNAME are informational only.
            elif abbrev_id == _ENTER_SUBBLOCK:
                raise BitcodeError("nested block inside BLOCKINFO")
            else:
                raise BitcodeError("abbreviated record inside BLOCKINFO")
        if self._pos != end_bit:
            raise BitcodeError("BLOCKINFO length word disagrees with its END_BLOCK")
        self._width = outer_width

    def _read_unabbreviated(self) -> None:
        vbr = self._vbr
        self.code = vbr(6)
        num_ops = vbr(6)
        self.ops = self._vbr_many(num_ops, 6) if num_ops else []
        self.blob = None

    def _read_abbreviated(self, abbrev_id: int) -> None:
        """Decode one abbreviated record from a 512-bit window, fully inlined.

        This is the hot loop of shard canonicalization: every operand is taken
        from a local integer window that is refilled only when it runs low.
        """
        try:
            abbrev = self._abbrevs[abbrev_id - 4]
        except IndexError:
            raise BitcodeError(f"undefined abbreviation id {abbrev_id}") from None
        data = self._data
        pos = self._pos
        b = pos >> 3
        buf = _from_bytes(data[b : b + 64], "little") >> (pos & 7)
        avail = 512 - (pos & 7)
        vals: list[int] = []
        append = vals.append
        blob: bytes | None = None
        for enc, width, elt_width in abbrev:
            if enc == _VBR:
                # Fast path: a single-chunk VBR value needs no loop.
                if avail < 64:
                    b = pos >> 3
                    buf = _from_bytes(data[b : b + 64], "little") >> (pos & 7)
                    avail = 512 - (pos & 7)
                chunk = buf & _MASKS[width]
                if not chunk >> (width - 1):
                    buf >>= width
                    avail -= width
                    pos += width
                    append(chunk)
                    continue
            elif enc == _FIXED:
                if avail < 64:
                    b = pos >> 3
                    buf = _from_bytes(data[b : b + 64], "little") >> (pos & 7)
                    avail = 512 - (pos & 7)
                append(buf & _MASKS[width])
                buf >>= width
                avail -= width
                pos += width
                continue
            elif enc == _LITERAL:
                append(width)
                continue
            elif enc == _CHAR6:
                if avail < 64:
                    b = pos >> 3
                    buf = _from_bytes(data[b : b + 64], "little") >> (pos & 7)
                    avail = 512 - (pos & 7)
                append(_CHAR6_TABLE[buf & 63])
                buf >>= 6
                avail -= 6
                pos += 6
                continue
            if enc in (_VBR, _ARRAY):
                # A VBR scalar, or the vbr6 element count of an array.
                w = width if enc == _VBR else 6
                hi = 1 << (w - 1)
                wmask = (1 << w) - 1
                value = 0
                shift = 0
                while True:
                    if avail < w:
                        b = pos >> 3
                        buf = _from_bytes(data[b : b + 64], "little") >> (pos & 7)
                        avail = 512 - (pos & 7)
                    chunk = buf & wmask
                    buf >>= w
                    avail -= w
                    pos += w
                    value |= (chunk & (hi - 1)) << shift
                    if not chunk & hi:
                        break
                    shift += w - 1
                    if shift > 64:
                        raise BitcodeError("malformed VBR value")
                if enc == _VBR:
                    append(value)
                    continue
                count = value
                if width == _VBR:
                    self._pos = pos
                    if count:
                        vals.extend(self._vbr_many(count, elt_width))
                else:
                    self._pos = pos
                    ew = 6 if width == _CHAR6 else elt_width
                    if width == _CHAR6:
                        table = _CHAR6_TABLE
                        n = len(vals)
                        self._fixed_array(count, 6, vals)
                        vals[n:] = [table[c] for c in vals[n:]]
                    else:
                        self._fixed_array(count, ew, vals)
                pos = self._pos
                b = pos >> 3
                buf = _from_bytes(data[b : b + 64], "little") >> (pos & 7)
                avail = 512 - (pos & 7)
                continue
            # Blob: vbr6 length, 32-bit aligned bytes, then realign.
            self._pos = pos
            length = self._vbr(6)
            self._align32()
            start = self._pos >> 3
            if self._pos + length * 8 > self._end:
                raise BitcodeError("blob runs past end of bitstream")
            blob = data[start : start + length]
            self._pos += length * 8
            self._align32()
            pos = self._pos
        if pos > self._end:
            raise BitcodeError("read past end of bitstream")
        self._pos = pos
        self.code = vals[0]
        self.ops = vals[1:]
        self.blob = blob

    def _fixed_array(self, count: int, width: int, out: list[int]) -> None:
        """Read ``count`` fixed-width elements, many per integer load."""
        if count == 0:
            return
        pos = self._pos
        total = count * width
        if pos + total > self._end:
            raise BitcodeError("array runs past end of bitstream")
        if width > 56:
            fixed = self._fixed
            out.extend([fixed(width) for _ in range(count)])
            return
        data = self._data
        mask = (1 << width) - 1
        per = max(1, 448 // width)  # elements per window, keeps shifts cheap
        done = 0
        while done < count:
            n = min(per, count - done)
            b = pos >> 3
            big = _from_bytes(data[b : b + 64], "little") >> (pos & 7)
            out.extend([(big >> (i * width)) & mask for i in range(n)])
            pos += n * width
            done += n
        self._pos = pos


def iter_entries(data: bytes) -> Iterator[Entry]:
    """Yield every block boundary and record of a bitcode file, in order.

    A convenience over :class:`BitstreamCursor` for tests and tools; hot paths
    should drive the cursor directly and skip blocks they do not need.
    """
    cur = BitstreamCursor(data)
    while True:
        kind = cur.advance()
        if kind == EOF:
            return
        yield Entry(kind, cur.block_id, cur.code, cur.ops, cur.blob)
