"""A waiting spare (and its standby early worker) copies, ahead of its link, the pages it
shares with the server.

After a fork, the first write to each page the child shares with its parent copies that
page, a fault of a few microseconds. A served link writes some hundreds of the server's
pages (reference counts of its modules' objects, the allocator's free lists), each at a
fault, inside the link's own time: ~2.3 ms of a 10 ms link of lua's 33 jobs here. The spare
has nothing to do until its connection comes, so it copies every private writable page
first, with ``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14): the kernel breaks the sharing as
a write would, without writing, so no byte changes and nothing can race with it. It costs
~4 ms of CPU per spare for the server's ~8 MB, spent in a thread of the idle scheduling
class (:func:`in_background`): the LLD that is finishing the last link keeps its
processors. It also costs ~1 MB more memory per spare (pages the server reserved but never
touched).

Best effort: without ``ctypes`` or an idle class, or on an older kernel, nothing is done, and
the copy stops as soon as a connection waits, so a link never waits for more than one chunk.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MADV_POPULATE_WRITE = 23  # <linux/mman.h>
CHUNK = 1 << 20  # bytes copied between two looks at the listener (~0.5 ms)
LARGEST = 64 << 20  # a larger mapping is a reservation, mostly never touched: left alone
_SKIPPED = ("[stack]", "[vvar]", "[vdso]", "[vsyscall]")

_madvise: Callable[[int, int, int], int] | None = None
try:
    import ctypes

    _function = ctypes.CDLL(None).madvise
    _function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _function.restype = ctypes.c_int
    _madvise = _function
except (ImportError, OSError, AttributeError):  # no libffi, no libc symbol: nothing to do
    pass


def writable_ranges(maps: str) -> list[tuple[int, int]]:
    """(start, end) of each private writable mapping in ``maps`` (/proc/self/maps' text)
    worth copying: not the stack, not the kernel's, none larger than LARGEST."""
    ranges = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or not fields[1].startswith("rw") or fields[1][3:4] != "p":
            continue
        if len(fields) == 6 and fields[5].strip() in _SKIPPED:
            continue
        start, _, end = fields[0].partition("-")
        try:
            low, high = int(start, 16), int(end, 16)
        except ValueError:
            continue
        if 0 < high - low <= LARGEST:
            ranges.append((low, high))
    return ranges


def prefault(waiting: Callable[[], bool]) -> int:
    """Copies this process's private writable pages (see the module's docstring) chunk by
    chunk until done or ``waiting()``; returns how many bytes were done (0 where the kernel
    or the platform cannot)."""
    if _madvise is None:
        return 0
    try:
        with open("/proc/self/maps") as f:
            ranges = writable_ranges(f.read())
    except OSError:
        return 0
    done = 0
    for low, high in ranges:
        at = low
        while at < high:
            if waiting():
                return done
            size = min(CHUNK, high - at)
            if _madvise(at, size, MADV_POPULATE_WRITE) != 0:
                # EINVAL: a kernel before 5.14, or a mapping of a device; EFAULT, ENOMEM:
                # one that changed. Either way the next mapping (~35 calls in all at worst).
                break
            done += size
            at += size
    return done


def in_background(waiting: Callable[[], bool]) -> Callable[[], None]:
    """:func:`prefault` in a thread of the idle scheduling class, which runs only on a
    processor nothing else wants: the pages are copied just after a link, while LLD still
    writes its output, and a copy at the normal class took about as much time from LLD as
    it saved the next link (docs/design.md). Returns what
    stops it (also stopped by ``waiting()``); nothing is copied where the thread cannot be
    put in the idle class."""
    import contextlib
    import threading

    stopped = threading.Event()

    def run() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # this thread only
        except (OSError, AttributeError):
            return
        prefault(lambda: stopped.is_set() or waiting())

    with contextlib.suppress(RuntimeError):  # no thread can be started now: nothing copied
        threading.Thread(target=run, name="prefault", daemon=True).start()
    return stopped.set
