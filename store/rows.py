"""The index's rows as small files, so that a fully cached link reads them without sqlite.

A link that only hits reads one entry per job and a few memos. Through the index database
that costs importing sqlite (``_sqlite3`` pulls in functools and collections), opening the
database and querying it: ~5 ms of a small link's ~25 ms. Reading a file costs ~5 us.

The diskcache index stays the authority for what is written and for maintenance (culling,
iteration, counts): every row given to it is also written here (a temporary file renamed
into place, so a reader sees a whole row or none), every row it drops is removed here, and
the eviction pass removes the files of rows it no longer has. A row found here that the
index culled meanwhile is still right: rows never change once written (an entry's key names
everything its outputs depend on, a memo's value is a function of its key), and every byte
served from a blob is re-hashed anyway. A file that does not hold the row asked for (damaged,
or the name of another key) reads as absent.

A file is ``<XXH3-64 of the rest, 16 hex digits>\\n<length of the key in bytes>\\n<key><value>``,
named by the XXH3-128 of the key: one damaged or cut short reads as absent, and the database
answers instead.
"""

from __future__ import annotations

import os

import xxhash

from .fsutil import (
    TempFile,
    open_dir,
    read_nonblocking,
    rename_into,
    unlink_in_place,
    write_all,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from .fsutil import Modes

_ENCODING = "utf-8"
_ERRORS = "surrogatepass"  # any str a key or value can be round-trips


def _header(full_key: str) -> bytes:
    key = full_key.encode(_ENCODING, _ERRORS)
    return b"%d\n" % len(key) + key


def _encoded(full_key: str, value: str) -> bytes:
    return _framed(full_key, value.encode(_ENCODING, _ERRORS))


def _framed(full_key: str, value: bytes) -> bytes:
    body = _header(full_key) + value
    return b"%016x\n" % xxhash.xxh3_64_intdigest(body) + body


def _checked(data: bytes) -> bytes | None:
    """The row (key header and value) in a file's bytes, None if they fail their digest."""
    if len(data) < 17 or data[16:17] != b"\n":
        return None
    body = data[17:]
    return body if b"%016x" % xxhash.xxh3_64_intdigest(body) == data[:16] else None


class Rows:
    """Row files under ``rows/ab/cdef...``; OSError from writes goes to the caller."""

    def __init__(self, root: str, modes: Modes) -> None:
        self.dir = os.path.join(root, "rows")
        self.tmp = os.path.join(root, "tmp")
        self._modes = modes

    def path(self, full_key: str) -> str:
        name = xxhash.xxh3_128_hexdigest(full_key.encode(_ENCODING, _ERRORS))
        return os.path.join(self.dir, name[:2], name[2:])

    def get(self, full_key: str) -> str | None:
        """The row's value, or None when there is no file or it holds something else."""
        value = self.get_bytes(full_key)
        if value is None:
            return None
        try:
            return value.decode(_ENCODING, _ERRORS)
        except UnicodeDecodeError:
            return None

    def get_bytes(self, full_key: str) -> bytes | None:
        """:meth:`get` for a row put with :meth:`put_bytes`: its value as it was given."""
        data = read_nonblocking(self.path(full_key))
        if data is None:
            return None
        body = _checked(data)
        header = _header(full_key)
        if body is None or not body.startswith(header):
            return None
        return body[len(header) :]

    def get_many(self, full_keys: Sequence[str]) -> dict[str, str]:
        """The rows found, by key."""
        found: dict[str, str] = {}
        for full_key in full_keys:
            value = self.get(full_key)
            if value is not None:
                found[full_key] = value
        return found

    def put(self, full_key: str, value: str) -> None:
        self._write(full_key, _encoded(full_key, value))

    def put_bytes(self, full_key: str, value: bytes) -> None:
        """A row whose value is bytes (read back with :meth:`get_bytes`)."""
        self._write(full_key, _framed(full_key, value))

    def _write(self, full_key: str, data: bytes) -> None:
        final = self.path(full_key)
        with TempFile(self.tmp, self._modes, "row") as (fd, tmp):
            write_all(fd, data)
        rename_into(tmp, final, self._modes)

    def put_many(self, items: Iterable[tuple[str, str]]) -> None:
        for full_key, value in items:
            self.put(full_key, value)

    def drop(self, full_key: str) -> None:
        unlink_in_place(self.path(full_key))

    def discard(self, full_key: str, value: str) -> None:
        """Removes the row's file only if it holds exactly ``value`` (what this process put
        there): a file another process put since is its to keep or take back. Between the
        check and the unlink another's file may be lost; its row is then read from the
        database once, never served stale."""
        path = self.path(full_key)
        if read_nonblocking(path) == _encoded(full_key, value):
            unlink_in_place(path)

    def files(self) -> Iterator[tuple[str, str | None]]:
        """(path, the key it holds or None when unreadable), for maintenance passes."""
        for top, fd in self._tops():
            for name in _names(fd):
                yield os.path.join(top, name), _key_of(name, fd)

    def _tops(self) -> Iterator[tuple[str, int]]:
        """Each fan-out directory (path, opened as fsutil.open_dir does: a symbolic link or
        a file among them is skipped, never followed), closed when the next is asked for."""
        try:
            names = sorted(os.listdir(self.dir))
        except OSError:
            return
        for name in names:
            top = os.path.join(self.dir, name)
            try:
                fd = open_dir(top)
            except OSError:
                continue
            try:
                yield top, fd
            finally:
                os.close(fd)

    def keep_only(self, full_keys: set[str]) -> int:
        """Removes the files of rows not in ``full_keys`` (the rows the index still has),
        and files that hold no row; returns how many. A row stored while this runs may lose
        its file: it is then read from the database once, and given its file again."""
        removed = 0
        for top, fd in self._tops():
            for name in _names(fd):
                full_key = _key_of(name, fd) if full_keys else None  # none kept: no need to read
                if (full_key is None or full_key not in full_keys
                        or self.path(full_key) != os.path.join(top, name)):  # fmt: skip
                    try:
                        os.unlink(name, dir_fd=fd)
                    except OSError:
                        continue
                    removed += 1
        return removed


def _names(fd: int) -> list[str]:
    try:
        return os.listdir(fd)
    except OSError:
        return []


def _key_of(name: str, dir_fd: int) -> str | None:
    """The key a row file holds, None if the file is unreadable or not a row file."""
    data = read_nonblocking(name, None, dir_fd)
    body = None if data is None else _checked(data)
    if body is None:
        return None
    length_text, newline, rest = body.partition(b"\n")
    if not newline or not length_text.isdigit() or len(length_text) > 8:
        return None
    key = rest[: int(length_text)]
    if len(key) != int(length_text):
        return None
    try:
        return key.decode(_ENCODING, _ERRORS)
    except UnicodeDecodeError:
        return None
