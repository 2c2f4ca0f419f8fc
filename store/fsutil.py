"""File-system helpers: permission modes, atomic temporary names, and reflink copies."""

from __future__ import annotations

import errno
import os
import stat
import sys

from procs import write_all as write_all  # store modules write files with it too

#: ioctl request of Linux FICLONE (_IOW(0x94, 9, int)): share extents instead of copying bytes.
FICLONE = 0x40049409

#: Errors meaning "this file system cannot clone these files", after which a plain copy is right.
_NO_REFLINK = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EPERM}
)
_reflink_ok = True


class Modes:
    """Modes for directories and files the store creates: owner-only, or shared with the group.

    Every member of a group-shared cache creates files in it, and only a file's owner may
    change its mode: so each is created in its mode, with the umask letting the group's bits
    through (:meth:`umask`), never changed afterwards (another member could not use it in
    between, and could not change it at all).
    """

    def __init__(self, group_shared: bool) -> None:
        self.group_shared = group_shared
        # setgid keeps the group of the cache on everything created inside it.
        self.dir = 0o2770 if group_shared else 0o700
        self.file = 0o660 if group_shared else 0o600

    def umask(self) -> Umask:
        """``with modes.umask():`` around what creates files of the store: a group-shared
        store's are then made in the group's mode whatever the user's umask."""
        return Umask(self.group_shared)

    def makedirs(self, path: str) -> None:
        """Create `path` and missing parents with the store's directory mode, despite the umask."""
        try:
            self._mkdir(path)
        except FileExistsError:
            return
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if not parent or parent == path:
                raise
            self.makedirs(parent)
            try:
                self._mkdir(path)
            except FileExistsError:
                return

    def _mkdir(self, path: str) -> None:
        with self.umask():
            os.mkdir(path, self.dir)
        if not self.group_shared:
            return
        # Linux's mkdir takes setgid from a setgid parent only (a cache directory made as the
        # guide says is one): else it is set here, on the directory just made, not on what
        # may have been put in its place meanwhile.
        fd = open_dir(path)
        try:
            st = os.fstat(fd)
            if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != self.dir:
                os.fchmod(fd, self.dir)
        finally:
            os.close(fd)

    def create(self, path: str, flags: int = os.O_WRONLY, dir_fd: int | None = None) -> int:
        """A new file at `path` (in ``dir_fd``), opened with `flags`, in the store's file mode
        whatever the umask; FileExistsError if anything (a symbolic link too) is there."""
        with self.umask():
            return os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                           self.file, dir_fd=dir_fd)  # fmt: skip

    def create_empty(self, path: str) -> bool:
        """Creates an empty file at `path` as :meth:`create` does (a database, before sqlite
        opens it); False when one is there already, which must then be a regular file
        (:func:`own_file`)."""
        try:
            os.close(self.create(path))
        except FileExistsError:
            own_file(path)
            return False
        return True


class Umask:
    """The umask of a group-shared store's creations: 007, so that the group keeps the bits
    the store's modes give it (no mode of the store gives others any). sqlite creates a
    database's -wal and -shm files itself, in the database's mode filtered by the umask and
    then corrected, so another member may find them unreadable in between: the store opens
    every database, and runs its first statement (which creates them), inside one. The umask
    is the process's: threads that create files meanwhile get the group's bits too (none of
    a link's does). (A class: contextlib costs a cached link an import.)"""

    __slots__ = ("old", "on")

    def __init__(self, on: bool) -> None:
        self.on = on
        self.old = 0

    def __enter__(self) -> None:
        if self.on:
            self.old = os.umask(0o007)

    def __exit__(self, *exc: object) -> None:
        if self.on:
            os.umask(self.old)


#: How the store opens a directory of its own: never through a symbolic link.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def not_ours(path: str, what: str = "directory") -> OSError:
    """The error for a path inside the cache that is not what the store made there (a
    symbolic link, or a file where a directory belongs): never followed, never written."""
    return OSError(errno.ELOOP, f"not a {what} of the cache's own (a symbolic link?)", path)


def open_dir(path: str, dir_fd: int | None = None) -> int:
    """``path`` opened as a directory, without following a symbolic link: what is written or
    removed in it then stays inside the cache even if a link is put there later. OSError
    (ELOOP) for a symbolic link or anything but a directory; FileNotFoundError if absent."""
    try:
        return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise not_ours(path) from None
        raise


def own_file(path: str) -> None:
    """OSError unless ``path`` is a regular file or absent: a database the store opens by
    name (sqlite follows symbolic links) must not lead outside the cache."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise not_ours(path, "file")


def temp_name(directory: str, base: str) -> str:
    """A name unique across processes and hosts, in `directory`, so the final rename is atomic."""
    return os.path.join(directory, f".{base}.{os.getpid()}.{os.urandom(6).hex()}.tmp")


class TempFile:
    """A new temporary file in ``directory`` (made if a clear or a fresh store removed it), in
    the store's file mode, closed on the way out and removed if the block fails: a failed
    write leaves nothing behind. ``with TempFile(...) as (fd, path)``; the caller renames it.
    (A class: contextlib costs a cached link an import it has no other use for.)"""

    def __init__(self, directory: str, modes: Modes, base: str) -> None:
        self.directory = directory
        self.modes = modes
        self.base = base
        self.fd = -1
        self.path = ""

    def _open(self) -> None:
        self.path = temp_name(self.directory, self.base)
        self.fd = self.modes.create(self.path, os.O_RDWR)

    def __enter__(self) -> tuple[int, str]:
        try:
            self._open()
        except FileNotFoundError:
            self.modes.makedirs(self.directory)
            self._open()
        return self.fd, self.path

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        os.close(self.fd)
        if kind is not None:
            unlink_quietly(self.path)


def reflink(dst_fd: int, src_fd: int) -> bool:
    """Clone `src_fd` into `dst_fd` when the file system can; False means copy instead."""
    global _reflink_ok
    if not _reflink_ok:
        return False
    import fcntl

    try:
        fcntl.ioctl(dst_fd, FICLONE, src_fd)
    except OSError as error:
        if error.errno in (errno.EOPNOTSUPP, errno.ENOTTY, errno.ENOSYS):
            _reflink_ok = False  # this kernel or file system never clones: stop asking
        if error.errno in _NO_REFLINK:
            return False
        raise
    return True


#: FS_TOPDIR_FL (chattr +T): ext2/3/4 spread this directory's subdirectories over the disk
#: (the Orlov allocator's treatment of top-level directories) instead of keeping them near it.
_TOPDIR_FL = 0x00020000


def spread_subdirectories(path: str) -> bool:
    """Marks the directory ``path`` FS_TOPDIR_FL, so that ext2/3/4 place each new
    subdirectory (and the files later made in it) in a block group of its own choosing;
    False where the file system or the permissions do not allow it (nothing else changes)."""
    import fcntl  # (struct would tell sizeof(long), for ~0.3 ms more of a copying link)

    # The ioctl numbers encode sizeof(long), the size of a pointer on Linux (LP64 or ILP32).
    long_size = (sys.maxsize.bit_length() + 1) // 8
    get_flags = (2 << 30) | (long_size << 16) | (ord("f") << 8) | 1  # FS_IOC_GETFLAGS
    set_flags = (1 << 30) | (long_size << 16) | (ord("f") << 8) | 2  # FS_IOC_SETFLAGS
    try:
        fd = open_dir(path)
    except OSError:
        return False
    try:
        buf = bytearray(4)
        fcntl.ioctl(fd, get_flags, buf, True)
        flags = int.from_bytes(buf, sys.byteorder)
        if not flags & _TOPDIR_FL:
            fcntl.ioctl(fd, set_flags, (flags | _TOPDIR_FL).to_bytes(4, sys.byteorder))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


_CHUNK = 1 << 16
#: O_NONBLOCK: a FIFO put where a small file belongs reads as empty or fails, never blocks;
#: O_NOFOLLOW: a symbolic link put there reads as absent, not as the file it names.
_READ_NONBLOCKING = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def read_nonblocking(
    path: str, limit: int | None = None, dir_fd: int | None = None
) -> bytes | None:
    """A small file's bytes (at most ``limit``), None if unreadable. Opened non-blocking and
    read raw: a FIFO, even one a writer holds open (where a buffered read returns None and
    os.read fails with EAGAIN), reads as empty or None, never as a wait."""
    try:
        fd = os.open(path, _READ_NONBLOCKING, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        chunks = [os.read(fd, _CHUNK)]
        size = len(chunks[0])
        if size == _CHUNK:  # a long one (an entry with a compiler's messages)
            while limit is None or size < limit:
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data if limit is None else data[:limit]


def rename_into(tmp: str, final: str, modes: Modes) -> None:
    """Renames a finished temporary file to ``final``, making its directory if needed; on
    failure the temporary file is removed and the error raised. The directory is opened
    without following a symbolic link (:func:`open_dir`): a link put in its place in the
    cache is refused, never written through."""
    directory, name = os.path.split(final)
    try:
        try:
            fd = open_dir(directory)
        except FileNotFoundError:
            modes.makedirs(directory)
            fd = open_dir(directory)
        try:
            os.rename(tmp, name, dst_dir_fd=fd)
        finally:
            os.close(fd)
    except BaseException:
        unlink_quietly(tmp)
        raise


def unlink_in_place(path: str) -> None:
    """Removes the file ``path`` (one that may already be gone) from its directory opened as
    :func:`open_dir` does: never from where a symbolic link in its place leads."""
    directory, name = os.path.split(path)
    try:
        fd = open_dir(directory)
    except OSError:
        return
    try:
        os.unlink(name, dir_fd=fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def unlink_quietly(path: str, dir_fd: int | None = None) -> None:
    """Remove a file that may already be gone."""
    try:
        os.unlink(path, dir_fd=dir_fd)
    except OSError:
        pass
