"""A module's ``source_filename``, read from its bitcode.

clang records the source path as it was given; ThinLTO derives local symbols' GUIDs and the
module hash from it, so a module compiled by absolute path gives other bitcode (and other
backend jobs and objects) in a checkout at another path. The record comes early in the
module block, after blocks that are stepped over by their length words: reading it costs
tens of microseconds, done only where that is nothing beside the work at hand (a compile).
"""

from __future__ import annotations

from .bitstream import END, ENTER, EOF, RECORD, BitcodeError, BitstreamCursor

MODULE_BLOCK_ID = 8
SOURCE_FILENAME = 16  # MODULE_CODE_SOURCE_FILENAME: [namechar x N]
# MODULE_CODE_GLOBALVAR, MODULE_CODE_FUNCTION: LLVM writes the source name before them.
_AFTER = (7, 8)


def source_filename(data: bytes) -> str | None:
    """The first module's source file name, or None (no such record, or not bitcode)."""
    try:
        cur = BitstreamCursor(data)
        while True:
            kind = cur.advance()
            if kind == EOF:
                return None
            in_module = cur.depth == 1 and cur.block_id == MODULE_BLOCK_ID
            if kind == ENTER and not in_module:
                cur.skip_block()  # the identification block, the module's type table, ...
            elif kind == END and cur.depth == 0 and cur.block_id == MODULE_BLOCK_ID:
                return None
            elif kind == RECORD and in_module:
                if cur.code == SOURCE_FILENAME:
                    return bytes(cur.ops).decode("utf-8", "replace")
                if cur.code in _AFTER:
                    return None
    except (BitcodeError, ValueError, IndexError):
        return None
