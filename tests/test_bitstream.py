"""Tests for the bitstream reader: hand-built streams and clang-22 output."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cached_dist.bitcode.bitstream import (
    END,
    ENTER,
    EOF,
    RECORD,
    BitcodeError,
    BitstreamCursor,
    iter_entries,
)
from tests import shardgen

# -- a tiny bit writer, so every encoding can be exercised without clang -------------


class BitWriter:
    """Minimal LSB-first bitstream writer mirroring the format document."""

    def __init__(self) -> None:
        self.bits: list[int] = []
        self.width = 2
        self._blocks: list[tuple[int, int]] = []  # (outer width, length-word bit index)

    def fixed(self, value: int, width: int) -> None:
        self.bits.extend((value >> i) & 1 for i in range(width))

    def vbr(self, value: int, width: int) -> None:
        hi = 1 << (width - 1)
        while True:
            chunk = value & (hi - 1)
            value >>= width - 1
            if value:
                self.fixed(chunk | hi, width)
            else:
                self.fixed(chunk, width)
                return

    def align32(self) -> None:
        while len(self.bits) % 32:
            self.bits.append(0)

    def enter(self, block_id: int, width: int) -> None:
        self.fixed(1, self.width)
        self.vbr(block_id, 8)
        self.vbr(width, 4)
        self.align32()
        self._blocks.append((self.width, len(self.bits)))
        self.fixed(0, 32)
        self.width = width

    def end(self) -> None:
        self.fixed(0, self.width)
        self.align32()
        outer, at = self._blocks.pop()
        words = (len(self.bits) - at - 32) // 32
        self.bits[at : at + 32] = [(words >> i) & 1 for i in range(32)]
        self.width = outer

    def unabbrev(self, code: int, ops: list[int]) -> None:
        self.fixed(3, self.width)
        self.vbr(code, 6)
        self.vbr(len(ops), 6)
        for op in ops:
            self.vbr(op, 6)

    def define_abbrev(self, ops: list[tuple[str, int]]) -> None:
        """ops: ('lit', v) ('fixed', w) ('vbr', w) ('array', 0) ('char6', 0) ('blob', 0)."""
        self.fixed(2, self.width)
        self.vbr(len(ops), 5)
        self._abbrev_ops(ops)

    def _abbrev_ops(self, ops: list[tuple[str, int]]) -> None:
        codes = {"fixed": 1, "vbr": 2, "array": 3, "char6": 4, "blob": 5}
        for kind, val in ops:
            if kind == "lit":
                self.fixed(1, 1)
                self.vbr(val, 8)
            else:
                self.fixed(0, 1)
                self.fixed(codes[kind], 3)
                if kind in ("fixed", "vbr"):
                    self.vbr(val, 5)

    def to_bytes(self) -> bytes:
        self.align32()
        out = bytearray(b"BC\xc0\xde")
        for i in range(0, len(self.bits), 8):
            out.append(sum(b << j for j, b in enumerate(self.bits[i : i + 8])))
        return bytes(out)


def _handmade() -> bytes:
    w = BitWriter()
    # BLOCKINFO giving block 9 an abbreviation: [lit 7, fixed 40, vbr 3].
    w.enter(0, 2)
    w.unabbrev(1, [9])  # SETBID 9
    w.define_abbrev([("lit", 7), ("fixed", 40), ("vbr", 3)])
    w.end()
    w.enter(8, 3)
    w.unabbrev(1, [2, 0, 63, 64, 2**40 + 5, 2**64 - 1])
    w.define_abbrev([("lit", 4), ("array", 0), ("char6", 0)])  # id 4
    w.define_abbrev([("fixed", 4), ("vbr", 6), ("blob", 0)])  # id 5
    w.define_abbrev([("lit", 6), ("array", 0), ("fixed", 8)])  # id 6
    w.define_abbrev([("lit", 8), ("array", 0), ("vbr", 6)])  # id 7
    w.fixed(4, 3)
    w.vbr(5, 6)
    for c in (0, 26, 52, 62, 63):
        w.fixed(c, 6)
    w.fixed(5, 3)
    w.fixed(11, 4)
    w.vbr(1000, 6)
    w.vbr(3, 6)
    w.align32()
    w.bits.extend((b >> i) & 1 for b in b"xyz" for i in range(8))
    w.align32()
    w.fixed(6, 3)
    w.vbr(300, 6)
    for i in range(300):
        w.fixed(i & 0xFF, 8)
    w.fixed(7, 3)
    w.vbr(3, 6)
    for v in (1, 40, 2**50):
        w.vbr(v, 6)
    w.enter(9, 4)
    w.fixed(4, 4)  # blockinfo abbreviation, first id in block 9
    w.fixed(2**39 + 1, 40)
    w.vbr(100, 3)
    w.end()
    w.enter(10, 2)
    w.unabbrev(5, [1, 2, 3])
    w.end()
    w.unabbrev(2, [])
    w.end()
    return w.to_bytes()


def test_handmade_stream_all_encodings() -> None:
    entries = [
        (e.kind, e.block_id, None if e.kind == ENTER else e.code, e.ops, e.blob)
        for e in iter_entries(_handmade())
    ]
    assert entries == [
        (ENTER, 8, None, [], None),
        (RECORD, 8, 1, [2, 0, 63, 64, 2**40 + 5, 2**64 - 1], None),
        (RECORD, 8, 4, list(b"aA0._"), None),
        (RECORD, 8, 11, [1000], b"xyz"),
        (RECORD, 8, 6, [i & 0xFF for i in range(300)], None),
        (RECORD, 8, 8, [1, 40, 2**50], None),
        (ENTER, 9, None, [], None),
        (RECORD, 9, 7, [2**39 + 1, 100], None),
        (END, 9, 0, [], None),
        (ENTER, 10, None, [], None),
        (RECORD, 10, 5, [1, 2, 3], None),
        (END, 10, 0, [], None),
        (RECORD, 8, 2, [], None),
        (END, 8, 0, [], None),
    ]


def test_skip_block_keeps_walk_balanced() -> None:
    cur = BitstreamCursor(_handmade())
    seen = []
    while (kind := cur.advance()) != EOF:
        if kind == ENTER and cur.block_id == 9:
            cur.skip_block()
        seen.append((kind, cur.block_id, cur.code if kind == RECORD else None))
    assert (ENTER, 9, None) in seen
    assert (RECORD, 9, 7) not in seen
    assert seen[-3:] == [(END, 10, None), (RECORD, 8, 2), (END, 8, None)]


def test_wrapper_header_is_unwrapped() -> None:
    inner = _handmade()
    header = b"".join(x.to_bytes(4, "little") for x in (0x0B17C0DE, 0, 20, len(inner), 7))
    wrapped = header + inner + b"\0" * 12
    plain = [(e.kind, e.block_id, e.code, e.ops, e.blob) for e in iter_entries(inner)]
    assert [(e.kind, e.block_id, e.code, e.ops, e.blob) for e in iter_entries(wrapped)] == plain


@pytest.mark.parametrize(
    "data",
    [b"", b"BC\xc0", b"XXXXXXXX", b"BC\xc0\xde\x35\x14\x00\x00\x05\x00\x00\x00\x62\x0c"],
)
def test_malformed_input_raises(data: bytes) -> None:
    with pytest.raises(BitcodeError):
        list(iter_entries(data))


def test_truncated_block_raises() -> None:
    data = _handmade()
    with pytest.raises(BitcodeError):
        list(iter_entries(data[: len(data) // 2 // 4 * 4]))


# -- against llvm-bcanalyzer on clang-22 output ---------------------------------------

needs_clang = pytest.mark.skipif(
    not shardgen.have_toolchain(), reason=shardgen.TOOLCHAIN_MISSING_REASON
)

_OPEN = re.compile(r"^\s*<(\w+)(?: BlockID=(\d+))? NumWords=(\d+) BlockCodeSize=\d+>")
_CLOSE = re.compile(r"^\s*</\w+>")
_REC = re.compile(r"^\s*<(\w+)((?: codeid=\d+)?)(?: abbrevid=\d+)?((?: op\d+=-?\d+)*)[^>]*/>")


def bcanalyzer_entries(path: Path) -> list[tuple[int, int, int, list[int]]]:
    """(kind, block id, code, ops) per entry, parsed from ``llvm-bcanalyzer -dump``."""
    out = subprocess.run(
        [str(shardgen.BCANALYZER), "-dump", "--non-symbolic", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    entries: list[tuple[int, int, int, list[int]]] = []
    stack: list[int] = []
    for line in out.split("\n\n")[0].splitlines():
        if "<BLOCKINFO_BLOCK/>" in line:
            continue
        if m := _OPEN.match(line):
            bid = int(m[2]) if m[2] else int(m[1].removeprefix("UnknownBlock"))
            stack.append(bid)
            entries.append((ENTER, bid, int(m[3]), []))
        elif _CLOSE.match(line):
            entries.append((END, stack.pop(), 0, []))
        elif m := _REC.match(line):
            code = int(m[2].split("=")[1]) if m[2] else int(m[1].removeprefix("UnknownCode"))
            ops = [int(x.split("=")[1]) & (2**64 - 1) for x in m[3].split()]
            entries.append((RECORD, stack[-1], code, ops))
    return entries


def reader_entries(path: Path) -> list[tuple[int, int, int, list[int]]]:
    return [
        (e.kind, e.block_id, e.code, e.ops if e.kind == RECORD else [])
        for e in iter_entries(path.read_bytes())
    ]


@pytest.fixture(scope="module")
def clang_outputs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """C and C++ modules (templates, vtables, aliases) and their DTLTO shards."""
    root = tmp_path_factory.mktemp("bitstream")
    files: list[Path] = []
    for name, sources, cxx in (
        ("c", shardgen.C_PROGRAM, False),
        ("cxx", shardgen.CXX_PROGRAM, True),
    ):
        d = root / name
        shardgen.write_sources(d, sources)
        srcs = [s for s in sources if not s.endswith(".h")]
        objs = shardgen.compile_thin(d, srcs, ["-g"] if cxx else [])
        files += [d / o for o in objs]
        cap = shardgen.dtlto_capture(d, objs, root / f"{name}-cap", cxx=cxx)
        for i, job in enumerate(cap.jobs):
            shard = root / f"{name}-{i}.thinlto.bc"
            shard.write_bytes(job.shard)
            files.append(shard)
    return files


@needs_clang
def test_reader_matches_bcanalyzer(clang_outputs: list[Path]) -> None:
    for path in clang_outputs:
        expected = bcanalyzer_entries(path)
        assert len(expected) > 5, path
        assert reader_entries(path) == expected, path


@needs_clang
def test_skipping_every_block_reaches_eof(clang_outputs: list[Path]) -> None:
    for path in clang_outputs:
        cur = BitstreamCursor(path.read_bytes())
        top = []
        while (kind := cur.advance()) != EOF:
            if kind == ENTER:
                top.append(cur.block_id)
                cur.skip_block()
        assert top and top[0] in (8, 13), path
