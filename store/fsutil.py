"""File-system helpers: permission modes, atomic temporary names, and reflink copies."""

from __future__ import annotations

import errno
import os
import stat
import sys

#: ioctl request of Linux FICLONE (_IOW(0x94, 9, int)): share extents instead of copying bytes.
FICLONE = 0x40049409

#: Errors meaning "this file system cannot clone these files", after which a plain copy is right.
_NO_REFLINK = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EPERM}
)
_reflink_ok = True


class Modes:
    """Modes for directories and files the store creates: owner-only, or shared with the group."""

    def __init__(self, group_shared: bool) -> None:
        self.group_shared = group_shared
        # setgid keeps the group of the cache on everything created inside it.
        self.dir = 0o2770 if group_shared else 0o700
        self.file = 0o660 if group_shared else 0o600

    def makedirs(self, path: str) -> None:
        """Create `path` and missing parents with the store's directory mode, despite the umask."""
        try:
            os.mkdir(path, self.dir)
        except FileExistsError:
            return
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if not parent or parent == path:
                raise
            self.makedirs(parent)
            try:
                os.mkdir(path, self.dir)
            except FileExistsError:
                return
        if self.group_shared:
            os.chmod(path, self.dir)  # mkdir filters the mode through the umask

    def fix_file(self, fd: int) -> None:
        """Apply the file mode exactly, since the umask may have removed group bits."""
        if self.group_shared:
            os.fchmod(fd, self.file)

    def fix_path(self, path: str) -> None:
        """Give files a library created (the sqlite databases) the store's file mode."""
        # Not fatal: on a read-only or foreign-owned cache the mode is someone else's choice.
        try:
            if stat.S_IMODE(os.stat(path).st_mode) != self.file:
                os.chmod(path, self.file)
        except OSError:
            pass


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
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                          self.modes.file)  # fmt: skip

    def __enter__(self) -> tuple[int, str]:
        try:
            self._open()
        except FileNotFoundError:
            self.modes.makedirs(self.directory)
            self._open()
        return self.fd, self.path

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        try:
            if kind is None:
                self.modes.fix_file(self.fd)
        except BaseException:
            os.close(self.fd)
            unlink_quietly(self.path)
            raise
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
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
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
#: O_NONBLOCK: a FIFO put where a small file belongs reads as empty or fails, never blocks.
_READ_NONBLOCKING = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def read_nonblocking(path: str, limit: int | None = None) -> bytes | None:
    """A small file's bytes (at most ``limit``), None if unreadable. Opened non-blocking and
    read raw: a FIFO, even one a writer holds open (where a buffered read returns None and
    os.read fails with EAGAIN), reads as empty or None, never as a wait."""
    try:
        fd = os.open(path, _READ_NONBLOCKING)
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


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write may write less than asked; loop until all of `data` is out."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def rename_into(tmp: str, final: str, modes: Modes) -> None:
    """Renames a finished temporary file to ``final``, making its directory if needed; on
    failure the temporary file is removed and the error raised."""
    try:
        try:
            os.rename(tmp, final)
        except FileNotFoundError:
            modes.makedirs(os.path.dirname(final))
            os.rename(tmp, final)
    except BaseException:
        unlink_quietly(tmp)
        raise


def unlink_quietly(path: str) -> None:
    """Remove a file that may already be gone."""
    try:
        os.unlink(path)
    except OSError:
        pass


def proc_stat(pid: int) -> list[bytes]:
    """The fields of /proc/PID/stat after the process's name (state, parent, ...: field 3
    on is [0] on), which may hold anything, even parentheses and spaces, so they are read
    after the last one. OSError if the process cannot be read (gone, say)."""
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while chunk := os.read(fd, 4096):
            parts.append(chunk)
    finally:
        os.close(fd)
    return b"".join(parts).rpartition(b")")[2].split()
