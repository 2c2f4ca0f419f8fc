"""A waiting spare copies the pages it shares with the server (cached_dist/serve/prefault.py)."""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from cached_dist.serve.prefault import LARGEST, writable_ranges

ROOT = Path(__file__).parent.parent

_MAPS = """\
55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 123 /usr/bin/python3.11
55d0c0c00000-55d0c0c08000 rw-p 00200000 fd:01 123 /usr/bin/python3.11
55d0c1000000-55d0c1400000 rw-p 00000000 00:00 0          [heap]
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
7f0000100000-7f0000200000 rw-s 00000000 fd:01 456 /cache/index.db-shm
7f0000200000-7f0000201000 ---p 00000000 00:00 0
7f0000300000-7f0000400000 r-xp 00000000 fd:01 789 /usr/lib/libc.so.6
7f1000000000-7f1008000000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0          [stack]
7ffd00100000-7ffd00104000 r--p 00000000 00:00 0          [vvar]
garbage line
zz-7f rw-p 0 0 0
"""


def test_only_private_writable_mappings_are_copied() -> None:
    """Not a shared mapping (a write there is everyone's; it is never shared by fork's
    copy-on-write anyway), not the stack or the kernel's, not a huge reservation, and a line
    it cannot read is skipped."""
    assert writable_ranges(_MAPS) == [
        (0x55D0C0C00000, 0x55D0C0C08000),
        (0x55D0C1000000, 0x55D0C1400000),
        (0x7F0000000000, 0x7F0000100000),
    ]
    assert LARGEST < 0x8000000  # the 128 MB reservation above


_FORKED = """
import json, os, resource, sys, xxhash
from cached_dist.serve import prefault
how = sys.argv[1]
if how == "refused":
    prefault.MADV_POPULATE_WRITE = 1000  # what a kernel without it says: EINVAL
pages = 4096
memory = bytearray(os.urandom(pages * 4096))  # the server's: every page present
digest = xxhash.xxh3_128_hexdigest(memory)
r, w = os.pipe()
if os.fork() == 0:
    if how == "background":  # in a thread of the idle class, until it ends
        import threading, time
        prefault.in_background(lambda: False)
        (thread,) = [t for t in threading.enumerate() if t.name == "prefault"]
        policies = set()
        while thread.is_alive():
            try:
                policies.add(os.sched_getscheduler(thread.native_id))
            except OSError:
                pass
            time.sleep(0.001)
        done = pages * 4096 if policies == {os.SCHED_IDLE} else -len(policies)
    elif how == "stopped":
        import threading
        prefault.in_background(lambda: True)
        for t in threading.enumerate():
            if t.name == "prefault":
                t.join(10)
        done = 0
    else:
        done = 0 if how == "none" else prefault.prefault(lambda: how == "waiting")
    same = xxhash.xxh3_128_hexdigest(memory) == digest
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for page in range(pages):
        memory[page * 4096] ^= 1  # a link's first write to each page
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    os.write(w, json.dumps([done, same, faults]).encode())
    os._exit(0)
os.close(w)
print(os.read(r, 1000).decode())
"""


def _forked(how: str) -> tuple[int, bool, int]:
    """(bytes prefault did, whether the memory still hashes the same, faults of writing each
    of 4,096 inherited pages once) in a forked child."""
    out = subprocess.run([sys.executable, "-c", _FORKED, how], cwd=ROOT, check=True,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout  # fmt: skip
    done, same, faults = json.loads(out)
    return int(done), bool(same), int(faults)


def _kernel_has_populate() -> bool:
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return (major, minor) >= (5, 14)


#: For the tests that need the copy to happen (tests/test_e2e_serve.py too).
requires_populate = pytest.mark.skipif(not _kernel_has_populate(),
                                       reason="MADV_POPULATE_WRITE is Linux 5.14+")  # fmt: skip


@requires_populate
def test_the_pages_are_copied_before_the_link_writes_them_and_stay_the_same() -> None:
    """Without it, every inherited page costs a fault at its first write; with it, none do,
    and no byte of the memory changed."""
    _, _, unprepared = _forked("none")
    assert unprepared >= 4096
    done, same, faults = _forked("copy")
    assert done >= 4096 * 4096 and same
    assert faults < 100


@requires_populate
def test_in_the_background_it_copies_from_a_thread_of_the_idle_class() -> None:
    """The spare's copy runs in a SCHED_IDLE thread (it must not take a processor from the
    LLD that is finishing the last link); the pages are copied all the same."""
    done, same, faults = _forked("background")
    assert done == 4096 * 4096, f"policies seen: {-done}"
    assert same and faults < 100


def test_in_the_background_a_waiting_connection_stops_it() -> None:
    _, same, faults = _forked("stopped")
    assert same and faults >= 4096


def test_a_waiting_connection_stops_it_at_once() -> None:
    done, same, faults = _forked("waiting")
    assert done == 0 and same and faults >= 4096


def test_a_kernel_that_refuses_leaves_everything_as_it_was() -> None:
    """An unknown advice (a kernel before 5.14) fails each mapping quietly: nothing done,
    nothing raised."""
    done, same, faults = _forked("refused")
    assert done == 0 and same and faults >= 4096
