"""Work split across forked copies of this process, for the per-job parts of a large link.

A full hit of a few thousand jobs spends most of its time in per-job work that is
independent from job to job: decoding shards, hashing and placing objects. LLD waits idle
meanwhile, so on a machine with a spare core a second process halves that time. Plain fork
and a pipe per worker: no pool, no imports, no pickling of code; each worker takes every
``workers``-th item and sends back its results marshalled (the interpreter's own serializer,
built in: json would cost the link ~7 ms of imports, re and enum with it). A worker that
fails, dies or sends something unreadable leaves its share to be done here, so the result
never depends on the workers.

The work given to workers must not use a database connection this process opened (sqlite
connections must not cross a fork): file and CPU work only, results handled by the caller.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, TypeVar

    R = TypeVar("R")


def workers_for(count: int, least: int, available: int) -> int:
    """How many processes to split ``count`` items over, each worth forking for: at least
    ``least`` items each (a fork and a worker's results cost a few milliseconds), at most
    ``available`` (the CPUs the link may use)."""
    return max(1, min(available, count // least))


def split(
    work: Callable[[Sequence[int]], list[R]],
    count: int,
    workers: int,
    revive: Callable[[Any], R],
    extra: Callable[[], object] | None = None,
    take_extra: Callable[[Any], None] | None = None,
) -> list[R]:
    """``work`` over the indices ``range(count)``, split across ``workers`` processes (this
    one included); returns the results in index order.

    ``work(indices)`` returns one result per index, made of what marshal carries (str, int,
    float, bool, None, lists and tuples of them); ``revive`` turns one that came back from a
    worker into the result (raising ValueError or TypeError if it is not one). A
    worker also sends back ``extra()`` (what it learned on the way), handed to ``take_extra``
    here.
    """
    import marshal

    shares = [list(range(w, count, workers)) for w in range(workers)]
    results: list[R | None] = [None] * count
    children: list[tuple[int, int, list[int]]] = []
    try:
        for share in shares[1:]:
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child
                try:
                    os.close(read_fd)
                    done = work(share)
                    out = marshal.dumps([done, extra() if extra is not None else None])
                    with os.fdopen(write_fd, "wb") as pipe:
                        pipe.write(out)
                finally:
                    os._exit(0)
            os.close(write_fd)
            children.append((pid, read_fd, share))
        for i, value in zip(shares[0], work(shares[0]), strict=True):
            results[i] = value
        while children:
            pid, read_fd, share = children.pop(0)
            with os.fdopen(read_fd, "rb") as pipe:
                raw = pipe.read()
            os.waitpid(pid, 0)
            try:
                sent, learned = marshal.loads(raw)
                done = [revive(value) for value in sent]
                if len(done) != len(share):
                    raise ValueError("a worker sent too few results")
                if take_extra is not None:
                    take_extra(learned)
            except (ValueError, TypeError, IndexError, KeyError, EOFError):
                done = work(share)
            for i, value in zip(share, done, strict=True):
                results[i] = value
    finally:
        for pid, read_fd, _ in children:  # only when this process failed: do not wait long
            os.close(read_fd)
            os.waitpid(pid, 0)
    return results  # type: ignore[return-value]
