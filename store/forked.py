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

from .fsutil import write_all

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
    """A forked copy of this process doing some work (:func:`start`). What it sends comes in
    messages (a length, then the marshalled value): its first message, if asked for, its
    results, and its answer to an order, if it takes orders."""

    def __init__(self, pid: int, read_fd: int, pidfd: int, first: bool = False,
                 order_fd: int = -1) -> None:  # fmt: skip
        self.pid = pid
        self.read_fd = read_fd
        self.order_fd = order_fd  # where orders go (start's ``then``), -1 if it takes none
        self.pidfd = pidfd  # signals go through it: the pid alone may be another's by then
        self._first = first  # a first message is on its way (start's ``first``), not read yet
        self._failed = False  # a message did not come whole: nothing more will
        self._busy = True  # it works on something whose result is not read yet

    def first(self) -> Any:
        """Waits for what the worker sent first (start's ``first``), unmarshalled; None if
        it sent none, or it failed, died or sent something unreadable (:meth:`collect` then
        says None too). Only once, and before :meth:`collect`."""
        if not self._first:
            return None
        self._first = False
        return self._receive()

    def collect(
        self, revive: Callable[[Any], R], take_extra: Callable[[Any], None] | None = None,
        count: int | None = None,
    ) -> list[R] | None:  # fmt: skip
        """Waits for the worker's results, each through ``revive``; None if it failed, died
        or sent something unreadable, or not ``count`` results. Only then is what it learned
        handed to ``take_extra``. The worker is not waited for to end (~0.5 ms of a large
        link): :meth:`cancel` does that."""
        if self._first:  # a first message nobody asked for
            self.first()
        message = self._receive()
        self._busy = False
        try:
            sent, learned = message
            done = [revive(value) for value in sent]
            if count is not None and len(done) != count:
                return None
            if take_extra is not None:
                take_extra(learned)
        except (ValueError, TypeError, IndexError, KeyError):
            self._failed = True
            return None
        return done

    def order(self, value: Any) -> bool:
        """Gives a worker whose results were collected the order start's ``then`` carries out
        (marshalled); False if it takes none, failed or cannot be told, then the caller does
        that work itself. :meth:`answer` waits for what it gives back."""
        import marshal

        if self.order_fd < 0 or self._busy or self._failed:
            return False
        self._busy = True
        try:
            _write_message(self.order_fd, marshal.dumps(value))
        except (OSError, ValueError):
            self._failed = True
            return False
        finally:
            os.close(self.order_fd)  # one order: the worker ends after it
            self.order_fd = -1
        return True

    def answer(self) -> Any:
        """What ``then`` gave back for the :meth:`order`, unmarshalled; None if the worker
        failed, died or sent something unreadable."""
        value = self._receive()
        self._busy = False
        return value

    def cancel(self) -> None:
        """Stops the worker if something it works on was not read (it only reads and
        computes, or carries out an order whose answer nobody waits for); then waits for it
        to end."""
        if self.order_fd >= 0:  # no order: it ends once its results are sent
            os.close(self.order_fd)
            self.order_fd = -1
        if self.pidfd >= 0 and self._busy:
            import signal

            with contextlib.suppress(OSError):  # gone already
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        self._reap()

    def _receive(self) -> Any:
        """The next message, unmarshalled; None (and nothing more to read) if it did not
        come whole or cannot be read."""
        import marshal

        if self._failed or self.read_fd < 0:
            return None
        body = _read_message(self.read_fd)
        if body is None:
            self._failed = True
            return None
        try:
            return marshal.loads(body)
        except (ValueError, TypeError, EOFError):
            return None

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
    first: Callable[[], Any] | None = None, then: Callable[[Any], Any] | None = None,
) -> Worker | None:  # fmt: skip
    """``work()`` in a forked copy of this process, which sends back its results and
    ``extra()`` marshalled (see :func:`split`); None if no process can be forked now.
    ``first()``, if given, is worked out and sent before ``work()`` begins, for
    :meth:`Worker.first` to take while the worker goes on. With ``then``, the worker then
    waits for one :meth:`Worker.order` and sends back ``then(order)`` (for
    :meth:`Worker.answer`); it ends when it gets none.

    The worker's standard streams are /dev/null and it keeps no other descriptor of this
    process: should this process be killed, it holds nothing open of anyone's (a build's
    output pipes, a client's socket) while it finishes."""
    import marshal

    pipes: list[int] = []
    try:
        read_fd, write_fd = os.pipe()
        pipes += [read_fd, write_fd]
        orders_in, orders_out = os.pipe() if then is not None else (-1, -1)
        pipes += [orders_in, orders_out]
    except OSError:
        for fd in pipes:
            if fd >= 0:
                os.close(fd)
        return None
    if first is not None or then is not None:  # room for a large link's messages: no wait
        import fcntl

        for fd in (write_fd, orders_out):
            with contextlib.suppress(OSError):  # past /proc/sys/fs/pipe-max-size: the default
                if fd >= 0:
                    fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    try:
        pid = os.fork()
    except OSError:
        for fd in pipes:
            if fd >= 0:
                os.close(fd)
        return None
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            out = os.dup2(write_fd, 3)
            orders = os.dup2(orders_in, 4) if then is not None else -1
            os.closerange(5 if then is not None else 4, 1 << 20)  # close_range(2): one call
            if first is not None:
                _write_message(out, marshal.dumps(first()))
            done = work()
            _write_message(out, marshal.dumps([done, extra() if extra is not None else None]))
            if then is not None:
                order = _read_message(orders)
                if order is not None:
                    _write_message(out, marshal.dumps(then(marshal.loads(order))))
        finally:
            os._exit(0)
    os.close(write_fd)
    if then is not None:
        os.close(orders_in)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # it has ended (and, SIGCHLD ignored, been reaped): nothing to signal
        pidfd = -1
    return Worker(pid, read_fd, pidfd, first is not None, orders_out)


_LENGTH = 8  # bytes of a message's length, before it
_PIPE_SIZE = 1 << 20


def _write_message(fd: int, body: bytes) -> None:
    write_all(fd, len(body).to_bytes(_LENGTH, "little") + body)


def _read_message(fd: int) -> bytes | None:
    """The next message's bytes on ``fd``, None if it ends first."""
    head = _read_exact(fd, _LENGTH)
    return None if head is None else _read_exact(fd, int.from_bytes(head, "little"))


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
