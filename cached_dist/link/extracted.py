"""Linker-named archive members written out for the jobs that run, and removed afterwards.

LLD 21 names regular-archive members ``libb.a(b.o at 84)`` and never writes them, so no
compiler can read them (:mod:`cached_dist.jobfile.members`). Before jobs run, each member
they read is written to exactly that path; when they are done it is removed again.

Several links may share a directory (and an archive), and any of them may be killed:

- every change happens under an exclusive ``flock`` of the directory itself (released by the
  kernel when a holder dies, and no lock file is left behind);
- before writing anything, a link records the member files it manages in a marker,
  ``.cached-dist-members.HOST.PID.json``; a file another live link manages is shared (after
  checking its bytes), never written twice;
- a file is removed when the last live link that manages it is done; the marker of a link
  that died (SIGKILL) is found by the next link using that directory, which removes its files;
- an ordinary file is never overwritten; if its bytes differ from the member's, the link
  stops with an error instead of compiling something the key does not describe.
"""

from __future__ import annotations

import contextlib
import json
import os

from ..errors import InputError
from ..jobfile.members import (
    MARKER_PREFIX,
    Member,
    marker_name,
    named_member,
    process_start,
    read_markers,
    socket_host,
    stale_dirs,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from ..jobfile import Job


def needed_members(jobs: Sequence[Job]) -> list[Member]:
    """The linker-named members that ``jobs`` read (each once)."""
    found: dict[str, Member] = {}
    for job in jobs:
        for path in job.inputs:
            if path not in found:
                member = named_member(path)
                if member is not None:
                    found[path] = member
    return list(found.values())


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    import fcntl

    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(path)


def _same_bytes(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read() == data
    except OSError:
        return False


def _sweep_dead(directory: str, own: str) -> set[str]:
    """Removes dead links' markers and the files only they managed (caller holds the lock).
    Returns the files live links (other than ``own``) manage."""
    markers = read_markers(directory, fresh=True)
    live = {p for m in markers if m.alive and m.file != own for p in m.paths}
    for m in markers:
        if m.alive or m.file == own:
            continue
        for p in m.paths:
            if p not in live:
                _unlink(os.path.join(directory, p))
        _unlink(os.path.join(directory, m.file))
    host = socket_host()
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):  # a marker being written when its link died
            if name.startswith(f"{MARKER_PREFIX}{host}.") and name.endswith(".tmp"):
                pid = name.removesuffix(".tmp").rpartition(".")[2]
                if pid.isdigit() and not _pid_alive(int(pid)):
                    _unlink(os.path.join(directory, name))
    return live


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def sweep(directories: set[str] | None = None) -> None:
    """Cleans up after links that died in the directories this run saw their markers in."""
    for directory in sorted(stale_dirs if directories is None else directories):
        with contextlib.suppress(OSError), _locked(directory):
            _sweep_dead(directory, marker_name())
    if directories is None:
        stale_dirs.clear()


class Extraction:
    """Context manager: the members exist at their paths inside, are removed on the way out
    (error, Ctrl-C and SIGTERM included: the link turns SIGTERM into KeyboardInterrupt)."""

    def __init__(self, members: Sequence[Member]) -> None:
        self.by_dir: dict[str, list[Member]] = {}
        for m in members:
            self.by_dir.setdefault(os.path.dirname(m.path) or ".", []).append(m)
        self.managed: dict[str, set[str]] = {}  # directory -> file names we manage

    def __enter__(self) -> Extraction:
        try:
            for directory, members in self.by_dir.items():
                self._acquire(directory, members)
        except BaseException:
            self.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _write_marker(self, directory: str, names: set[str]) -> None:
        final = os.path.join(directory, marker_name())
        tmp = final.removesuffix(".json") + ".tmp"
        body = {"start": process_start(os.getpid()), "paths": sorted(names)}
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f)
        os.replace(tmp, final)

    def _acquire(self, directory: str, members: list[Member]) -> None:
        own = marker_name()
        try:
            with _locked(directory):
                live = _sweep_dead(directory, own)
                names = self.managed.setdefault(directory, set())
                plan: list[tuple[Member, bytes]] = []
                for m in members:
                    name = os.path.basename(m.path)
                    data = m.read()
                    if os.path.lexists(m.path) and name not in live and name not in names:
                        if _same_bytes(m.path, data):
                            continue  # an ordinary file with the member's bytes: use it
                        raise InputError(
                            f"{m.path} exists and is not the {m.describe()}; "
                            "not overwriting it (remove it, or relink)"
                        )
                    names.add(name)
                    plan.append((m, data))
                self._write_marker(directory, names)  # before any file: a kill leaves a record
                for m, data in plan:
                    self._place(m, data, os.path.basename(m.path) in live)
        except OSError as e:
            raise InputError(
                f"cannot write archive members to {directory}: {e.strerror or e} "
                "(LLD 21 names them there without writing them)"
            ) from None

    def _place(self, m: Member, data: bytes, shared: bool) -> None:
        if os.path.lexists(m.path):
            if _same_bytes(m.path, data):
                return
            if shared:
                raise InputError(
                    f"{m.path} is in use by another link with other bytes than the "
                    f"{m.describe()} (the archive changed while that link runs); relink later"
                )
            _unlink(m.path)  # our own stale copy
        with open(m.path, "xb") as f:  # never overwrites a file that appeared meanwhile
            f.write(data)

    def release(self) -> None:
        """Removes every file no other live link still manages, then this link's markers."""
        own = marker_name()
        for directory, names in self.managed.items():
            with contextlib.suppress(OSError), _locked(directory):
                markers = read_markers(directory, fresh=True)
                live = {p for m in markers if m.alive and m.file != own for p in m.paths}
                for name in names:
                    if name not in live:
                        _unlink(os.path.join(directory, name))
                _unlink(os.path.join(directory, own))
        self.managed.clear()


def extracted(jobs: Sequence[Job]) -> contextlib.AbstractContextManager[object]:
    """The members ``jobs`` need, written out for the duration of a ``with`` block."""
    members = needed_members(jobs)
    return Extraction(members) if members else contextlib.nullcontext()
