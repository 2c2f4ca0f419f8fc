"""Content-addressed blob files: publish by rename, verify every byte on the way out.

A blob is stored as it is (``blobs/ab/cdef...``) or, in a store that compresses, as one zstd
frame beside that name (``blobs/ab/cdef....zst``): both are named by the XXH3-128 digest of
the *uncompressed* bytes, and every byte placed from either is re-hashed after it is
decompressed. Readers take whichever form is there (the plain one first: hard links serve
it, and it needs no decompressing), so entries stored before compression, or by a store that
hard-links (which keeps its blobs plain: it links the stored file itself), stay readable
beside compressed ones. The native placer (store/_link.c, built with libzstd) places both
forms itself, by the same rules as copy_out and _decompress_out here, which place what it
hands back.
"""

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
#: The compressed form's suffix.
ZST = ".zst"
#: A hit refreshes the blob's mtime (its LRU clock) only when it is older than this, to spare
#: metadata writes on hot blobs.
TOUCH_AFTER = 60.0


class Outcome:
    """Result of copying a blob out of the store (plain constants: enum is not needed here)."""

    OK = "ok"
    MISSING = "missing"
    CORRUPT = "corrupt"


class _Planted(OSError):
    """A blob's place held by a symbolic link or a non-regular file: removed, and read as a
    damaged blob."""


class BlobInfo:
    """One blob file as seen by a directory scan."""

    __slots__ = ("digest", "mtime", "path", "size")

    def __init__(self, digest: str, path: str, size: int, mtime: float) -> None:
        self.digest = digest
        self.path = path
        self.size = size  # bytes on disk (compressed, for a .zst blob)
        self.mtime = mtime

    @property
    def compressed(self) -> bool:
        return self.path.endswith(ZST)


class Blobs:
    """Immutable files under blobs/ab/cdef..., named by the XXH3-128 digest of their content."""

    def __init__(self, root: str, modes: Modes, level: int = 0) -> None:
        self.dir = os.path.join(root, "blobs")
        self.tmp = os.path.join(root, "tmp")
        self._modes = modes
        #: zstd level new blobs are stored at; 0: plain (what a hard-linking store keeps).
        self.level = level
        self._spread = False  # tmp/ marked for spreading its subdirectories (stage)

    def path(self, digest: str) -> str:
        """Where the blob with this digest lives (two-level fan-out keeps directories small)."""
        return os.path.join(self.dir, digest[:2], digest[2:])

    def present(self, digest: str, size: int) -> bool:
        """Cheap existence check (no hashing): lets get() report an evicted blob as a miss."""
        try:
            return os.lstat(self.path(digest)).st_size == size  # a symbolic link: absent
        except OSError:
            pass
        try:
            os.stat(self.path(digest) + ZST)  # its size says nothing: placing checks the frame
        except OSError:
            return False
        return True

    def read_verified(self, digest: str, size: int) -> bytes | None:
        """The blob's bytes, from either form, verified; None if absent, damaged or of
        another size (a damaged one is removed)."""
        for path in (self.path(digest), self.path(digest) + ZST):
            try:
                with open(self._open(path), "rb") as f:
                    st = os.fstat(f.fileno())
                    data = f.read() if stat.S_ISREG(st.st_mode) else b""
            except OSError:
                continue
            plain = self._plain(path, data, size)
            if plain is not None and xxhash.xxh3_128_hexdigest(plain) == digest:
                return plain
            self._drop_corrupt(path, st)
        return None

    @staticmethod
    def _plain(path: str, data: bytes, size: int) -> bytes | None:
        if not path.endswith(ZST):
            return data if len(data) == size else None
        from . import zstd

        try:
            return zstd.decompress(data, size)
        except zstd.Error:
            return None

    def temp_file(self) -> TempFile:
        """A new temporary file in tmp/, as ``with blobs.temp_file() as (fd, path)``."""
        return TempFile(self.tmp, self._modes, "blob")

    def ingest(self, source: str) -> tuple[str, int, int]:
        """Copy `source` into the store; return (digest, size, bytes newly stored: 0 when
        the blob was there already, its compressed size when compressed).

        The bytes go to a temporary file in tmp/ first and are renamed into place, so a reader
        never sees a partial blob; a writer killed half-way leaves only a stray temporary file.
        """
        with self.temp_file() as (tmp_fd, tmp_path):
            hasher = xxhash.xxh3_128()
            size = 0
            chunks: list[bytes] = []
            # O_NONBLOCK and a size bound: a FIFO or device put in the source's place, or a
            # file still growing, must fail the put, never hang it or store half a file.
            src_fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with open(src_fd, "rb", buffering=0) as src:
                st = os.fstat(src_fd)
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(errno.EINVAL, "not a regular file", source)
                if not self.level and reflink(tmp_fd, src_fd):
                    # Hash what the store now holds, not the source: the clone is what we serve.
                    while chunk := os.read(tmp_fd, _CHUNK):
                        hasher.update(chunk)
                        size += len(chunk)
                else:
                    while size < st.st_size and (chunk := src.read(min(_CHUNK, st.st_size - size))):
                        hasher.update(chunk)
                        if self.level:
                            chunks.append(chunk)  # compressed whole, as one frame, below
                        else:
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
            stored = size
            if self.level:
                stored = self._write_compressed(tmp_fd, b"".join(chunks))
        digest = hasher.hexdigest()
        return digest, size, self._publish(tmp_path, digest, size, stored)

    def ingest_bytes(self, data: bytes, digest: str) -> tuple[int, int]:
        """Store ``data`` whose XXH3-128 ``digest`` the caller has just checked (an entry
        imported from another tier); return (size, bytes newly stored)."""
        with self.temp_file() as (tmp_fd, tmp_path):
            if self.level:
                stored = self._write_compressed(tmp_fd, data)
            else:
                write_all(tmp_fd, data)
                stored = len(data)
        return len(data), self._publish(tmp_path, digest, len(data), stored)

    def _write_compressed(self, fd: int, data: bytes) -> int:
        from . import zstd

        frame = zstd.compress(data, self.level)
        write_all(fd, frame)
        return len(frame)

    def _publish(self, tmp_path: str, digest: str, size: int, stored: int) -> int:
        """Rename a finished temporary blob into place (or drop it: already stored, in
        either form); the bytes newly stored."""
        final = self.path(digest) + (ZST if self.level else "")
        for path in (self.path(digest), self.path(digest) + ZST):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            except BaseException:
                unlink_quietly(tmp_path)
                raise
            if not stat.S_ISREG(st.st_mode):
                continue  # not what the store puts there: replaced by the rename below
            if st.st_size == size or (path.endswith(ZST) and st.st_size > 0):
                # Same content already stored: keep one copy, refresh its LRU clock.
                unlink_quietly(tmp_path)
                try:
                    os.utime(path, follow_symlinks=False)
                except OSError:
                    pass
                return 0
        rename_into(tmp_path, final, self._modes)
        return stored

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
            return self._decompress_out(digest, size, dest, stage)
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

    def _decompress_out(self, digest: str, size: int, dest: str, stage: str | None) -> str:
        """copy_out for a compressed blob: decompressed (its declared size checked first),
        every byte re-hashed, written to a fresh file renamed over `dest` (never a link: the
        stored file is not the output's bytes)."""
        path = self.path(digest) + ZST
        try:
            with open(self._open(path), "rb") as f:
                st = os.fstat(f.fileno())
                frame = f.read() if stat.S_ISREG(st.st_mode) else b""
        except FileNotFoundError:
            return Outcome.MISSING
        except _Planted:
            return Outcome.CORRUPT
        data = self._plain(path, frame, size)
        if data is None or xxhash.xxh3_128_hexdigest(data) != digest:
            self._drop_corrupt(path, st)
            return Outcome.CORRUPT
        directory = stage or os.path.dirname(dest) or "."
        tmp = temp_name(directory, os.path.basename(dest))
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            write_all(out, data)
        except BaseException:
            os.close(out)
            unlink_quietly(tmp)
            raise
        os.close(out)
        try:
            unlink_quietly(dest)  # as copy_out: no data flush forced by a rename over a file
            os.rename(tmp, dest)
        except BaseException:
            unlink_quietly(tmp)
            raise
        if time.time() - st.st_mtime > TOUCH_AFTER:
            try:
                os.utime(path)
            except OSError:
                pass
        return Outcome.OK

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

    def check(self, digest: str, path: str | None = None) -> bool | None:
        """Re-hash one blob (the form at ``path``, default the plain one): True if intact,
        False if corrupt (and removed), None if absent."""
        path = path or self.path(digest)
        if path.endswith(ZST):
            try:
                size = self._frame_size(path)
            except OSError:
                return None
            if size is not None and self.read_form(path, digest, size):
                return True
            try:
                self._drop_corrupt(path, os.stat(path))
            except OSError:
                return None
            return False
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
        """The blob at ``path`` opened for reading (_READ); a symbolic link or anything else
        but a regular file there (not what the store puts in blobs/: a directory, a FIFO) is
        removed and _Planted raised."""
        try:
            fd = os.open(path, _READ)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
        else:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
            from .repair import remove

            remove(path)
            raise _Planted(errno.EISDIR, "not a regular file in the place of a blob", path)
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

    @staticmethod
    def _frame_size(path: str) -> int | None:
        """The size a compressed blob's frame declares (None: not a frame that says)."""
        from . import zstd

        with open(Blobs._open(path), "rb") as f:
            head = f.read(18)  # a frame header is at most 18 bytes
        return zstd.declared_size(head)

    def read_form(self, path: str, digest: str, size: int) -> bool:
        """Whether the blob file at ``path`` holds ``size`` bytes hashing to ``digest``."""
        try:
            with open(self._open(path), "rb") as f:
                data = f.read() if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else b""
        except OSError:
            return False
        plain = self._plain(path, data, size)
        return plain is not None and xxhash.xxh3_128_hexdigest(plain) == digest

    def remove(self, digest: str, path: str | None = None) -> None:
        """Delete a blob (eviction): the form at ``path``, or both; readers that already
        opened it keep reading it."""
        if path is not None:
            unlink_in_place(path)
            return
        unlink_in_place(self.path(digest))
        unlink_in_place(self.path(digest) + ZST)

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
                name = entry.name
                if name.startswith(".") or not (
                    len(name) == 30 or (len(name) == 34 and name.endswith(ZST))
                ):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                yield BlobInfo(top.name + name[:30], entry.path, st.st_size, st.st_mtime)

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
