"""Content-addressed blob files: publish by rename, verify every byte on the way out."""

from __future__ import annotations

import errno
import os
import stat
import time

import xxhash

from .fsutil import (
    Modes,
    TempFile,
    open_dir,
    reflink,
    rename_into,
    spread_subdirectories,
    temp_name,
    unlink_in_place,
    unlink_quietly,
    write_all,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

_CHUNK = 4 << 20
#: How a blob is opened to be read: a symbolic link in its place is not followed (ELOOP) and
#: a FIFO does not block (it then fails the size check), so either is damage, not a wait.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: A hit refreshes the blob's mtime (its LRU clock) only when it is older than this, to spare
#: metadata writes on hot blobs.
TOUCH_AFTER = 60.0


class Outcome:
    """Result of copying a blob out of the store (plain constants: enum is not needed here)."""

    OK = "ok"
    MISSING = "missing"
    CORRUPT = "corrupt"


class _Planted(OSError):
    """A blob's place held by a symbolic link: removed, and read as a damaged blob."""


class BlobInfo:
    """One blob file as seen by a directory scan."""

    __slots__ = ("digest", "mtime", "path", "size")

    def __init__(self, digest: str, path: str, size: int, mtime: float) -> None:
        self.digest = digest
        self.path = path
        self.size = size
        self.mtime = mtime


class Blobs:
    """Immutable files under blobs/ab/cdef..., named by the XXH3-128 digest of their content."""

    def __init__(self, root: str, modes: Modes) -> None:
        self.dir = os.path.join(root, "blobs")
        self.tmp = os.path.join(root, "tmp")
        self._modes = modes
        self._spread = False  # tmp/ marked for spreading its subdirectories (stage)

    def path(self, digest: str) -> str:
        """Where the blob with this digest lives (two-level fan-out keeps directories small)."""
        return os.path.join(self.dir, digest[:2], digest[2:])

    def present(self, digest: str, size: int) -> bool:
        """Cheap existence check (no hashing): lets get() report an evicted blob as a miss."""
        try:
            return os.lstat(self.path(digest)).st_size == size  # a symbolic link: absent
        except OSError:
            return False

    def temp_file(self) -> TempFile:
        """A new temporary file in tmp/, as ``with blobs.temp_file() as (fd, path)``."""
        return TempFile(self.tmp, self._modes, "blob")

    def ingest(self, source: str) -> tuple[str, int, bool]:
        """Copy `source` into the store; return (digest, size, newly stored).

        The bytes go to a temporary file in tmp/ first and are renamed into place, so a reader
        never sees a partial blob; a writer killed half-way leaves only a stray temporary file.
        """
        with self.temp_file() as (tmp_fd, tmp_path):
            hasher = xxhash.xxh3_128()
            size = 0
            # O_NONBLOCK and a size bound: a FIFO or device put in the source's place, or a
            # file still growing, must fail the put, never hang it or store half a file.
            src_fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with open(src_fd, "rb", buffering=0) as src:
                st = os.fstat(src_fd)
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(errno.EINVAL, "not a regular file", source)
                if reflink(tmp_fd, src_fd):
                    # Hash what the store now holds, not the source: the clone is what we serve.
                    while chunk := os.read(tmp_fd, _CHUNK):
                        hasher.update(chunk)
                        size += len(chunk)
                else:
                    while size < st.st_size and (chunk := src.read(min(_CHUNK, st.st_size - size))):
                        hasher.update(chunk)
                        write_all(tmp_fd, chunk)
                        size += len(chunk)
                    if src.read(1):
                        raise OSError(errno.EBUSY, "changed while being stored", source)
                after = os.fstat(src_fd)
                if size != st.st_size or (after.st_size, after.st_mtime_ns) != (
                    st.st_size,
                    st.st_mtime_ns,
                ):
                    raise OSError(errno.EBUSY, "changed while being stored", source)
        return self._publish(tmp_path, hasher.hexdigest(), size)

    def ingest_bytes(self, data: bytes, digest: str) -> tuple[int, bool]:
        """Store ``data`` whose XXH3-128 ``digest`` the caller has just checked (an entry
        imported from another tier); return (size, newly stored)."""
        with self.temp_file() as (tmp_fd, tmp_path):
            write_all(tmp_fd, data)
        return self._publish(tmp_path, digest, len(data))[1:]

    def _publish(self, tmp_path: str, digest: str, size: int) -> tuple[str, int, bool]:
        """Rename a finished temporary blob into place (or drop it: already stored)."""
        final = self.path(digest)
        try:
            st = os.lstat(final)
            if stat.S_ISREG(st.st_mode) and st.st_size == size:
                # Same content already stored: keep one copy, refresh its LRU clock.
                unlink_quietly(tmp_path)
                try:
                    os.utime(final, follow_symlinks=False)
                except OSError:
                    pass
                return digest, size, False
        except FileNotFoundError:
            pass
        except BaseException:
            unlink_quietly(tmp_path)
            raise
        rename_into(tmp_path, final, self._modes)
        return digest, size, True

    def copy_out(
        self, digest: str, size: int, dest: str, link: bool = False, stage: str | None = None
    ) -> str:
        """Write the blob to `dest` atomically, reflinked when possible; verify every byte served.

        The destination is a fresh file renamed over `dest`, never a link to the store's file,
        so whoever later writes to the output cannot damage the store. It is made in `stage`
        when given (a directory on `dest`'s file system, see :meth:`stage`), else beside
        `dest`. With `link` (the store's opt-in ``hard_link``), `dest` becomes a hard link to
        the verified blob: no new inode, no bytes written; where the file system refuses the
        link, a copy as above.
        """
        path = self.path(digest)
        try:
            src = self._open(path)
        except FileNotFoundError:
            return Outcome.MISSING
        except _Planted:
            return Outcome.CORRUPT
        try:
            st = os.fstat(src)
            if st.st_size != size or not stat.S_ISREG(st.st_mode):
                self._drop_corrupt(path, st)
                return Outcome.CORRUPT
            if link:
                linked = self._link_out(src, path, st, digest, dest)
                if linked is not None:
                    return linked
            directory = stage or os.path.dirname(dest) or "."
            tmp = temp_name(directory, os.path.basename(dest))
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                hasher = xxhash.xxh3_128()
                cloned = reflink(out, src)
                # Exactly `size` bytes (fstat said so), in as few reads as that takes: one for
                # most objects, not one more to see the end of the file.
                left = size
                while left > 0 and (chunk := os.read(src, min(_CHUNK, left))):
                    hasher.update(chunk)
                    if not cloned:
                        write_all(out, chunk)
                    left -= len(chunk)
            except BaseException:
                os.close(out)
                unlink_quietly(tmp)
                raise
            os.close(out)
            if hasher.hexdigest() != digest:
                unlink_quietly(tmp)
                self._drop_corrupt(path, st)
                return Outcome.CORRUPT
            try:
                # Unlink first: on ext4 a rename over an existing file forces a data flush
                # (auto_da_alloc), ~1.5 ms per output. No reader sees a partial file either way.
                unlink_quietly(dest)
                os.rename(tmp, dest)
            except BaseException:
                unlink_quietly(tmp)
                raise
            _touch(src, st)
            return Outcome.OK
        finally:
            os.close(src)

    def stage(self) -> str | None:
        """A new, empty directory in tmp/ to make copies in before they are renamed to their
        outputs, or None if it cannot be made. Where a file system puts a new file depends on
        its directory: on ext4 without a journal (this project's build machines), a new file
        in a directory where many files were deleted in the last seconds is slow to create
        (the allocator passes over recently freed inodes), and LLD deletes the previous link's
        outputs, shards and archive members in the link's directory. tmp/ is marked as the top
        of a directory hierarchy (:func:`fsutil.spread_subdirectories`), so ext2/3/4 put each
        stage in a block group of their own choosing, as they do for directories at the file
        system's root: not where earlier links' outputs were made and deleted (without the
        mark, every stage sat beside tmp/ and was as slow as the link's directory).
        :meth:`unstage` removes the stage."""
        path = temp_name(self.tmp, "stage")
        try:
            try:
                os.mkdir(path, 0o700)
            except FileNotFoundError:
                self._modes.makedirs(self.tmp)
                os.mkdir(path, 0o700)
        except OSError:
            return None
        if not self._spread:
            self._spread = True
            spread_subdirectories(self.tmp)
        return path

    @staticmethod
    def unstage(path: str) -> None:
        """Removes a stage; one a failed placing left files in goes with the temp sweep."""
        try:
            os.rmdir(path)
        except OSError:
            pass

    def _link_out(
        self, src: int, path: str, st: os.stat_result, digest: str, dest: str
    ) -> str | None:
        """Serve the open blob `src` by a hard link at `dest`, after hashing every byte; None
        when the link cannot be made (another file system, a link limit, protected_hardlinks),
        with `src` rewound for a copy."""
        if _hash_fd(src) != digest:
            self._drop_corrupt(path, st)
            return Outcome.CORRUPT
        try:
            try:
                os.link(path, dest)
            except FileExistsError:  # rare: LLD names a fresh path for every output
                unlink_quietly(dest)
                os.link(path, dest)
        except OSError:
            os.lseek(src, 0, os.SEEK_SET)
            return None
        _touch(src, st)
        return Outcome.OK

    def read(self, digest: str) -> bytes:
        """A blob's bytes, unchecked (the caller checks them against the digest); OSError if
        it is missing or not a blob (a symbolic link, a FIFO)."""
        fd = self._open(self.path(digest))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", self.path(digest))
            chunks = []
            while chunk := os.read(fd, _CHUNK):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def check(self, digest: str) -> bool | None:
        """Re-hash one blob: True if intact, False if corrupt (and removed), None if absent."""
        path = self.path(digest)
        try:
            src = self._open(path)
        except FileNotFoundError:
            return None
        except _Planted:
            return False
        try:
            st = os.fstat(src)
            if stat.S_ISREG(st.st_mode) and _hash_fd(src) == digest:
                return True
            self._drop_corrupt(path, st)
            return False
        finally:
            os.close(src)

    @staticmethod
    def _open(path: str) -> int:
        """The blob at ``path`` opened for reading (_READ); a symbolic link there (not what
        the store puts in blobs/) is removed and _Planted raised."""
        try:
            return os.open(path, _READ)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
        try:
            Blobs._drop_corrupt(path, os.lstat(path))
        except OSError:
            pass
        raise _Planted(errno.ELOOP, "a symbolic link in the place of a blob", path)

    @staticmethod
    def _drop_corrupt(path: str, seen: os.stat_result) -> None:
        """Remove a damaged blob, unless a writer has meanwhile renamed a good copy over it."""
        try:
            if os.lstat(path).st_ino == seen.st_ino:
                unlink_in_place(path)
        except OSError:
            pass

    def remove(self, digest: str) -> None:
        """Delete a blob (eviction); readers that already opened it keep reading it."""
        unlink_in_place(self.path(digest))

    def scan(self) -> Iterator[BlobInfo]:
        """Every blob file with its size and mtime (the LRU clock)."""
        try:
            tops = list(os.scandir(self.dir))
        except FileNotFoundError:
            return
        for top in tops:
            if len(top.name) != 2 or not top.is_dir(follow_symlinks=False):
                continue
            try:
                entries = list(os.scandir(top.path))
            except FileNotFoundError:
                continue
            for entry in entries:
                if len(entry.name) != 30 or entry.name.startswith("."):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                yield BlobInfo(top.name + entry.name, entry.path, st.st_size, st.st_mtime)

    def sweep_temp(self, older_than: float) -> int:
        """Remove temporary files left by killed writers; return bytes freed."""
        freed = 0
        now = time.time()
        try:
            entries = list(os.scandir(self.tmp))
        except FileNotFoundError:
            return 0
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
                if now - st.st_mtime <= older_than:
                    continue
                if entry.is_dir(follow_symlinks=False):  # a stage a killed link left
                    freed += self._sweep_stage(entry.path)
                else:
                    os.unlink(entry.path)
                    freed += st.st_size
            except OSError:
                continue
        return freed

    @staticmethod
    def _sweep_stage(path: str) -> int:
        freed = 0
        fd = open_dir(path)  # never what a symbolic link put in its place leads to
        try:
            for entry in os.scandir(fd):
                try:
                    size = entry.stat(follow_symlinks=False).st_size
                    os.unlink(entry.name, dir_fd=fd)
                    freed += size
                except OSError:
                    continue
        finally:
            os.close(fd)
        os.rmdir(path)
        return freed


def _hash_fd(fd: int) -> str:
    """XXH3-128 of everything left to read from `fd`."""
    hasher = xxhash.xxh3_128()
    while chunk := os.read(fd, _CHUNK):
        hasher.update(chunk)
    return hasher.hexdigest()


def _touch(src: int, st: os.stat_result) -> None:
    """Refresh a served blob's LRU clock, unless it was refreshed lately."""
    if time.time() - st.st_mtime > TOUCH_AFTER:
        # A read-only cache still serves hits; it just cannot age them.
        try:
            os.utime(src)
        except OSError:
            pass
