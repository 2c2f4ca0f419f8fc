"""A link's manifests in one file, so that the next link of the same target reads them at once.

A fully cached link looks up one index row per job: a row file opened, read, checked and its
JSON decoded, ~13 us a job (~4 ms of a 301-job link). Links of one target mostly ask for the
keys its last link asked for, so the manifests that link placed are kept together as one
more row (Index.set_pack, marshalled) under a name the caller gives every link of that
target, and the next link takes from it every key it holds (Store.lookup): one file, one
``marshal.loads`` (~0.3 ms for 301 manifests).

A pack is only a copy of rows: an entry's row never changes meaning (its key names all its
outputs depend on), and every byte placed from a blob is re-hashed, so a pack that outlived
its rows costs a miss at worst, and the link then writes a new one (Store.keep_pack). Packs
live as row files only, never in the database: maintenance passes (which remove the files
of rows the database lacks) and ``cached-dist clear`` remove them, and the next link of the
target writes its pack again. Each manifest in a pack names its key, as a row's does: one
filed under another key answers nothing (its key is then read from its row).
"""

from __future__ import annotations

import marshal

from .manifest import Manifest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

#: Version of the pack encoding, part of the row's key: another version is another pack.
#: 2: each manifest names its key, as a row's does (store/manifest.py).
FORMAT = 2


def encode(manifests: Sequence[Manifest]) -> bytes:
    """The bytes of a pack holding ``manifests`` (their metadata is JSON, so marshal takes it):
    key -> (key, outputs, meta), the key named again as a row names it."""
    return marshal.dumps({m.key: (m.key, tuple((role, digest, size) for role, (digest, size)
                                               in m.outputs.items()), m.meta)
                          for m in manifests})  # fmt: skip


def decode(data: bytes) -> dict[str, Any]:
    """Key -> the raw manifest :func:`manifest` takes; {} for bytes that are not a pack (the
    row's digest already failed damage, so that is another version's or a stranger's)."""
    try:
        raw = marshal.loads(data)
    except Exception:  # EOFError, ValueError, TypeError: whatever marshal says of it
        return {}
    return raw if type(raw) is dict else {}


def manifest(key: str, raw: Any) -> Manifest | None:
    """The manifest of ``key`` in a decoded pack; None unless it is one, of this key, checked
    as a row is (Manifest.of_parts)."""
    try:
        named, outs, meta = raw
        return Manifest.of_parts(key, outs, meta) if named == key else None
    except (TypeError, ValueError):
        return None


def row_name(name: str) -> str:
    """What pack ``name`` is called in the index (Index.get_pack): its encoding's version
    is part of it, so a pack of another version is another row."""
    return f"{FORMAT}:{name}"
