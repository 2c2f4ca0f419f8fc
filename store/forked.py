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

import contextlib
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
    shares = [list(range(w, count, workers)) for w in range(workers)]
    results: list[R | None] = [None] * count
    started: list[tuple[Worker | None, list[int]]] = []
    try:
        for share in shares[1:]:
            started.append((start(_on(work, share), extra), share))
        for i, value in zip(shares[0], work(shares[0]), strict=True):
            results[i] = value
        for worker, share in started:
            done = worker.collect(revive, take_extra, len(share)) if worker is not None else None
            if done is None:
                done = work(share)  # the worker failed: its share is done here
            for i, value in zip(share, done, strict=True):
                results[i] = value
    finally:
        for worker, _ in started:  # only when this process failed
            if worker is not None:
                worker.cancel()
    return results  # type: ignore[return-value]


def _on(work: Callable[[Sequence[int]], list[R]], share: list[int]) -> Callable[[], list[R]]:
    return lambda: work(share)


class Worker:
    """A forked copy of this process doing some work (:func:`start`)."""

    def __init__(self, pid: int, read_fd: int, pidfd: int, first: bool = False) -> None:
        self.pid = pid
        self.read_fd = read_fd
        self.pidfd = pidfd  # signals go through it: the pid alone may be another's by then
        self._first = first  # a first message is on its way (start's ``first``), not read yet
        self._failed = False  # the first message did not come whole
        self._collected = False  # all it sent is read: it ends by itself

    def first(self) -> Any:
        """Waits for what the worker sent first (start's ``first``), unmarshalled; None if
        it sent none, or it failed, died or sent something unreadable (:meth:`collect` then
        says None too). Only once, and before :meth:`collect`."""
        import marshal

        if not self._first or self.read_fd < 0:
            return None
        self._first = False
        head = _read_exact(self.read_fd, _LENGTH)
        body = _read_exact(self.read_fd, int.from_bytes(head, "little")) if head else None
        if body is None:
            self._failed = True
            return None
        try:
            return marshal.loads(body)
        except (ValueError, TypeError, EOFError):
            return None

    def collect(
        self, revive: Callable[[Any], R], take_extra: Callable[[Any], None] | None = None,
        count: int | None = None,
    ) -> list[R] | None:  # fmt: skip
        """Waits for the worker's results, each through ``revive``; None if it failed, died
        or sent something unreadable, or not ``count`` results. Only then is what it learned
        handed to ``take_extra``. The worker is not waited for to end (~0.5 ms of a large
        link): :meth:`cancel` does that."""
        import marshal

        with os.fdopen(self.read_fd, "rb") as pipe:
            self.read_fd = -1
            raw = pipe.read()
        self._collected = True
        if self._first:  # a first message nobody asked for
            self._first = False
            size = int.from_bytes(raw[:_LENGTH], "little")
            raw = raw[_LENGTH + size :] if len(raw) >= _LENGTH + size else b""
        if self._failed:
            return None
        try:
            sent, learned = marshal.loads(raw)
            done = [revive(value) for value in sent]
            if count is not None and len(done) != count:
                return None
            if take_extra is not None:
                take_extra(learned)
        except (ValueError, TypeError, IndexError, KeyError, EOFError):
            return None
        return done

    def cancel(self) -> None:
        """Stops the worker, if its results were not collected: it only reads and computes;
        then waits for it to end."""
        if self.pidfd >= 0 and not self._collected:
            import signal

            with contextlib.suppress(OSError):  # gone already
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        self._reap()

    def _reap(self) -> None:
        if self.pid:
            with contextlib.suppress(ChildProcessError):  # SIGCHLD ignored: reaped already
                os.waitpid(self.pid, 0)
            self.pid = 0
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


def start(
    work: Callable[[], list[Any]], extra: Callable[[], object] | None = None,
    first: Callable[[], Any] | None = None,
) -> Worker | None:  # fmt: skip
    """``work()`` in a forked copy of this process, which sends back its results and
    ``extra()`` marshalled (see :func:`split`); None if no process can be forked now.
    ``first()``, if given, is worked out and sent before ``work()`` begins, for
    :meth:`Worker.first` to take while the worker goes on.

    The worker's standard streams are /dev/null and it keeps no other descriptor of this
    process: should this process be killed, it holds nothing open of anyone's (a build's
    output pipes, a client's socket) while it finishes."""
    import marshal

    try:
        read_fd, write_fd = os.pipe()
    except OSError:
        return None
    if first is not None:  # room for it all (a 3,000-module link's ~0.4 MB): no wait to send
        import fcntl

        with contextlib.suppress(OSError):  # past /proc/sys/fs/pipe-max-size: the default
            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            keep = os.dup2(write_fd, 3)
            os.closerange(4, 1 << 20)  # close_range(2): one call
            with os.fdopen(keep, "wb") as pipe:
                if first is not None:
                    head = marshal.dumps(first())
                    pipe.write(len(head).to_bytes(_LENGTH, "little") + head)
                    pipe.flush()
                done = work()
                pipe.write(marshal.dumps([done, extra() if extra is not None else None]))
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # it has ended (and, SIGCHLD ignored, been reaped): nothing to signal
        pidfd = -1
    return Worker(pid, read_fd, pidfd, first is not None)


_LENGTH = 8  # bytes of a first message's length, before it
_PIPE_SIZE = 1 << 20


def _read_exact(fd: int, size: int) -> bytes | None:
    """``size`` bytes from ``fd``, None if it ends first."""
    parts, left = [], size
    while left > 0:
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)
