"""The tags that keep canonical and raw shard digests apart (shared by both decoders).

Bump the canonical tag when the canonical encoding changes, so old cache keys stop matching.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from typing import Final

CANON_TAG: Final = b"cached-dist/shard-canonical/1\n"
RAW_TAG: Final = b"cached-dist/shard-raw/1\n"
