"""The lock primitive for claims and maintenance: filelock's SoftFileLease, made host-aware.

Imported lazily (filelock costs ~50 ms to import), only by processes that compute or evict.

Who may break a marker (HostAwareLease._try_break_pinned_lock decides, filelock's own
takeover carries it out: an atomic exchange, checked afterwards, so of two waiters breaking
the same marker only one gets it, and a marker re-written meanwhile is put back):

* a record of a process on this host that no longer exists: at once;
* a record of a live process on this host: never while that process is stopped (SIGSTOP, a
  debugger); once it is LEASE_DURATION old by its mtime and as seen while that process runs,
  it is no holder's (a holder's heartbeat refreshes it three times a lease): a record
  planted with a live pid, say;
* a lease of another host: once seen unchanged for LEASE_DURATION on this process's clock;
  a record of another host that promises no heartbeat (not a lease), likewise;
* anything that is not a record (empty: its holder died between creating the marker and
  writing it; partly written; junk): once UNREADABLE_GRACE old, by its mtime or as seen.

What a waiter has seen of a marker is kept for the whole process, not per lease object: a
link polls a key with a new lease each time (``claim(wait=0)``), and a lease that forgot the
marker at every poll would never see it stay unchanged.
"""

from __future__ import annotations

import os
import time

from filelock import SoftFileLease, Timeout
from filelock._filesystem import break_marker_pid
from filelock._identity import host_name, owner_is_stale
from filelock._soft import parse_marker, read_lock_file

from procs import proc_stat

from .fsutil import unlink_quietly

TYPE_CHECKING = False
if TYPE_CHECKING:
    from filelock._soft import OwnerRecord

#: A holder on another host must leave its marker unrefreshed this long (as seen on the
#: waiter's own monotonic clock) before a waiter may take the lock over. Every process sharing
#: a store must agree on it (STORE_LEASE_DURATION overrides it, e.g. for tests).
LEASE_DURATION = float(os.environ.get("STORE_LEASE_DURATION", "30"))
#: How old a marker that holds no record must be before it is broken. Its holder writes the
#: record right after creating the file (microseconds), so seconds never rob a live one; a
#: holder killed in between leaves it empty, and nobody can tell whose it was.
UNREADABLE_GRACE = 2.0
_SEEN_MAX = 4096  # markers remembered (a link polls one per key it waits for)

__all__ = ["LEASE_DURATION", "UNREADABLE_GRACE", "HostAwareLease", "Timeout", "make_lease"]

#: lock path -> (the marker as last seen: mtime, inode, ctime; when first seen so, monotonic)
_seen: dict[str, tuple[tuple[float, int, int], float]] = {}


class HostAwareLease(SoftFileLease):
    """A lease whose live holder on this host is never broken while it is stopped, and whose
    unreadable markers (an empty one left by a holder killed while creating it) are broken
    after seconds, not never.

    SoftFileLease breaks a marker whose same-host owner is provably dead and expires a foreign
    lease once it stops being refreshed; it would also expire a live local holder whose
    heartbeat was stopped (SIGSTOP, a debugger), and it never breaks an empty marker (it takes
    it for a pre-3.22 filelock's, which stays empty while held). See the module's docstring.
    """

    # Hooks into filelock's private break path (checked against filelock 4.3; the canary test
    # tests/store/test_concurrency.py::test_filelock_hooks_still_exist names them).
    def _try_break_pinned_lock(self, pinned: int | None) -> None:
        try:
            content, marker = read_lock_file(self._lock_path)
        except (OSError, ValueError):
            return  # gone meanwhile: the next attempt creates it
        if pinned not in {None, marker.st_ino}:
            return  # replaced since it was pinned
        owner = parse_marker(content)
        if owner is None:
            if self._unreadable_age(marker) >= UNREADABLE_GRACE:
                self._take_over(marker, break_marker_pid(content))
            return
        if owner.hostname == host_name():
            if owner_is_stale(owner.pid, owner.hostname, owner.start) or not self._kept(
                owner, marker
            ):
                self._take_over(marker, owner.pid)
            return
        if owner.mode != "lease":  # another host's, with no heartbeat promised
            if self._marker_unchanged_for(marker) >= self._lease_duration:
                self._take_over(marker, None)
            return
        super()._try_break_pinned_lock(pinned)  # a lease of another host: expiry as seen here

    def _take_over(self, marker: os.stat_result, breaker_pid: int | None) -> None:
        """filelock's takeover (an atomic exchange); where the file system refuses exchanges
        (NFS, some FUSE and overlay mounts: filelock then leaves the marker, and the claim
        would wait forever), the stale marker is renamed aside instead, checked to be the
        one judged stale, and linked back if it is not (never over a successor's)."""
        super()._take_over(marker, breaker_pid)
        if self._context.lock_file_fd is not None or not _exchanges_refused(self._lock_path):
            return  # taken over (held now), or declined for a reason of filelock's own
        try:
            now = os.lstat(self._lock_path)
        except OSError:
            return  # gone: the next attempt creates it
        if (now.st_ino, now.st_mtime) != (marker.st_ino, marker.st_mtime):
            return  # replaced meanwhile: judged again at the next attempt
        aside = f"{self._lock_path}.break.{os.getpid()}.{os.urandom(16).hex()}"
        try:
            os.rename(self._lock_path, aside)
        except OSError:
            return
        try:
            moved = os.lstat(aside)
            if (moved.st_ino, moved.st_mtime) != (marker.st_ino, marker.st_mtime):
                os.link(aside, self._lock_path)  # a live successor's: back, unless taken
        except OSError:
            pass
        finally:
            unlink_quietly(aside)

    def _kept(self, owner: OwnerRecord, marker: os.stat_result) -> bool:
        """Whether the live process ``owner`` on this host still holds its marker: it is
        stopped, or its marker was refreshed within a lease, by its mtime or as seen here
        (either can be wrong alone: a file server's clock, a waiter that just came)."""
        silent = min(time.time() - marker.st_mtime, self._marker_unchanged_for(marker))
        if silent < self._lease_duration:
            return True
        try:
            return proc_stat(owner.pid)[0] in (b"T", b"t")
        except (OSError, IndexError):
            return True  # cannot be read: leave it to the next poll

    def _unreadable_age(self, marker: os.stat_result) -> float:
        """How old an unreadable marker is: by its mtime, or as seen here when the file
        system's clock is ahead of this host's."""
        return max(time.time() - marker.st_mtime, self._marker_unchanged_for(marker))

    def _marker_unchanged_for(self, marker: os.stat_result) -> float:
        """Seconds this process has seen the marker unchanged (its mtime, inode and ctime: a
        peer can recreate a marker with the same inode and mtime), across lease objects."""
        now = time.monotonic()
        seen_as = (marker.st_mtime, marker.st_ino, marker.st_ctime_ns)
        seen = _seen.get(self._lock_path)
        if seen is None or seen[0] != seen_as:
            if len(_seen) >= _SEEN_MAX:
                _seen.clear()
            _seen[self._lock_path] = (seen_as, now)
            return 0.0
        return now - seen[1]


_refused: dict[str, bool] = {}  # directory -> whether its file system refuses exchanges


def _exchanges_refused(lock_path: str) -> bool:
    """Whether the file system of ``lock_path`` refuses renameat2(RENAME_EXCHANGE), tried
    once a process on two files of its own beside it."""
    directory = os.path.dirname(lock_path)
    if directory not in _refused:
        from filelock._filesystem import exchange_names, exchange_supported

        first = f"{lock_path}.probe.{os.getpid()}.{os.urandom(8).hex()}"
        second = f"{first}.2"
        try:
            for path in (first, second):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            _refused[directory] = not (exchange_supported() and exchange_names(first, second))
        except OSError:
            return False  # cannot tell now: leave the marker to filelock
        finally:
            for path in (first, second):
                unlink_quietly(path)
    return _refused[directory]


def make_lease(path: str, mode: int) -> HostAwareLease:
    """One lease object per acquisition attempt; not shared between threads."""
    return HostAwareLease(
        path,
        lease_duration=LEASE_DURATION,
        # Refresh three times per lease, so two refreshes may fail before a peer may take over.
        heartbeat_interval=LEASE_DURATION / 3,
        mode=mode,
        thread_local=False,
        is_singleton=False,
    )
