"""What marks a directory as a store: a cache directory tag, or (older stores) the index.

Maintenance (trim, verify, clear, statistics) must never turn a directory that is not a store
into one, nor delete another program's files in it: creating a store is a writer's job. A
store is tagged when its index database is first opened for writing, with a CACHEDIR.TAG
(https://bford.info/cachedir/, as ccache and cargo write: backup tools such as tar
--exclude-caches, borg and restic skip the directory). Stores made before the tag existed are
recognized by their index database, and tagged by their next writer.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .fsutil import Modes

#: Every directory the store creates under its root: a caller that writes files elsewhere
#: (a link's outputs) refuses paths inside these, so it can never overwrite the store's own.
LAYOUT = ("blobs", "claims", "index", "locks", "rows", "stats", "tmp")
TAG = "CACHEDIR.TAG"
#: The tag's first two lines: the specification's signature, then the line that says it is
#: this store's (other programs' tags name their own).
TAG_TEXT = (
    b"Signature: 8a477f597d28d172789f06886806bc55\n"
    b"# This file is a cache directory tag created by cached-dist's store.\n"
    b"# For information about cache directory tags, see https://bford.info/cachedir/\n"
)
_HEAD = TAG_TEXT.split(b"\n# For")[0]


def is_store(root: str) -> bool:
    """Whether ``root`` holds a store: its tag, or an index database (any kind of file: a
    damaged one is still the store's, for verify to repair)."""
    from .fsutil import read_nonblocking

    data = read_nonblocking(os.path.join(root, TAG), len(TAG_TEXT))
    if data is not None and data.startswith(_HEAD):
        return True
    return os.path.lexists(os.path.join(root, "index", "cache.db"))


def tag(root: str, modes: Modes) -> None:
    """Writes the tag if it is missing (best effort: the store works without it)."""
    path = os.path.join(root, TAG)
    if os.path.lexists(path):
        return
    from .fsutil import unlink_quietly, write_all

    try:
        fd = modes.create(path)
    except OSError:
        return  # another writer's, or no room: the next writer tries again
    try:
        write_all(fd, TAG_TEXT)
    except OSError:
        unlink_quietly(path)  # half a tag would only be read as none
    finally:
        os.close(fd)
