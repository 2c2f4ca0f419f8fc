"""The spare child's warm-up: the copy-on-write faults a link would take, taken ahead."""

import os
import platform
import resource

import pytest

from cached_dist.serve.spare import prefault


def _kernel() -> tuple[int, ...]:
    return tuple(int(p) for p in platform.release().split("-")[0].split(".")[:2])


def faults_writing(data: list[bytearray], warm: bool) -> int:
    """Page faults a forked child takes writing a byte of each buffer (after prefault())."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            if warm:
                prefault()
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for buffer in data:
                buffer[0] = 1
            after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            os.write(write_fd, str(after - before).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        count = int(pipe.read())
    os.waitpid(pid, 0)
    return count


@pytest.mark.skipif(_kernel() < (5, 14), reason="MADV_POPULATE_WRITE is Linux 5.14+")
def test_a_warmed_up_child_writes_its_parent_s_memory_without_faults() -> None:
    data = [bytearray(4096) for _ in range(2000)]  # ~8 MB shared with the child at fork
    cold = faults_writing(data, warm=False)
    warmed = faults_writing(data, warm=True)
    assert cold > 1000  # a fault for (almost) every page written
    assert warmed < cold / 10


def test_prefault_changes_nothing_a_process_can_see() -> None:
    data = [bytearray(range(256)) * 16 for _ in range(100)]
    snapshot = [bytes(b) for b in data]
    prefault()
    assert [bytes(b) for b in data] == snapshot
