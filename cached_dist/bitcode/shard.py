"""Canonical form of a DTLTO summary index shard (``*.native.o.thinlto.bc``).

LLD writes one shard per backend job.  Its bytes change from link to link even
when the backend would produce the very same object: module paths carry
per-link names (``libx.a(t2.o at 106).2.1490.o`` for regular archive members,
absolute paths when the link used them) and values are numbered by link-local
value ids.  A cache key over the raw bytes therefore never hits for jobs that
touch a regular static library.

The canonical form keeps every bit of information a backend compile reads from
the shard, but names things by content:

* modules by the content digest of the file behind their path (as given by the
  caller), falling back to the path string itself for files it does not know;
* values by GUID instead of value id (VALUE_GUID records give the mapping);
* summary records as an order-independent multiset (records that modify the
  next or previous summary record travel with it).

Only record kinds whose layout is known for the summary versions listed in
``SUPPORTED_SUMMARY_VERSIONS`` are rewritten.  Anything else makes the result
fall back to a tagged hash of the raw bytes, which can only hit for
byte-identical shards.  See docs/shards.md.
"""

from __future__ import annotations

import xxhash

from .bitstream import END, ENTER, EOF, BitcodeError, BitstreamCursor
from .tags import CANON_TAG, RAW_TAG

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

__all__ = ["SUPPORTED_SUMMARY_VERSIONS", "CanonicalShard", "canonical_shard", "raw_digest"]

# Bump the tags (tags.py) when the canonical encoding changes. _shard.c is a port of this
# module and bitstream.py: change both together (tests/test_native_shard.py compares them).

# Block ids (LLVMBitCodes.h, BlockIDs).
_MODULE_BLOCK: Final = 8
_MODULE_STRTAB_BLOCK: Final = 19
_GLOBALVAL_SUMMARY_BLOCK: Final = 20
_STRTAB_BLOCK: Final = 23

# MODULE_BLOCK record codes.
_MODULE_CODE_VERSION: Final = 1
# MODULE_STRTAB record codes.
_MST_ENTRY: Final = 1
_MST_HASH: Final = 2
# STRTAB record codes.
_STRTAB_BLOB: Final = 1

# GLOBALVAL_SUMMARY record codes (GlobalValueSummarySymtabCodes).
_FS_COMBINED: Final = 4
_FS_COMBINED_PROFILE: Final = 5
_FS_COMBINED_GLOBALVAR_INIT_REFS: Final = 6
_FS_COMBINED_ALIAS: Final = 8
_FS_COMBINED_ORIGINAL_NAME: Final = 9
_FS_VERSION: Final = 10
_FS_TYPE_TESTS: Final = 11
_FS_TYPE_TEST_ASSUME_VCALLS: Final = 12
_FS_TYPE_CHECKED_LOAD_VCALLS: Final = 13
_FS_TYPE_TEST_ASSUME_CONST_VCALL: Final = 14
_FS_TYPE_CHECKED_LOAD_CONST_VCALL: Final = 15
_FS_VALUE_GUID: Final = 16
_FS_FLAGS: Final = 20
_FS_BLOCK_COUNT: Final = 24

# Records that describe the *next* function summary record.  Their operands
# are type-id GUIDs, offsets and constant arguments: no value or module ids.
_FUNCTION_PREFIX_CODES: Final = frozenset(
    {
        _FS_TYPE_TESTS,
        _FS_TYPE_TEST_ASSUME_VCALLS,
        _FS_TYPE_CHECKED_LOAD_VCALLS,
        _FS_TYPE_TEST_ASSUME_CONST_VCALL,
        _FS_TYPE_CHECKED_LOAD_CONST_VCALL,
    }
)

# Summary versions whose combined-record layouts this module knows (LLVM 22
# writes 12; checked against llvm-bcanalyzer dumps and LLVMBitCodes.h).
SUPPORTED_SUMMARY_VERSIONS: Final = frozenset({12})

# Fixed operand count before the ref list of FS_COMBINED[_PROFILE] in v12:
# valueid, modid, flags, instcount, fflags, entrycount, numrefs, rorefcnt,
# worefcnt.
_FUNC_HEADER: Final = 9


class CanonicalShard:
    """Digest of a shard's canonical form.

    ``exact`` is False when the shard held something this module cannot
    interpret; ``digest`` is then a tagged hash of the raw bytes (a cache key
    that only hits for byte-identical shards) and ``reason`` says why.
    """

    __slots__ = ("digest", "exact", "reason")

    def __init__(self, digest: str, exact: bool, reason: str) -> None:
        self.digest = digest
        self.exact = exact
        self.reason = reason

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CanonicalShard) and (self.digest, self.exact, self.reason) == (
            other.digest, other.exact, other.reason
        )  # fmt: skip

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CanonicalShard({self.digest!r}, exact={self.exact}, reason={self.reason!r})"


class _Unsupported(Exception):
    """Internal: the shard holds something we will not rewrite."""


def raw_digest(data: bytes) -> str:
    """Conservative digest of the raw shard bytes (never equal to a canonical one)."""
    return xxhash.xxh3_128_hexdigest(RAW_TAG + data)


def canonical_shard(data: bytes, module_digest: Callable[[str], str | None]) -> CanonicalShard:
    """Compute the canonical digest of a summary index shard.

    ``module_digest(path)`` maps a module path found in the shard's
    MODULE_STRTAB to the content digest of that file, or None if the path is
    not one of the job's files (the path string then stays in the canonical
    form, which is safe but path-dependent).
    """
    try:
        parts = _canonical_parts(data, module_digest)
    except _Unsupported as exc:
        return CanonicalShard(raw_digest(data), False, str(exc))
    except BitcodeError as exc:
        return CanonicalShard(raw_digest(data), False, f"malformed bitcode: {exc}")
    parts.sort()
    body = "\n".join(parts).encode("utf-8", "surrogatepass")
    return CanonicalShard(xxhash.xxh3_128_hexdigest(CANON_TAG + body), True, "")


def _canonical_parts(data: bytes, module_digest: Callable[[str], str | None]) -> list[str]:
    """Walk the shard and return the canonical encodings of all its records."""
    cur = BitstreamCursor(data)
    parts: list[str] = []
    seen_module = False
    while True:
        kind = cur.advance()
        if kind == EOF:
            break
        if kind != ENTER:  # pragma: no cover - the cursor only reports ENTER at top level
            raise _Unsupported("unexpected top-level entry")
        if cur.block_id == _MODULE_BLOCK:
            if seen_module:
                raise _Unsupported("more than one MODULE_BLOCK")
            seen_module = True
            _module_block(cur, parts, module_digest)
        elif cur.block_id == _STRTAB_BLOCK:
            for code, ops, blob in _flat_records(cur, "STRTAB_BLOCK"):
                if code != _STRTAB_BLOB or ops:
                    raise _Unsupported(f"unknown STRTAB record code {code}")
                # Combined-index strtabs only hold names (type ids, CFI
                # functions): path-independent, kept verbatim.
                parts.append(repr(("strtab", blob)))
        else:
            raise _Unsupported(f"unknown top-level block {cur.block_id}")
    if not seen_module:
        raise _Unsupported("no MODULE_BLOCK")
    return parts


def _flat_records(cur: BitstreamCursor, name: str) -> list[tuple[int, list[int], bytes | None]]:
    """Read the records of the block just entered; nested blocks are refused."""
    out: list[tuple[int, list[int], bytes | None]] = []
    while True:
        kind = cur.advance()
        if kind == END:
            return out
        if kind == ENTER:
            raise _Unsupported(f"unknown sub-block {cur.block_id} in {name}")
        if kind == EOF:  # pragma: no cover - cursor raises on truncated blocks
            raise BitcodeError(f"unterminated {name}")
        out.append((cur.code, cur.ops, cur.blob))


def _module_block(
    cur: BitstreamCursor, parts: list[str], module_digest: Callable[[str], str | None]
) -> None:
    modules: dict[int, str] | None = None
    summary: list[tuple[int, list[int], bytes | None]] | None = None
    while True:
        kind = cur.advance()
        if kind == END:
            break
        if kind == ENTER:
            if cur.block_id == _MODULE_STRTAB_BLOCK and modules is None:
                modules = _module_strtab(
                    _flat_records(cur, "MODULE_STRTAB_BLOCK"), parts, module_digest
                )
            elif cur.block_id == _GLOBALVAL_SUMMARY_BLOCK and summary is None:
                summary = _flat_records(cur, "GLOBALVAL_SUMMARY_BLOCK")
            else:
                raise _Unsupported(f"unexpected block {cur.block_id} in MODULE_BLOCK")
            continue
        if kind == EOF:  # pragma: no cover
            raise BitcodeError("unterminated MODULE_BLOCK")
        if cur.code != _MODULE_CODE_VERSION or cur.blob is not None:
            raise _Unsupported(f"unknown MODULE_BLOCK record code {cur.code}")
        parts.append(repr(("module-version", tuple(cur.ops))))
    if summary is None:
        raise _Unsupported("no GLOBALVAL_SUMMARY_BLOCK")
    _summary(summary, modules or {}, parts)


def _module_strtab(
    records: list[tuple[int, list[int], bytes | None]],
    parts: list[str],
    module_digest: Callable[[str], str | None],
) -> dict[int, str]:
    """Name every module id by content; keep each module's hash with it."""
    names: dict[int, str] = {}
    hashes: dict[int, tuple[int, ...]] = {}
    last: int | None = None
    for code, ops, blob in records:
        if blob is not None:
            raise _Unsupported("blob in MODULE_STRTAB_BLOCK")
        if code == _MST_ENTRY:
            if not ops:
                raise _Unsupported("empty MODULE_STRTAB entry")
            modid = ops[0]
            if modid in names:
                raise _Unsupported(f"module id {modid} defined twice")
            try:
                path = bytes(ops[1:]).decode("utf-8", "surrogateescape")
            except ValueError:
                raise _Unsupported("module path is not a byte string") from None
            digest = module_digest(path)
            names[modid] = f"d:{digest}" if digest is not None else f"p:{path}"
            last = modid
        elif code == _MST_HASH:
            if last is None or last in hashes or len(ops) != 5:
                raise _Unsupported("MODULE_STRTAB hash without a module")
            hashes[last] = tuple(ops)
        else:
            raise _Unsupported(f"unknown MODULE_STRTAB record code {code}")
    if len(set(names.values())) != len(names):
        # Two paths with identical content (or a repeated path): which copy is
        # the job's own module would no longer be visible, so do not merge.
        raise _Unsupported("two module paths share one content digest")
    for modid, name in names.items():
        # The module hash is a content hash computed by the compiler, so it is
        # path-independent; keep it as extra protection against stale digests.
        parts.append(repr(("module", name, hashes.get(modid))))
    return names


def _summary(
    records: list[tuple[int, list[int], bytes | None]],
    modules: dict[int, str],
    parts: list[str],
) -> None:
    """Rewrite the summary block's records by GUID and module name."""
    version: int | None = None
    guids: dict[int, int] = {}
    for code, ops, blob in records:
        if blob is not None:
            raise _Unsupported(f"blob in summary record {code}")
        if code == _FS_VERSION:
            if version is not None or len(ops) != 1:
                raise _Unsupported("repeated or malformed summary VERSION")
            version = ops[0]
        elif code == _FS_VALUE_GUID:
            if len(ops) == 3:
                # LLVM 22 splits the GUID into two 32-bit halves, high first.
                value_guid = (ops[1] << 32) | ops[2]
            elif len(ops) == 2:
                value_guid = ops[1]
            else:
                raise _Unsupported("malformed VALUE_GUID record")
            if ops[0] in guids:
                raise _Unsupported(f"value id {ops[0]} mapped twice")
            guids[ops[0]] = value_guid
    if version is None:
        raise _Unsupported("summary block has no VERSION record")
    if version not in SUPPORTED_SUMMARY_VERSIONS:
        raise _Unsupported(f"unsupported summary version {version}")
    parts.append(repr(("summary-version", version)))
    # The set of GUIDs the shard declares, independent of their value ids.
    parts.append(repr(("guids", tuple(sorted(guids.values())))))

    def guid(valueid: int) -> int:
        try:
            return guids[valueid]
        except KeyError:
            raise _Unsupported(f"value id {valueid} has no VALUE_GUID") from None

    def module(modid: int) -> str:
        try:
            return modules[modid]
        except KeyError:
            raise _Unsupported(f"module id {modid} not in MODULE_STRTAB") from None

    groups: list[list[tuple[object, ...]]] = []
    pending: list[tuple[object, ...]] = []
    for code, ops, _ in records:
        if code in (_FS_VERSION, _FS_VALUE_GUID):
            continue
        if code in (_FS_FLAGS, _FS_BLOCK_COUNT):
            parts.append(repr(("summary-record", code, tuple(ops))))
        elif code in _FUNCTION_PREFIX_CODES:
            pending.append((code, tuple(ops)))
        elif code in (_FS_COMBINED_PROFILE, _FS_COMBINED):
            groups.append([*pending, _function(code, ops, guid, module)])
            pending = []
        elif code == _FS_COMBINED_GLOBALVAR_INIT_REFS:
            if len(ops) < 4:
                raise _Unsupported("short COMBINED_GLOBALVAR_INIT_REFS record")
            groups.append(
                [
                    *pending,
                    (
                        code,
                        guid(ops[0]),
                        module(ops[1]),
                        ops[2],
                        ops[3],
                        tuple([guid(v) for v in ops[4:]]),
                    ),
                ]
            )
            pending = []
        elif code == _FS_COMBINED_ALIAS:
            if len(ops) != 4:
                raise _Unsupported("malformed COMBINED_ALIAS record")
            groups.append([*pending, (code, guid(ops[0]), module(ops[1]), ops[2], guid(ops[3]))])
            pending = []
        elif code == _FS_COMBINED_ORIGINAL_NAME:
            # Applies to the summary record just before it.
            if not groups or pending:
                raise _Unsupported("COMBINED_ORIGINAL_NAME without a summary")
            groups[-1].append((code, tuple(ops)))
        else:
            raise _Unsupported(f"unsupported summary record code {code}")
    if pending:
        raise _Unsupported("type-test records without a following function summary")
    parts.extend([repr(("summary", tuple(g))) for g in groups])


def _function(
    code: int,
    ops: list[int],
    guid: Callable[[int], int],
    module: Callable[[int], str],
) -> tuple[object, ...]:
    """Canonical FS_COMBINED[_PROFILE]: refs and callees by GUID, order kept."""
    n = len(ops)
    if n < _FUNC_HEADER:
        raise _Unsupported("short function summary record")
    numrefs, rorefs, worefs = ops[6], ops[7], ops[8]
    calls_start = _FUNC_HEADER + numrefs
    if calls_start > n or rorefs + worefs > numrefs:
        raise _Unsupported("function summary ref counts do not fit the record")
    refs = tuple([guid(v) for v in ops[_FUNC_HEADER:calls_start]])
    tail = ops[calls_start:]
    if code == _FS_COMBINED_PROFILE:
        if len(tail) % 2:
            raise _Unsupported("odd callee list in COMBINED_PROFILE")
        calls: tuple[object, ...] = tuple(
            [(guid(tail[i]), tail[i + 1]) for i in range(0, len(tail), 2)]
        )
    else:
        calls = tuple([guid(v) for v in tail])
    return (
        code,
        guid(ops[0]),
        module(ops[1]),
        ops[2],  # flags: linkage, live, dso_local, import type, ...
        ops[3],  # instcount
        ops[4],  # function flags
        ops[5],  # entry count
        rorefs,
        worefs,
        refs,
        calls,
    )
