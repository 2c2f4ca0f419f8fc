"""The shard canonical digest, from the C extension when it is built.

``cached_dist.bitcode._shard`` (setup.py builds it from _shard.c at install time) produces
the very same canonical text as the pure-Python reference (:mod:`.shard`), and the same
digest, tens of times faster. The reference is used when the extension is missing (an install
without a C compiler: ``NATIVE`` is False, and ``--verbose`` and ``cached-dist stats`` say so)
and for the rare input the extension hands back (a value over 64 bits).
"""

from __future__ import annotations

import xxhash

from .tags import CANON_TAG, RAW_TAG

TYPE_CHECKING = False  # typing costs ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Callable

try:
    from . import _shard  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler: the reference decodes
    _shard = None

NATIVE: bool = _shard is not None
MISSING_NOTICE = (
    "the native shard decoder is not built (pure Python, slower); "
    "reinstall cached-dist where a C compiler and the Python headers are available"
)


def canonical_digest(
    data: bytes, module_digest: Callable[[str], str | None],
    own: frozenset[str] | None = None, known: dict[str, str] | None = None,
) -> tuple[str, bool, str]:  # fmt: skip
    """``(digest, exact, reason)`` exactly as ``shard.canonical_shard`` would give them.

    ``own`` and ``known`` spare the extension a call of ``module_digest`` for each path of
    ``own`` that the shard spells as is (~0.7 us each, some 25 a shard on a large link): it
    takes ``known[path]`` instead. The caller promises ``module_digest`` would say the same."""
    if _shard is not None:
        body = _shard.canonical_body(data, module_digest, own, known)
        if type(body) is bytes:
            return xxhash.xxh3_128_hexdigest(CANON_TAG + body), True, ""
        if body is not None:
            return xxhash.xxh3_128_hexdigest(RAW_TAG + data), False, str(body)
    from .shard import canonical_shard  # the reference: no extension, or handed back

    result = canonical_shard(data, module_digest)
    return result.digest, result.exact, result.reason
