"""Content digests of files, memoized by (device, inode, size, mtime) for the whole link.

A module imported by twenty jobs is read and hashed once. The digest is XXH3-128 of the
bytes, the same function the store uses for blobs. An archive member the linker names but
does not write is read from the archive, so a hit never needs it on disk.
"""

import os

import xxhash


def digest_bytes(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


class Digests:
    def __init__(self) -> None:
        self._memo: dict[tuple[int, int, int, int], str] = {}
        self._by_path: dict[str, str] = {}  # inputs do not change while LLD waits on us

    def of(self, path: str) -> str:
        """The digest of ``path``'s content; OSError if it cannot be read."""
        known = self._by_path.get(path)
        if known is not None:
            return known
        if path.endswith(")"):  # LLD 21's ARCHIVE(MEMBER at OFFSET): the archive's bytes
            from ..jobfile.members import named_member

            member = named_member(path)
            if member is not None:
                digest = self._by_path[path] = digest_bytes(member.read())
                return digest
        st = os.stat(path)
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        found = self._memo.get(identity)
        if found is None:
            with open(path, "rb") as f:
                found = digest_bytes(f.read())
            self._memo[identity] = found
        self._by_path[path] = found
        return found
