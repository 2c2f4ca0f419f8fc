"""Content digests of files, memoized by (device, inode, size, mtime) for the whole link.

A module imported by twenty jobs is read and hashed once. The digest is XXH3-128 of the
bytes, the same function the store uses for blobs. An archive member the linker names but
does not write is read from the archive, so a hit never needs it on disk.

Reads are bounded by the size the file had when it was examined: a FIFO or a device is never
opened for a blocking read, and a file that changes while it is read is an error (the job is
then compiled and not cached) rather than an endless read or a key for bytes nobody compiled.
"""

from __future__ import annotations

import itertools
import os
import stat

import xxhash

TYPE_CHECKING = False  # collections.abc imports collections: ~1.5 ms of a full hit
if TYPE_CHECKING:
    from collections.abc import Iterable

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_NOATIME = getattr(os, "O_NOATIME", 0)

try:  # the same reads and checks in one call (_read.c): ~2.5 us less a file, 600 a large link
    from . import _read
except ImportError:  # built without a C compiler
    _read = None  # type: ignore[assignment]
read_exact = _read.read_exact if _read is not None else None


def digest_bytes(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def read_regular(path: str, seen: os.stat_result | None = None) -> bytes:
    """The bytes of the regular file ``path``: exactly its size when examined (``seen``, or
    a fresh stat), else OSError. Never blocks on a FIFO and never reads a device."""
    if seen is None:
        seen = os.stat(path)
    if not stat.S_ISREG(seen.st_mode):
        raise OSError(f"{path} is not a regular file")
    if read_exact is not None:
        return read_exact(path, seen.st_dev, seen.st_ino, seen.st_size, seen.st_mtime_ns)
    return _read_regular(path, seen)


def _read_regular(path: str, seen: os.stat_result) -> bytes:
    """:func:`read_regular` in Python, as ``read_exact`` does it (the reference)."""
    # O_NONBLOCK: should a FIFO have been put in its place since, opening it must not wait.
    # O_NOATIME: LLD has just written the file, and the first read of a new file would
    # otherwise update its access time, a journalled inode write per input (allowed on the
    # user's own files only: others are opened without it).
    try:
        fd = os.open(path, _READ_FLAGS | _NOATIME)
    except PermissionError:
        fd = os.open(path, _READ_FLAGS)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino) or not stat.S_ISREG(now.st_mode):
            raise OSError(f"{path} was replaced while being read")
        # One byte more than examined tells a file that grew; no read to see the end once
        # all of it is in, as the fstat below tells a file that changed since.
        size, got, parts = seen.st_size, 0, []
        while part := os.read(fd, size + 1 - got):
            parts.append(part)
            got += len(part)
            if got >= size:
                break
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if len(data) != seen.st_size or (after.st_size, after.st_mtime_ns) != (
        seen.st_size,
        seen.st_mtime_ns,
    ):
        raise OSError(f"{path} changed while being read")
    return data


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """What tells one version of a file from another, for the memo and the early worker."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read_new(path: str) -> tuple[bytes, tuple[int, int, int, int]]:
    """A file nobody examined yet, examined now (stat) and read: its bytes and identity."""
    st = os.stat(path)
    return read_regular(path, st), _identity(st)


read_new = _read.read_new if _read is not None else _read_new  # _read.c: the same, in C


class Digests:
    def __init__(self, examined: dict[str, os.stat_result] | None = None) -> None:
        # Inputs the job-file checks examined: read against that stat (a file replaced since
        # is an error, and its job compiled), not stat-ed again.
        self._examined = examined or {}
        self._memo: dict[tuple[int, int, int, int], str] = {}
        self._by_path: dict[str, str] = {}  # inputs do not change while LLD waits on us
        self._is_file: dict[str, bool] = {}
        #: (device, inode, size, mtime) of each file read, as read: what a worker that read
        #: them before the job-file checks sends back, for examined_as() there.
        self.identities: dict[str, tuple[int, int, int, int]] = {}

    def examined_as(self, path: str, identity: tuple[object, ...]) -> bool:
        """Whether the job-file checks found ``path`` with this identity."""
        st = self._examined.get(path)
        return st is not None and _identity(st) == identity

    def is_file(self, path: str) -> bool:
        """``os.path.isfile``, once per path per link: every job repeats the shared options."""
        found = self._is_file.get(path)
        if found is None:
            found = self._is_file[path] = os.path.isfile(path)
        return found

    @property
    def known(self) -> dict[str, str]:
        """Path -> digest of every input worked out so far (not to be changed)."""
        return self._by_path

    def mark(self) -> int:
        """A point in what is known, for :meth:`since`."""
        return len(self._by_path)

    def since(self, mark: int) -> list[tuple[str, str]]:
        """(path, digest) worked out since ``mark``: what a forked worker tells its parent."""
        return list(itertools.islice(self._by_path.items(), mark, None))

    def learn(self, items: Iterable[tuple[str, str]]) -> None:
        """Takes in what a worker sent from :meth:`since`."""
        for path, digest in items:
            self._by_path.setdefault(path, digest)

    def read(self, path: str) -> bytes:
        """The bytes of the input ``path`` (:func:`read_regular`, against the stat the
        job-file checks took of it, if they did)."""
        seen = self._examined.get(path)
        if seen is None:  # not examined (an early worker's reads)
            data, self.identities[path] = read_new(path)
            return data
        data = read_regular(path, seen)
        self.identities[path] = _identity(seen)
        return data

    def of_each(self, paths: tuple[str, ...]) -> list[str]:
        """:meth:`of` each path, in order: a job's imports, mostly worked out already."""
        known = self._by_path
        return [known.get(p) or self.of(p) for p in paths]

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
        st = self._examined.get(path)
        if st is None:  # read at once: another name for the same file is rare
            data, identity = read_new(path)
            found = digest_bytes(data)
        else:
            identity = _identity(st)
            memo = self._memo.get(identity)
            found = digest_bytes(read_regular(path, st)) if memo is None else memo
        self._memo[identity] = found
        self._by_path[path] = found
        self.identities[path] = identity
        return found
