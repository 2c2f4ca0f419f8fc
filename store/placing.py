"""Placing stored blobs at a link's outputs, in this process or in one that helps it.

:meth:`store.Store.materialize_many` plans the outputs (digest, size, destination and the
stage to copy through); :func:`place` carries a share of them out with the store's
:class:`Blobs`. A helper (a worker forked earlier in the link that waits for an order, see
``procs.forked.start``'s ``then``) takes its share as an order, :func:`place_order`, and
builds the same ``Blobs`` from the store's root: it cannot use this process's objects.

A copy is made in a temporary file (``.OUTPUT.PID.RANDOM.tmp``, beside the output when no
stage reaches it) and renamed over the output. A terminating signal (SIGTERM, SIGINT,
SIGHUP) that comes meanwhile is held until the share is placed (:class:`SignalsHeld`), so it
never leaves a temporary file beside the outputs; SIGKILL cannot be held, and what it leaves
is removed by the next link that places outputs there (:func:`sweep_stale_temps`).
"""

from __future__ import annotations

import errno
import os
import stat
import time

import xxhash

from .blobs import TOUCH_AFTER, Blobs, Outcome
from .fsutil import Modes, temp_name

try:  # the native placer (_link.c): copy_out's work without its Python, ~5-20 us an output
    # (a compressed blob's too, decompressed, when it was built with libzstd)
    from ._link import copy_blobs as native_copy_blobs
    from ._link import link_blobs as native_link_blobs
except ImportError:  # built without a C compiler: copy_out places every output
    native_link_blobs = native_copy_blobs = None  # type: ignore[assignment]

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
else:  # signal's own core, built in: `signal` imports enum, which a full hit does not pay for
    import _signal
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any, Protocol

    #: (digest, size, destination, stage or None)
    Plan = tuple[str, int, str, str | None]

    class Helper(Protocol):
        """A process that carries out one order (procs.forked.Worker)."""

        def order(self, value: Any) -> bool: ...
        def answer(self) -> Any: ...


#: Output directories this process swept already (sweep_stale_temps): once is enough.
_swept: set[str] = set()
#: The signals that end a process unless it handles them, and that a build tool sends.
_TERMINATING = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)


class SignalsHeld:
    """``with SignalsHeld():`` the terminating signals that come meanwhile are noted, not
    acted on; on the way out each gets its own disposition back and the first one noted is
    sent again, to be acted on as it would have been (the default ends the process; Python's
    SIGINT handler, or the link's SIGTERM one, raises KeyboardInterrupt) once nothing half
    done is left. Only the main thread can set handlers: elsewhere nothing is held. Ignored
    signals stay ignored.

    A signal that comes while the dispositions are given back may reach the C handler while
    Python's is already the default again, and CPython then drops it (its handler runs only
    later, and a default "handler" is skipped): the process would live on. So the C handler
    also writes each signal to a pipe of ours (``set_wakeup_fd``), read once the
    dispositions are back."""

    __slots__ = ("came", "saved", "wakeup")

    def __init__(self) -> None:
        self.came = 0
        self.saved: list[tuple[int, Any]] = []
        self.wakeup: tuple[int, int, int] | None = None  # (read end, write end, the old fd)

    def _note(self, signum: int, frame: object) -> None:
        if not self.came:
            self.came = signum

    def __enter__(self) -> SignalsHeld:
        for sig in _TERMINATING:
            try:
                was = _signal.getsignal(sig)
                if was is _signal.SIG_IGN or was is None:  # None: set outside Python; left be
                    continue
                _signal.signal(sig, self._note)
            except (ValueError, OSError):  # not the main thread
                return self
            self.saved.append((sig, was))
        if self.saved:
            try:
                r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                return self
            try:
                self.wakeup = (r, w, _signal.set_wakeup_fd(w, warn_on_full_buffer=False))
            except (ValueError, OSError):
                os.close(r)
                os.close(w)
        return self

    def __exit__(self, *exc: object) -> None:
        saved, self.saved = self.saved, []
        for sig, was in saved:
            _signal.signal(sig, was)
        if self.wakeup is not None:
            r, w, old = self.wakeup
            self.wakeup = None
            _signal.set_wakeup_fd(old)
            try:
                written = os.read(r, 4096)
            except OSError:  # nothing came
                written = b""
            os.close(r)
            os.close(w)
            if not self.came:
                self.came = next((sig for sig in written if sig in _TERMINATING), 0)
        if self.came:
            came, self.came = self.came, 0
            # To this thread, handled before it returns: os.kill may deliver it to another
            # thread (a link's upload thread), whose Python handler then runs only later.
            _signal.raise_signal(came)


def place(blobs: Blobs, hard_link: bool, plans: Sequence[Plan]) -> list[Any]:
    """Each plan's [outcome, seconds]: an Outcome, or [errno, strerror, filename] for an
    OSError (told to the caller, which reports it). The native placer (store/_link.c), when
    it is built, links or copies them (copies decompressed from compressed blobs, when built
    with libzstd); what it hands back, the rare case, is placed here.
    Terminating signals wait until every plan is placed or given up (:class:`SignalsHeld`)."""
    if not plans:
        return []
    with SignalsHeld():
        placed = _place_all(blobs, hard_link, plans)
    if not hard_link and plans[0][3] is None:  # copies made beside the outputs: tidy there
        directory = os.path.dirname(plans[0][2])  # (a link's outputs share one directory)
        if directory not in _swept:
            _swept.add(directory)
            sweep_stale_temps([directory])
    return placed


def _place_all(blobs: Blobs, hard_link: bool, plans: Sequence[Plan]) -> list[Any]:
    if native_link_blobs is None or native_copy_blobs is None:
        return _place(blobs, hard_link, plans)
    hexdigest, touch_before = xxhash.xxh3_128_hexdigest, time.time() - TOUCH_AFTER
    if hard_link:
        placed = native_link_blobs(blobs.dir, plans, hexdigest, touch_before)
    else:  # each copied to a new name in its stage, or beside its output, then renamed
        placed = native_copy_blobs(blobs.dir, [
            (digest, size, dest, temp_name(stage or os.path.dirname(dest) or ".",
                                           os.path.basename(dest)))
            for digest, size, dest, stage in plans], hexdigest, touch_before)  # fmt: skip
    if None not in placed:
        return [[Outcome.OK, took] for took in placed]
    rest = iter(_place(blobs, hard_link, [p for p, t in zip(plans, placed, strict=True)
                                          if t is None]))  # fmt: skip
    return [[Outcome.OK, took] if took is not None else next(rest) for took in placed]


def _place(blobs: Blobs, hard_link: bool, plans: Sequence[Plan]) -> list[Any]:
    """:func:`place`, one plan after another, in Python (copy_out)."""
    done: list[Any] = []
    unstaged: set[str] = set()  # output directories the stage turned out not to reach
    for digest, size, dest, stage in plans:
        started = time.monotonic()
        here = stage
        if here is not None and unstaged:
            here = None if (os.path.dirname(dest) or ".") in unstaged else here
        try:
            try:
                outcome: Any = blobs.copy_out(digest, size, dest, hard_link, here)
            except OSError as e:
                if here is None or e.errno != errno.EXDEV:
                    raise
                # Same file system, another mount (a bind mount): copy beside it.
                unstaged.add(os.path.dirname(dest) or ".")
                outcome = blobs.copy_out(digest, size, dest, hard_link)
        except OSError as e:
            outcome = [e.errno, e.strerror, e.filename]
        done.append([outcome, time.monotonic() - started])
    return done


def place_order(order: Any) -> list[Any]:
    """:func:`place` for a helper: ``order`` is (store root, group-shared, hard_link, plans)."""
    root, group_shared, hard_link, plans = order
    return place(Blobs(str(root), Modes(bool(group_shared))), bool(hard_link),
                 [(str(d), int(s), str(p), None if t is None else str(t))
                  for d, s, p, t in plans])  # fmt: skip


def sweep_stale_temps(directories: Iterable[str]) -> int:
    """Removes from ``directories`` (a link's output directories) the temporary files
    placing left there when its process was killed outright: ``.NAME.PID.RANDOM.tmp``
    (fsutil.temp_name) whose PID no longer runs on this host. Returns how many it removed.
    One listing of each directory (~0.4 ms for 700 files here): done where a link copies
    outputs beside them (place) or compiles (cached_dist/link/cached.py), not on every hit.

    A PID that runs is kept, whoever it is now. On a directory shared by several hosts, a
    temporary file of another host's live writer may be taken for one left: that writer's
    rename then fails and its output is compiled instead, never wrong."""
    removed = 0
    mine = os.getpid()
    for directory in directories:
        try:
            names = os.listdir(directory or ".")  # names only: scandir's entries cost more
        except OSError:
            continue
        for name in names:
            if name[:1] != "." or name[-4:] != ".tmp" or not _left_by_dead(name, mine):
                continue
            path = os.path.join(directory, name)
            try:
                if stat.S_ISREG(os.lstat(path).st_mode):
                    os.unlink(path)
                    removed += 1
            except OSError:
                pass
    return removed


def _left_by_dead(name: str, mine: int) -> bool:
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    _, pid, random = name[1:-4].rsplit(".", 2) if name.count(".") >= 4 else ("", "", "")
    if len(random) != 12 or not pid.isdigit() or not _is_hex(random):
        return False
    owner = int(pid)
    if owner == mine or not 0 < owner < 1 << 31:
        return False
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it runs, as another user
    return False


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)
