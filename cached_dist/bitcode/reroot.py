"""Renames the modules a summary index shard names, for compiling it in another directory.

A backend compile opens the modules it imports by the paths in the shard's
MODULE_STRTAB_BLOCK. When LLD saw them by absolute paths, a remote worker cannot recreate
those paths, so the shard is rewritten to name them by paths relative to the link's
directory. Path strings are bit-packed, not byte-aligned, so the block is re-encoded
(with unabbreviated records, which every reader accepts) and the enclosing MODULE_BLOCK's
length word adjusted; every other bit is copied as it was. The paths only locate files:
the object compiled from the rewritten shard is the one the original gives.
"""

from __future__ import annotations

from .bitstream import END, ENTER, EOF, RECORD, BitcodeError, BitstreamCursor

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

_MODULE_BLOCK = 8
_MODULE_STRTAB_BLOCK = 19
_MST_ENTRY = 1
_RAW_MAGIC = b"BC\xc0\xde"
_NEW_WIDTH = 4  # abbreviation id width inside the rewritten block
_UNABBREV_RECORD = 3
_OP_VBR = 6


class RerootError(ValueError):
    """The shard has a shape this rewriter does not know: compile it where it is."""


class _BitWriter:
    __slots__ = ("bits", "out", "pending")

    def __init__(self, prefix: bytes, extra_bits: int, extra_count: int) -> None:
        self.out = bytearray(prefix)
        self.pending = extra_bits
        self.bits = extra_count

    @property
    def position(self) -> int:
        return len(self.out) * 8 + self.bits

    def fixed(self, value: int, width: int) -> None:
        self.pending |= value << self.bits
        self.bits += width
        while self.bits >= 8:
            self.out.append(self.pending & 0xFF)
            self.pending >>= 8
            self.bits -= 8

    def vbr(self, value: int, width: int) -> None:
        high = 1 << (width - 1)
        while value >= high:
            self.fixed((value & (high - 1)) | high, width)
            value >>= width - 1
        self.fixed(value, width)

    def align32(self) -> None:
        if self.position % 32:
            self.fixed(0, 32 - self.position % 32)


def rename_modules(data: bytes, rename: Mapping[str, str] | Callable[[str], str]) -> bytes:
    """``data`` with each module path P in its MODULE_STRTAB_BLOCK replaced by rename(P)
    (or rename[P]; paths not in a mapping are kept). Raises RerootError if the shard is not
    a raw bitcode file with one MODULE_BLOCK holding one MODULE_STRTAB_BLOCK."""
    if not data.startswith(_RAW_MAGIC) or len(data) % 4:
        raise RerootError("not a raw bitcode file")
    if callable(rename):
        new_name = rename
    else:
        mapping = rename

        def new_name(path: str) -> str:
            return mapping.get(path, path)

    try:
        return _rewrite(data, new_name)
    except BitcodeError as e:
        raise RerootError(f"malformed bitcode: {e}") from None


def _rewrite(data: bytes, new_name: Callable[[str], str]) -> bytes:
    cur = BitstreamCursor(data)
    while True:  # to the top-level MODULE_BLOCK
        kind = cur.advance()
        if kind == EOF:
            raise RerootError("no MODULE_BLOCK")
        if kind == ENTER and cur.block_id == _MODULE_BLOCK:
            break
        if kind == ENTER:
            cur.skip_block()
            cur.advance()
    length_word = cur.bit_position // 8 - 4  # MODULE_BLOCK's length, in 32-bit words
    width = cur._width  # the MODULE_BLOCK's abbreviation id width
    while True:  # to its MODULE_STRTAB_BLOCK
        start = cur.bit_position
        kind = cur.advance()
        if kind in (END, EOF):
            raise RerootError("no MODULE_STRTAB_BLOCK")
        if kind == ENTER and cur.block_id == _MODULE_STRTAB_BLOCK:
            break
        if kind == ENTER:
            cur.skip_block()
            cur.advance()
    header_end = ((start + width + 8 + 4 + 31) & ~31) + 32  # id, vbr8 19, vbr4 width, len
    if cur.bit_position != header_end or cur._fixed_at(start, width) != 1:
        raise RerootError("unexpected MODULE_STRTAB_BLOCK header")
    records: list[tuple[int, list[int]]] = []
    while True:
        kind = cur.advance()
        if kind == END:
            break
        if kind != RECORD or cur.blob is not None:
            raise RerootError("unexpected entry in MODULE_STRTAB_BLOCK")
        ops = list(cur.ops)
        if cur.code == _MST_ENTRY and ops:
            path = bytes(ops[1:]).decode("utf-8", "surrogateescape")
            renamed = new_name(path).encode("utf-8", "surrogateescape")
            ops = [ops[0], *renamed]
        records.append((cur.code, ops))
    old_end = cur.bit_position
    w = _BitWriter(data[: start // 8], data[start // 8] & ((1 << (start % 8)) - 1), start % 8)
    w.fixed(1, width)  # ENTER_SUBBLOCK
    w.vbr(_MODULE_STRTAB_BLOCK, 8)
    w.vbr(_NEW_WIDTH, 4)
    w.align32()
    length_at = len(w.out)
    w.fixed(0, 32)
    for code, ops in records:
        w.fixed(_UNABBREV_RECORD, _NEW_WIDTH)
        w.vbr(code, _OP_VBR)
        w.vbr(len(ops), _OP_VBR)
        for op in ops:
            w.vbr(op, _OP_VBR)
    w.fixed(0, _NEW_WIDTH)  # END_BLOCK
    w.align32()
    new_end = w.position
    out = w.out
    out[length_at : length_at + 4] = ((new_end - length_at * 8 - 32) // 32).to_bytes(4, "little")
    module_words = int.from_bytes(data[length_word : length_word + 4], "little")
    module_words += (new_end - old_end) // 32
    out[length_word : length_word + 4] = module_words.to_bytes(4, "little")
    out += data[old_end // 8 :]
    return bytes(out)
