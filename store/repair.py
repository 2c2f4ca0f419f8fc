"""Damage to the store's own paths: something other than a directory or a regular file where
one belongs (a directory at a blob's path, a file where blobs/ab/ should be, a FIFO for a row).

Left in place, such damage fails every write to that path for good (a rename onto a directory
fails) and passes scanning code that expects files. Every path here is the store's: what is
found in the wrong form is removed (a directory with what it holds), so that the next write
succeeds; a cache loses at most a few entries, which are misses.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

#: Errors that a path of the wrong kind gives a write (rename onto a directory, a file as a
#: directory, ...; ELOOP: fsutil.not_ours, a directory opened without following a link).
WRONG_KIND = frozenset({errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ELOOP})


def remove(path: str) -> bool:
    """Removes whatever is at ``path`` (a directory with its content; a symbolic link itself,
    never what it points to); False if nothing could be removed."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISDIR(st.st_mode):
        import shutil

        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            return False
    return not os.path.lexists(path)


def make_way(root: str, path: str, directory: bool = False) -> bool:
    """Makes ``path`` (a file inside the store at ``root``, or a ``directory``) writable again
    where damage blocks it: a parent between ``root`` and ``path`` that is not a directory,
    and ``path`` itself if it is not of its kind, are removed. A symbolic link to a directory
    is left (links refuse it, never follow it: see fsutil.open_dir). True if anything was
    removed."""
    root = os.path.abspath(root)
    path = os.path.abspath(path)
    if os.path.commonpath([root, path]) != root or path == root:
        return False  # never anything outside the store
    parts = os.path.relpath(path, root).split(os.sep)
    current = root
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except OSError:
            return False  # absent: made afresh by the writer
        if i == len(parts) - 1 and not directory:
            wrong = not stat.S_ISREG(st.st_mode)
        else:
            wrong = not stat.S_ISDIR(st.st_mode) and not os.path.isdir(current)
        if wrong:
            return remove(current)
    return False


def blocked_paths(root: str, error: BaseException) -> list[tuple[str, bool]]:
    """The paths a write failed on because something of the wrong kind is there, each with
    whether a directory belongs there. A rename into a directory opened by descriptor
    (fsutil.rename_into) names the file alone: it is looked for by that name among the
    blobs' and rows' fan-out directories. fsutil.not_ours (ELOOP) names a directory, or a
    database file, that is not the store's: a symbolic link is left alone (the store refuses
    it, never follows it); anything else is damage."""
    if not isinstance(error, OSError) or error.errno not in WRONG_KIND:
        return []
    for name in (error.filename2, error.filename):
        if not isinstance(name, str):
            continue
        if os.path.isabs(name):
            if error.errno != errno.ELOOP:
                return [(name, False)]
            try:
                st = os.lstat(name)
            except OSError:
                return []
            if stat.S_ISLNK(st.st_mode):
                return []
            return [(name, "not a directory" in (error.strerror or ""))]  # not_ours says which
        if len(name) == 30 and os.sep not in name:
            found = []
            for top in ("blobs", "rows"):
                try:
                    firsts = os.listdir(os.path.join(root, top))
                except OSError:
                    continue
                for first in firsts:
                    path = os.path.join(root, top, first, name)
                    if os.path.lexists(path):
                        found.append((path, False))
            return found
    return []


def sweep_fan_out(top: str, name_length: int) -> int:
    """In a two-level tree of the store's files (blobs/ab/cdef..., rows/ab/cdef...): removes
    what is not a directory at the first level and not a regular file at the second, among
    the names the store gives; returns how many it removed."""
    removed = 0
    try:
        tops = list(os.scandir(top))
    except OSError:
        return 0
    for first in tops:
        if len(first.name) != 2 or first.name.startswith("."):
            continue
        try:
            if not first.is_dir(follow_symlinks=False):
                removed += remove(first.path)
                continue
            entries = list(os.scandir(first.path))
        except OSError:
            continue
        for entry in entries:
            if len(entry.name) != name_length or entry.name.startswith("."):
                continue
            try:
                if not entry.is_file(follow_symlinks=False):
                    removed += remove(entry.path)
            except OSError:
                continue
    return removed


def prune_fan_out(top: str) -> int:
    """Removes the empty first-level directories of a fan-out tree (an inode each: on a file
    system short of inodes they count); one a writer needs again is made again. Returns how
    many were removed."""
    removed = 0
    try:
        tops = list(os.scandir(top))
    except OSError:
        return 0
    for first in tops:
        if len(first.name) != 2:
            continue
        try:
            os.rmdir(first.path)  # fails unless empty
            removed += 1
        except OSError:
            continue
    return removed


def sweep(directory: str, doomed: Callable[[os.DirEntry[str]], bool]) -> int:
    """Removes each entry directly in ``directory`` that ``doomed`` picks (an entry that
    vanishes or cannot be read is passed over); returns how many."""
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        try:
            if doomed(entry):
                removed += remove(entry.path)
        except OSError:
            continue
    return removed


def sweep_entries(directory: str) -> int:
    """Removes what is not a regular file directly in ``directory`` (claims/ and locks/, which
    hold only lock markers); returns how many."""
    return sweep(directory, lambda entry: not entry.is_file(follow_symlinks=False))
