"""Archive members that the linker names but does not write: ``ARCHIVE(MEMBER at OFFSET)``.

LLD 21 names a regular archive's member in a job file as ``libb.a(b.o at 84)`` (the member's
file name and the offset of its header in the archive) and never writes that file; LLD 22
writes members out under other names. The bytes are in the archive at that offset, so a
distributor can read them for the key without writing anything, and write them to exactly
that path only when a job must run (:mod:`cached_dist.link.extracted`).

:func:`named_member` is the one question the rest of the program asks: "is this input such a
member, and where are its bytes?". It checks the archive's member header at the offset, so a
stale or mistyped name is an error naming archive, member and offset, not a wrong input.
"""

from __future__ import annotations

import os

from ..errors import InputError

_MAGIC = b"!<arch>\n"
_HEADER = 60
_FMAG = b"`\n"
_SUFFIX = ")"
MARKER_PREFIX = ".cached-dist-members."  # marker files listing members a link extracted


class Member:
    """One linker-named member: where its bytes are in which archive."""

    __slots__ = ("archive", "data_offset", "name", "offset", "path", "size")

    def __init__(
        self, path: str, archive: str, name: str, offset: int, data_offset: int, size: int
    ) -> None:
        self.path = path  # the input as the job file names it
        self.archive = archive
        self.name = name
        self.offset = offset  # of the member's header
        self.data_offset = data_offset
        self.size = size

    def read(self) -> bytes:
        """The member's bytes, straight from the archive."""
        with open(self.archive, "rb") as f:
            f.seek(self.data_offset)
            data = f.read(self.size)
        if len(data) != self.size:
            raise InputError(f"archive {self.archive} is truncated: member {self.name} at "
                             f"offset {self.offset} needs {self.size} bytes")  # fmt: skip
        return data

    def describe(self) -> str:
        return f"member {self.name} at offset {self.offset} of archive {self.archive}"


def looks_like_member(path: str) -> bool:
    """Cheap syntactic test: ends like ``(NAME at DIGITS)``."""
    if not path.endswith(_SUFFIX):
        return False
    head, at, digits = path[:-1].rpartition(" at ")
    return bool(at) and digits.isdigit() and "(" in head


def split_name(path: str) -> list[tuple[str, str, int]]:
    """Every (archive, member, offset) reading of ``path``; an archive path may itself hold
    parentheses, so each ``(`` is a candidate, leftmost first."""
    if not looks_like_member(path):
        return []
    head, _, digits = path[:-1].rpartition(" at ")
    readings = []
    start = head.find("(")
    while start > 0:
        member = head[start + 1 :]
        if member and "/" not in member:
            readings.append((head[:start], member, int(digits)))
        start = head.find("(", start + 1)
    return readings


_memo: dict[str, Member | None] = {}


def named_member(path: str) -> Member | None:
    """The archive member ``path`` names, if it is a linker-named member that is not an
    ordinary file (absent, or extracted by a cached-dist link); None for anything else.

    Raises InputError when ``path`` names an existing archive whose header at that offset is
    not that member (the archive changed since the link read it, or the name is wrong)."""
    if path in _memo:
        return _memo[path]
    found = None
    readings = split_name(path)
    if readings and (not os.path.lexists(path) or _extracted_by_us(path)):
        found = _locate(path, readings)
    _memo[path] = found
    return found


def is_linker_named_member(path: str) -> bool:
    """For job-file validation: an input that is not a file but a member the linker named."""
    return named_member(path) is not None


def _extracted_by_us(path: str) -> bool:
    """Whether a marker of a cached-dist link lists ``path`` (then its content is only a copy
    of the archive's, possibly stale: the archive is what counts)."""
    return os.path.basename(path) in managed_paths(os.path.dirname(path) or ".")


# -- markers: which member files cached-dist links extracted, and whether they still run ------

stale_dirs: set[str] = set()  # directories holding a dead link's marker, seen in this run
_markers: dict[str, list[Marker]] = {}


class Marker:
    """One link's record of the member files it extracted (or shares) in a directory."""

    __slots__ = ("alive", "file", "paths", "pid")

    def __init__(self, file: str, pid: int, alive: bool, paths: list[str]) -> None:
        self.file = file
        self.pid = pid
        self.alive = alive
        self.paths = paths


def marker_name(pid: int | None = None) -> str:
    return f"{MARKER_PREFIX}{socket_host()}.{os.getpid() if pid is None else pid}.json"


def socket_host() -> str:
    import socket

    return socket.gethostname().replace("/", "_")


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" if unknown): with the pid, it
    tells a live owner from a later process that reuses its pid."""
    from procs import proc_stat

    try:
        fields = proc_stat(pid)
    except OSError:
        return ""
    return fields[19].decode("ascii", "replace") if len(fields) > 19 else ""


def read_markers(directory: str, *, fresh: bool = False) -> list[Marker]:
    """Every marker in ``directory``; a marker of another host counts as alive (unknowable)."""
    if not fresh and directory in _markers:
        return _markers[directory]
    import json

    found = []
    host = socket_host()
    try:
        names = [n for n in os.listdir(directory) if n.startswith(MARKER_PREFIX)]
    except OSError:
        names = []
    for name in names:
        stem = name[len(MARKER_PREFIX) :].removesuffix(".json")
        owner_host, _, pid_text = stem.rpartition(".")
        if not name.endswith(".json") or not pid_text.isdigit():
            continue
        try:
            with open(os.path.join(directory, name), "rb") as f:
                body = json.loads(f.read())
            paths = [str(p) for p in body["paths"]]
            start = str(body.get("start", ""))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written (they are renamed into place) or damaged: ignore
        pid = int(pid_text)
        alive = owner_host != host or _alive(pid, start)
        found.append(Marker(name, pid, alive, paths))
        if not alive:
            stale_dirs.add(directory)
    _markers[directory] = found
    return found


def managed_paths(directory: str) -> set[str]:
    return {p for m in read_markers(directory) for p in m.paths}


def _alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # exists, owned by someone else
    return not start or process_start(pid) in ("", start)


def _locate(path: str, readings: list[tuple[str, str, int]]) -> Member | None:
    problem = None
    for archive, name, offset in readings:
        if not os.path.isfile(archive):
            continue
        try:
            member, why = _member_at(archive, name, offset)
        except OSError as e:
            raise InputError(f"cannot read archive {archive} for {path}: {e.strerror}") from None
        if member is not None:
            member.path = path
            return member
        problem = problem or (archive, name, offset, why)
    if problem is None:
        return None  # no archive by any reading: an ordinary missing input
    archive, name, offset, why = problem
    raise InputError(f"archive member not found: {name} at offset {offset} in archive "
                     f"{archive} ({why}; the job file names {path})")  # fmt: skip


def _member_at(archive: str, name: str, offset: int) -> tuple[Member | None, str]:
    """The member called ``name`` whose header is at ``offset``, or None and why not."""
    with open(archive, "rb") as f:
        if f.read(len(_MAGIC)) != _MAGIC:
            return None, "not a regular ar archive"
        size_total = os.fstat(f.fileno()).st_size
        if offset < len(_MAGIC) or offset + _HEADER > size_total:
            return None, "no member header there"
        f.seek(offset)
        header = f.read(_HEADER)
        if header[58:60] != _FMAG:
            return None, "no member header there"
        try:
            size = int(header[48:58].decode("ascii").strip() or "-1")
        except (UnicodeDecodeError, ValueError):
            return None, "damaged member header"
        raw = header[:16].decode("latin-1").rstrip(" ")
        data = offset + _HEADER
        if raw.startswith("#1/") and raw[3:].isdigit():  # BSD: the name precedes the data
            length = int(raw[3:])
            real = f.read(length).rstrip(b"\0").decode("utf-8", "surrogateescape")
            data += length
            size -= length
        elif raw.startswith("/") and raw[1:].isdigit():  # GNU: an offset into the "//" table
            real = _long_name(f, int(raw[1:]))
        else:
            real = raw.removesuffix("/")
        if size < 0 or data + size > size_total:
            return None, "damaged member header"
        if os.path.basename(real) != name:
            return None, f"the member there is {os.path.basename(real) or '(unnamed)'}"
        return Member("", archive, name, offset, data, size), ""


def _long_name(f: object, at: int) -> str:
    """A GNU long member name from the ``//`` string table near the start of the archive."""
    import io

    assert isinstance(f, io.BufferedReader)
    pos = len(_MAGIC)
    for _ in range(3):  # symbol table(s), then the string table
        f.seek(pos)
        header = f.read(_HEADER)
        if len(header) < _HEADER:
            break
        try:
            size = int(header[48:58].decode("ascii").strip() or "0")
        except (UnicodeDecodeError, ValueError):
            break
        if header[:16].rstrip(b" ") == b"//":
            f.seek(pos + _HEADER + at)
            text = f.read(min(4096, max(0, size - at)))
            end = text.find(b"/\n")
            return text[: end if end >= 0 else len(text)].decode("utf-8", "surrogateescape")
        pos += _HEADER + size + (size & 1)
    return ""
