"""Work done in a forked copy of this process: a served link's early worker and its standby.

A warm server's child decodes most of a large link's per-link shards in a worker while it
checks the job file and opens the store, and has the worker place half of the hits' outputs
after the commit (cached_dist/serve/early.py, store/placing.py). Plain fork and a pipe per
worker: no pool, no imports, no pickling of code; the worker sends back its results
marshalled (the interpreter's own serializer, built in: json would cost the link ~7 ms of
imports, re and enum with it). A worker that fails, dies or sends something unreadable
leaves its work to be done here, so the result never depends on the worker.

A :func:`standby` is such a worker forked before its work is known (a warm server's spare
forks the early worker of the link it will serve): told what to do, it works as a started
one. A process waiting for a worker's message gives up on a stopped one.

The work given to workers must not use a database connection this process opened (sqlite
connections must not cross a fork): file and CPU work only, results handled by the caller.
"""

from __future__ import annotations

import contextlib
import os

from . import proc_stat, write_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    R = TypeVar("R")
    #: What a standby worker is to do: ``start``'s work, extra, first and then.
    Plan = tuple[Callable[[], list[Any]], Callable[[], object] | None,
                 Callable[[], Any] | None, Callable[[Any], Any] | None]  # fmt: skip


STOPPED_CHECK = 0.1  # seconds between looks at whether a silent worker is stopped


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
        computes, or carries out an order whose answer nobody waits for) or it failed; then
        waits for it to end."""
        if self.order_fd >= 0:  # no order: it ends once its results are sent
            os.close(self.order_fd)
            self.order_fd = -1
        if self.pidfd >= 0 and (self._busy or self._failed):  # failed: perhaps stopped
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
        if not self._wait_readable():
            self._failed = True
            return None
        body = _read_message(self.read_fd)
        if body is None:
            self._failed = True
            return None
        try:
            return marshal.loads(body)
        except (ValueError, TypeError, EOFError):
            return None

    def _wait_readable(self) -> bool:
        """Waits until the worker has sent something (or ended); False if it is stopped
        meanwhile (SIGSTOP, a debugger): this process then does its work rather than wait for
        it forever. A standby (:func:`standby`) lives between links, where anyone may stop it."""
        import select

        while True:
            try:
                if select.select([self.read_fd], [], [], STOPPED_CHECK)[0]:
                    return True
            except InterruptedError:
                continue
            except (OSError, ValueError):
                return True  # the read says what is wrong
            if _stopped(self.pid):
                return False

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
    """``work()`` in a forked copy of this process, which sends back its results (made of
    what marshal carries: str, int, float, bool, None, lists and tuples of them) and
    ``extra()`` (what it learned on the way), marshalled; None if no process can be forked
    now. :meth:`Worker.collect` turns each result back into one.
    ``first()``, if given, is worked out and sent before ``work()`` begins, for
    :meth:`Worker.first` to take while the worker goes on. With ``then``, the worker then
    waits for one :meth:`Worker.order` and sends back ``then(order)`` (for
    :meth:`Worker.answer`); it ends when it gets none.

    The worker's standard streams are /dev/null and it keeps no other descriptor of this
    process: should this process be killed, it holds nothing open of anyone's (a build's
    output pipes, a client's socket) while it finishes."""
    forked = _fork(first is not None or then is not None, then is not None, False)
    if forked is None:
        return None
    if forked[0] == 0:  # pragma: no cover - runs in the child
        try:
            _, out, orders, _ = forked
            _serve(out, orders, (work, extra, first, then))
        finally:
            os._exit(0)
    pid, read_fd, orders_out, _ = forked
    return Worker(pid, read_fd, _pidfd(pid), first is not None, orders_out)


class Standby:
    """A worker forked before its work is known (:func:`standby`): :meth:`go` tells it what
    to do, after which :attr:`worker` reads what it sends, as :func:`start`'s would."""

    def __init__(self, worker: Worker, go_fd: int) -> None:
        self.worker = worker
        self.go_fd = go_fd
        self.told = False  # it was sent its message whole

    def go(self, message: Any) -> bool:
        """Sends it ``message`` (marshalled), once; False if it cannot be told (it is gone)."""
        import marshal

        if self.go_fd < 0:
            return False
        try:
            _write_message(self.go_fd, marshal.dumps(message))
            self.told = True
        except (OSError, ValueError):
            pass
        finally:
            os.close(self.go_fd)
            self.go_fd = -1
        return self.told

    def cancel(self) -> None:
        """Ends it, told or not (see :meth:`Worker.cancel`)."""
        if self.go_fd >= 0:  # never told: it ends at the end of its message pipe
            os.close(self.go_fd)
            self.go_fd = -1
        self.worker.cancel()


def standby(
    plan: Callable[[Any], Plan | None], wait: Callable[[Callable[[], bool]], object],
    first: bool, then: bool,
) -> Standby | None:  # fmt: skip
    """Forks a worker ahead of the work it will do; None if no process can be forked now. It
    first runs ``wait(told)`` (work worth doing while it waits, which stops once ``told()``),
    then waits for :meth:`Standby.go`'s message and does what ``plan(message)`` gives as
    :func:`start`'s worker would. ``first`` and ``then`` say whether the plans send a first
    message and take an order; a plan that does not, or None, or no message (the standby
    closed, this process gone) ends it without a word, which the Worker reads as a failure."""
    forked = _fork(True, then, True)
    if forked is None:
        return None
    if forked[0] == 0:  # pragma: no cover - runs in the child
        try:
            _, out, orders, go_fd = forked
            import marshal
            import select

            wait(lambda: bool(select.select([go_fd], [], [], 0)[0]))
            message = _read_message(go_fd)
            planned = plan(marshal.loads(message)) if message is not None else None
            if (
                planned is not None
                and (planned[2] is not None) == first
                and (planned[3] is not None) == then
            ):
                _serve(out, orders, planned)
        finally:
            os._exit(0)
    pid, read_fd, orders_out, go_fd = forked
    return Standby(Worker(pid, read_fd, _pidfd(pid), first, orders_out), go_fd)


def _fork(large: bool, orders: bool, told: bool) -> tuple[int, int, int, int] | None:
    """Forks a worker with its pipes: its results (room for ``large`` messages), its orders
    if asked, and its message if ``told``. In the worker: (0, results, orders, message) as
    its descriptors 3, 4 and 5 (-1 for those not asked for), with /dev/null as its standard
    streams and no other descriptor; here: (pid, results, orders, message), the ends to
    read and to write, with the worker's ends closed. None if it cannot be forked."""
    pipes: list[int] = []
    try:
        read_fd, write_fd = os.pipe()
        pipes += [read_fd, write_fd]
        orders_in, orders_out = os.pipe() if orders else (-1, -1)
        pipes += [orders_in, orders_out]
        go_in, go_out = os.pipe() if told else (-1, -1)
        pipes += [go_in, go_out]
    except OSError:
        for fd in pipes:
            if fd >= 0:
                os.close(fd)
        return None
    if large or told:  # room for a large link's messages: no wait
        import fcntl

        for fd in (write_fd, orders_out, go_out):
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
            kept = _detach([write_fd, orders_in, go_in])
        except BaseException:
            os._exit(0)
        return 0, kept[0], kept[1], kept[2]
    for fd in (write_fd, orders_in, go_in):
        if fd >= 0:
            os.close(fd)
    return pid, read_fd, orders_out, go_out


def _detach(keep: list[int]) -> list[int]:
    """In a forked worker: /dev/null as the standard streams, ``keep`` (-1: none) as the
    descriptors 3, 4... and no other descriptor open."""
    import fcntl

    top = 3 + len(keep)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, top) if fd >= 0 else -1 for fd in keep]
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    kept = [os.dup2(fd, 3 + n) if fd >= 0 else -1 for n, fd in enumerate(high)]
    for n, fd in enumerate(kept):
        if fd < 0:
            with contextlib.suppress(OSError):  # whatever this process had there
                os.close(3 + n)
    os.closerange(top, 1 << 20)  # close_range(2): one call
    return kept


def _serve(out: int, orders: int, plan: Plan) -> None:
    """A worker's life once it knows its work: its first message, its results, then its
    answer to an order if it takes one."""
    import marshal

    work, extra, first, then = plan
    if first is not None:
        _write_message(out, marshal.dumps(first()))
    done = work()
    _write_message(out, marshal.dumps([done, extra() if extra is not None else None]))
    if then is not None:
        order = _read_message(orders)
        if order is not None:
            _write_message(out, marshal.dumps(then(marshal.loads(order))))


def _pidfd(pid: int) -> int:
    try:
        return os.pidfd_open(pid)
    except OSError:  # it has ended (and, SIGCHLD ignored, been reaped): nothing to signal
        return -1


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped or traced (its state in /proc, T or t)."""
    try:
        state = proc_stat(pid)[:1]
    except OSError:
        return False  # gone: its pipe says so
    return state in ([b"T"], [b"t"])


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
