"""``cached-dist serve``: keeps a full hit's imports warm and a child ready for the next link.

The parent only keeps one forked child, the spare, waiting in ``accept``: a fork, and the
pages the child first writes after it, cost milliseconds, which the spare pays between
links rather than in one (it copies the pages it shares with the parent while it waits:
:mod:`.prefault`). The spare that takes a connection tells the parent (which forks the next
spare once that link is over, its linker too, or at once if another connection waits; see
:func:`_linger`), checks the peer is the same user and that no module the server imported
changed on disk since it started (else it hands the link back and the server exits). The
child becomes the client's process in all that a link can see (standard streams, working
directory, environment, umask, signal dispositions), provided the client shares its mount
namespace and root, and runs the ordinary link code with a :class:`Handoff`: a full hit (from
the local store, or with the remote tiers) is served, anything else handed back before any
output is written (see client.c).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import select
import shutil  # here, not in each child: ~3 ms
import signal
import socket
import struct
import sys

from ..errors import UsageError
from . import default_socket
from .handoff import FallBack, Handoff
from .prefault import in_background

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from procs.forked import Standby

    from ..log import Log

#: What a full hit imports (tests/test_hot_path.py keeps that list short); a child imports
#: anything else itself. Nothing here may read the environment when imported: a child runs
#: with its client's.
PRELOAD = (
    "cached_dist.cli", "cached_dist.link.flow", "cached_dist.link.cached",
    "cached_dist.link.summary", "cached_dist.link.writes", "cached_dist.jobfile",
    "cached_dist.jobfile.checks", "cached_dist.keys.compute", "cached_dist.keys.key",
    "cached_dist.keys.shard_key", "cached_dist.keys.digests", "cached_dist.keys.toolchain",
    "cached_dist.keys.side_outputs", "cached_dist.bitcode.native", "store", "store.store",
    "store.blobs", "store.rows", "store.tally", "store.manifest", "store.fsutil",
    "store.index", "store.jsonload", "store.problems", "procs.forked", "store.placing",
    "store.pack", "store.zstd", "cached_dist.jobfile.writes", "cached_dist.serve.early",
    # A link with --remote-storage: threading, then the URLs' parsing (~4.5 ms); and what a
    # full hit fetched from a remote tier takes: its client (a host name's codec), the
    # entries' decoding, the index asked for what the row files do not hold, the promotion
    # written behind the link.
    "cached_dist.link.tiers", "store.remote", "urllib.parse", "store.entry",
    "store.remote.redis", "store.remote.resp", "store.remote.http", "store.remote.shards",
    "store.remote.reapi", "store.remote.reapi_lookup", "encodings.idna", "store.dbopen",
    "store.behind", "procs.detached",
)  # fmt: skip
REQUEST_TIMEOUT = 5.0  # seconds a connected client has to send its request
HEADER = struct.Struct("<4sI")
MAGIC = b"CDS1"
MAX_PAYLOAD = 8 << 20  # as client.c
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD,
              signal.SIGPIPE)  # fmt: skip
# What a spare tells the server, one byte: it took a connection (fork the next spare), or
# it found the server's code changed on disk (exit). After a link it took, one more: whether
# that link had an early worker, which the next spare then forks ahead (see _standby).
_TOOK, _CHANGED, _WANTED, _UNWANTED = b"t", b"c", b"w", b"u"
ORPHAN_CHECK = 1.0  # seconds between a waiting spare's checks that the server still runs
#: Longest a child that served a link waits for the linker to exit (see _linger): past it,
#: the server forks the next spare even if the linker is still at work.
LINGER = 2.0
_JOB_FILE_SUFFIX = ".dist-file.json"  # LLD names its job file OUTPUT.PID.dist-file.json
_ANCESTRY = 8  # how far up from the client the linker may be (wrappers in between)
FORK_RETRY = 1.0  # seconds between attempts to fork a spare while forks fail


class Server:
    """One listening socket; :meth:`run` until a signal, or ``idle_exit`` seconds without a
    link (0: never)."""

    def __init__(self, path: str, idle_exit: float, log: Log) -> None:
        self.path = path
        self.idle_exit = idle_exit
        self.log = log
        self.listener: socket.socket | None = None
        self.lock_fd = -1
        self.stamps: list[tuple[str, int, int]] = []
        # A child restores what a process of its own would start with.
        self.dispositions: dict[int, Any] = {s: signal.getsignal(s) for s in _FORWARDED}
        # Whom the server stands in for: links meant for another cached-dist (another
        # install, another version) are handed back, as are those whose interpreter would
        # run differently (PYTHONPATH, PYTHONIOENCODING...).
        self.identity = Identity(os.path.realpath(sys.argv[0]), _python_settings(os.environ))
        self.log_fd = -1  # the server's own stderr, for a child's --verbose line
        self.bound = -1  # the socket file's inode
        self.pid = os.getpid()
        self.spare = -1  # the waiting child's pid
        self.report = -1  # the pipe it reports on
        self.taken = -1  # that of the spare that took the last link, for its second word
        self.standby_wanted = False  # the last link had an early worker: fork it ahead
        self.cannot_fork = False  # the last attempt failed (and said so)

    def run(self) -> int:
        import importlib

        for name in PRELOAD:
            importlib.import_module(name)
        from store import zstd

        zstd.preload()  # the C backend a hit on a compressed blob needs (~1 ms): once, here
        self.stamps = _stamps()
        _own_environment()
        # What is loaded now stays as it is: out of the collector's sight, a child's
        # collections do not write to (and so copy) every page of it (~1.5 ms of a link).
        gc.freeze()
        self.listener = self._listen()
        _say_pid(self.lock_fd)
        self.log_fd = os.dup(2)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGHUP, _stop)
        self.log.info(f"serving on {self.path} (pid {os.getpid()})")
        try:
            while True:
                if not self._fork_spare():
                    self._without_spare()
                    continue
                serving = self.spare
                said = self._wait(self.idle_exit or None)
                if said == _CHANGED:
                    self.log.warn("cached-dist changed on disk since this server started: "
                                  "exiting (start it again)")  # fmt: skip
                    return 0
                if said is None:
                    self.log.info(f"no link for {self.idle_exit:g} s: exiting")
                    return 0
                if said == _TOOK:
                    self._while_serving(serving)
                else:  # the spare died unasked (killed): no fork storm
                    import time

                    time.sleep(0.1)
        except KeyboardInterrupt:
            return 0
        finally:
            self._end_spare()
            self._forget_taken()
            self._close()

    def _fork_spare(self) -> bool:
        """Forks the next spare, which reports on ``self.report``; False if it cannot be
        (said once for a run of failures)."""
        pipe: tuple[int, int] | None = None
        try:
            pipe = report, tell = os.pipe()
            child = os.fork()
        except OSError as e:
            for fd in pipe or ():
                os.close(fd)
            if not self.cannot_fork:
                self.log.warn(f"cannot fork a child for a link: {e.strerror}")
            self.cannot_fork = True
            return False
        self.cannot_fork = False
        if child == 0:
            os.close(report)
            self._spare(tell)
        os.close(tell)
        self.spare, self.report = child, report
        return True

    def _wait(self, timeout: float | None) -> bytes | None:
        """What the spare said (b"" if it died without a word), after which it is no longer
        the spare; None after ``timeout`` seconds of silence (None: no limit)."""
        while True:
            try:
                ready, _, _ = select.select([self.report], [], [], timeout)
            except InterruptedError:
                continue
            if not ready:
                return None
            said = os.read(self.report, 1)
            if said == _TOOK:  # its second word comes after the link (_learn)
                self._forget_taken()
                self.taken = self.report
            else:
                os.close(self.report)
            self.spare = self.report = -1
            return said

    def _learn(self) -> None:
        """Takes, without waiting, the second word of the spare that took the last link:
        whether that link had an early worker (the next spares fork one ahead if so). Not
        said yet (another link came meanwhile), it is read after the next one, or never."""
        if self.taken < 0:
            return
        try:
            os.set_blocking(self.taken, False)
            word = os.read(self.taken, 1)
        except BlockingIOError:
            return
        except OSError:
            word = b""
        if word in (_WANTED, _UNWANTED):
            self.standby_wanted = word == _WANTED
        self._forget_taken()

    def _forget_taken(self) -> None:
        if self.taken >= 0:
            os.close(self.taken)
            self.taken = -1

    def _while_serving(self, child: int) -> None:
        """Forks the next spare only once ``child`` ends (after its link's linker, see
        _linger), or another link comes meanwhile: the fork and the new spare's first writes
        take ~1 ms of the processors that the link's own processes use (this machine may
        have two)."""
        try:
            done = os.pidfd_open(child)
        except (OSError, AttributeError):  # gone already, or no pidfd (Linux < 5.3)
            self._learn()
            return
        assert self.listener is not None
        try:
            while True:
                try:
                    select.select([done, self.listener.fileno()], [], [])
                    break
                except InterruptedError:
                    continue
        finally:
            os.close(done)
        self._learn()

    def _end_spare(self) -> None:
        """Ends the spare if it still waits; one that took a link finishes it."""
        if self.spare <= 0:
            return
        with contextlib.suppress(OSError, ValueError):  # a signal came as _wait read
            if self._wait(0) is None:
                os.kill(self.spare, signal.SIGTERM)
                os.close(self.report)
        self.spare = self.report = -1

    def _without_spare(self) -> None:
        """No child can be forked now: a connection that comes meanwhile is closed unserved
        (its client links by itself at once, rather than after waiting 2 s for a child),
        and the fork is tried again within FORK_RETRY seconds."""
        assert self.listener is not None
        try:
            ready, _, _ = select.select([self.listener], [], [], FORK_RETRY)
        except InterruptedError:
            return
        if ready:
            with contextlib.suppress(OSError):
                self.listener.accept()[0].close()

    def _spare(self, tell: int) -> NoReturn:
        """A spare's life: waits for a connection, tells the server, serves the link."""
        try:
            os.close(self.lock_fd)  # the server's alone: a new one may start when it ends
            self.lock_fd = -1
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)  # the server ends a spare with SIGTERM
            assert self.listener is not None
            listener = self.listener
            # First: then each process copies its own pages. Only after a link that had an
            # early worker: a smaller one would pay for it (~0.7 ms of a lua link).
            standby = _standby() if self.standby_wanted else None
            stop = in_background(lambda: _readable(listener))  # the pages its link would copy
            conn = self._accept(listener)
            stop()
            if conn is None:
                os._exit(0)
            pid, uid = _peer(conn)
            if uid != os.getuid():
                os.write(tell, _TOOK)
                os._exit(0)  # the client warns and links by itself
            if _changed(self.stamps):
                os.write(tell, _CHANGED)
                os._exit(0)  # the connection closes unanswered: the client links by itself
            os.write(tell, _TOOK)
            self._child(conn, pid, standby, tell)
        finally:
            os._exit(0)

    def _accept(self, listener: socket.socket) -> socket.socket | None:
        """The next connection; None once the server is gone (its spare must not outlive it
        in ``accept``, holding the socket)."""
        listener.settimeout(ORPHAN_CHECK)
        failing = False
        while True:
            try:
                conn, _ = listener.accept()
            except (TimeoutError, InterruptedError):
                pass
            except OSError as e:  # out of descriptors, say: the clients link by themselves
                if not failing:  # once for a run of failures, not ten times a second
                    self.log.warn(f"cannot accept a link: {e.strerror}")
                failing = True
                import time

                time.sleep(0.1)
            else:
                conn.settimeout(None)
                return conn
            if os.getppid() != self.pid:
                return None

    def _child(
        self, conn: socket.socket, peer_pid: int, standby: Standby | None, tell: int
    ) -> NoReturn:
        try:
            assert self.listener is not None
            self.listener.close()
            for sig, disposition in self.dispositions.items():
                signal.signal(sig, disposition)
            os.setpgid(0, 0)  # not the server's: Ctrl-C on its terminal stops no link
            outcome, linker, handoff = _serve_link(conn, peer_pid, self.identity, standby)
            wanted = handoff is not None and handoff.early_started
            with contextlib.suppress(OSError):  # the server's second word from this spare
                os.write(tell, _WANTED if wanted else _UNWANTED)
            os.close(tell)
            if outcome and self.log.verbose:
                os.write(self.log_fd, f"cached-dist: {outcome}\n".encode(errors="replace"))
            if linker >= 0:
                _linger(conn, linker)
            if standby is not None:  # ended already if it was the link's early worker
                standby.cancel()  # else now, after the linker (see _linger)
        finally:
            os._exit(0)

    def _listen(self) -> socket.socket:
        directory = os.path.dirname(self.path) or "."
        if self.path == default_socket():
            _private_directory(directory)
        lock_path = self.path + ".lock"
        try:
            self.lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise UsageError(f"cannot create {lock_path}: {e.strerror}") from None
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.lock_fd)
            raise UsageError(f"a server already listens on {self.path}") from None
        _clear_stale_socket(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o177)
            try:
                listener.bind(self.path)
            finally:
                os.umask(old)
            listener.listen(128)
            self.bound = os.stat(self.path).st_ino
        except OSError as e:
            listener.close()
            raise UsageError(f"cannot listen on {self.path}: {e.strerror}") from None
        return listener

    def _close(self) -> None:
        if self.listener is not None:
            with contextlib.suppress(OSError):  # ours still, not a successor's
                if os.stat(self.path).st_ino == self.bound:
                    os.unlink(self.path)
            self.listener.close()
        if self.lock_fd >= 0:
            os.close(self.lock_fd)


#: What lies at a socket path instead of a socket, in words.
_NOT_SOCKETS = (("S_ISREG", "a regular file"), ("S_ISDIR", "a directory"),
                ("S_ISLNK", "a symbolic link"), ("S_ISFIFO", "a FIFO"),
                ("S_ISCHR", "a character device"), ("S_ISBLK", "a block device"))  # fmt: skip


def _clear_stale_socket(path: str) -> None:
    """Removes the socket a server that died left at ``path`` (the lock is ours: no server
    listens there); anything else there is someone's file, refused and left as it is."""
    import stat

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise UsageError(f"cannot listen on {path}: {e.strerror}") from None
    if not stat.S_ISSOCK(mode):
        what = next((name for test, name in _NOT_SOCKETS if getattr(stat, test)(mode)),
                    "something else")  # fmt: skip
        raise UsageError(f"cannot listen on {path}: it is {what}, not a socket; not replacing "
                         "it")  # fmt: skip
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise UsageError(f"cannot listen on {path}: {e.strerror}") from None


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _say_pid(lock_fd: int) -> None:
    """Writes this server's pid into its lock file, once it listens: what ``cached-dist
    serve --status`` and ``--stop`` read (control.py)."""
    with contextlib.suppress(OSError):  # a full disk: it serves all the same, unnamed
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)


def _private_directory(directory: str) -> None:
    """The default socket's directory: created private, and refused unless it is."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise UsageError(f"cannot create {directory}: {e.strerror}") from None
    st = os.lstat(directory)
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise UsageError(f"{directory} must be a directory of yours that only you can use "
                         "(or set CACHED_DIST_SOCKET)")  # fmt: skip


def _readable(sock: socket.socket) -> bool:
    """Whether a connection (or anything) waits on ``sock``, without waiting."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True  # look no further: accept() will say what is wrong


def _peer(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the connected client, as the kernel saw them at connect time."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", raw)
    return pid, uid


def _stamps() -> list[tuple[str, int, int]]:
    """(file, mtime, size) of every module of this program loaded now."""
    import cached_dist
    import store

    roots = tuple(os.path.dirname(os.path.abspath(p.__file__ or "")) + os.sep
                  for p in (cached_dist, store))  # fmt: skip
    found = []
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.startswith(roots):
            st = os.stat(path)
            found.append((path, st.st_mtime_ns, st.st_size))
    return found


def _changed(stamps: list[tuple[str, int, int]]) -> bool:
    for path, mtime, size in stamps:
        try:
            st = os.stat(path)
        except OSError:
            return True
        if st.st_mtime_ns != mtime or st.st_size != size:
            return True
    return False


class Identity:
    """The program a server stands in for and the interpreter settings it runs with."""

    def __init__(self, program: str, python: dict[str, str]) -> None:
        self.program = program
        self.python = python

    def differs(self, program: str, env: dict[str, str]) -> str:
        """Why a link (its CACHED_DIST, resolved in the client's directory and PATH, and its
        environment) is not for this server ("" if it is)."""
        found = program if "/" in program else shutil.which(program, path=env.get("PATH"))
        if not found or os.path.realpath(found) != self.program:
            return f"the link is for another cached-dist ({program})"
        if _python_settings(env) != self.python:
            return "the link's PYTHON* environment differs from the server's"
        return ""


def _python_settings(env: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def _standby() -> Standby | None:
    """The spare's link's early worker, forked before the link comes (procs.forked.standby):
    it copies its own pages meanwhile, and the link forks no worker then (the fork, and the
    pages both processes would copy after it, cost ~2 ms of a 301-job link). Told of the
    link's job file, it does what serve/early.py ``standby_plan`` says; a link without an
    early worker ends it. Forked only after a link that had an early worker (the child that
    served it says so, Server._learn): links that need none would pay for it."""
    from procs.forked import standby
    from store.placing import place_order

    from .early import standby_plan

    return standby(lambda message: standby_plan(message, place_order), in_background,
                   first=True, then=True)  # fmt: skip


def _serve_link(
    conn: socket.socket, peer_pid: int, identity: Identity, standby: Standby | None = None
) -> tuple[str, int, Handoff | None]:
    """The child's whole work; returns what ``--verbose`` says of it ("" for nothing), and,
    for a link it served, a pidfd of the linker that asked for it (-1 if none: see _linker);
    and the link's Handoff, if it got that far (whether it had an early worker)."""
    conn.settimeout(REQUEST_TIMEOUT)
    try:
        request = _read_request(conn)
    except (OSError, ValueError) as e:
        return f"dropped a malformed request ({e})", -1, None
    if request is None:
        return "dropped a malformed request", -1, None
    umask, ignored, program, argv, env = request
    handoff: Handoff | None = None
    fds: list[int] = []
    try:
        conn.sendall(b"A" + struct.pack("<I", os.getpid()))
        fds = _read_descriptors(conn)  # sent only now: see client.c
        conn.settimeout(None)
        why = _unservable(peer_pid, argv)
        if why:
            raise FallBack(why)
        _become(fds, env, umask, ignored)
        fds = []
        why = identity.differs(program, env)  # here: a relative path is the client's
        if why:
            raise FallBack(why)
        sys.argv = [program, *argv]
        from ..cli import main

        handoff = Handoff(conn, standby)
        try:
            status = main(argv, handoff=handoff)
        except FallBack:
            raise
        except BaseException as e:  # --debug re-raises; and SystemExit, say
            if not handoff.committed:
                raise FallBack(f"{type(e).__name__} before any output") from None
            import traceback

            traceback.print_exc()  # as the interpreter would, in a process of its own
            status = 1
        if not handoff.committed:
            raise FallBack(f"nothing served (exit status {status} before any output)")
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        linker = _linker(argv[-1], peer_pid)  # while the client, and so the linker, waits
        try:
            conn.sendall(b"S" + bytes([status & 255]))
        except OSError:
            if linker >= 0:
                os.close(linker)
            raise
        return f"served {argv[-1]} (exit status {status})", linker, handoff
    except FallBack as e:
        if handoff is not None:
            handoff.discard()
        failed = os.fsencode(e.args[1]) if len(e.args) > 1 else b""
        with contextlib.suppress(OSError):  # see client.c: "E" names remotes not to wait for
            conn.sendall(b"E" + struct.pack("<I", len(failed)) + failed if failed else b"F")
        why = e.args[0] if e.args else "not served"
        return f"handed back {argv[-1] if argv else '?'}: {why}", -1, handoff
    except (OSError, ValueError) as e:
        return f"lost the client ({e})", -1, handoff
    finally:
        for fd in fds:
            os.close(fd)


Request = tuple[int, int, str, list[str], dict[str, str]]


def _read_request(conn: socket.socket) -> Request | None:
    """(umask, ignored signals, CACHED_DIST, its arguments, environment), or None for what no
    client.c sends."""
    head = _read_exact(conn, HEADER.size)
    magic, length = HEADER.unpack(head)
    if magic != MAGIC or length > MAX_PAYLOAD:
        return None
    words = _read_exact(conn, length).split(b"\0")
    try:
        umask, ignored, count = int(words[0], 8), int(words[1]), int(words[2])
    except (ValueError, IndexError):
        return None
    if not 0 < count <= len(words) - 4 or words[-1] != b"":
        return None
    program, *argv = [os.fsdecode(w) for w in words[3 : 3 + count]]
    env = {}
    for entry in words[3 + count : -1]:
        name, eq, value = entry.partition(b"=")
        if eq and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return umask, ignored, program, argv, env


def _read_exact(conn: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = conn.recv(min(size, 1 << 20))
        if not chunk:
            raise ValueError("the client hung up")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_descriptors(conn: socket.socket) -> list[int]:
    """Standard input, output, error and the working directory, in that order."""
    tag, fds, _, _ = socket.recv_fds(conn, 1, 4)
    if tag != b"D" or len(fds) != 4:
        for fd in fds:
            os.close(fd)
        raise ValueError("no descriptors")
    return list(fds)


def _unservable(peer_pid: int, argv: list[str]) -> str:
    """Why this child cannot stand in for the client's own process ("" if it can)."""
    from ..options import SUBCOMMANDS

    if not argv or argv[0] in SUBCOMMANDS or {"-h", "--help", "--version"} & set(argv):
        return "not a link"
    try:
        for link in ("ns/mnt", "ns/pid", "root", "ns/net"):
            theirs, ours = os.stat(f"/proc/{peer_pid}/{link}"), os.stat(f"/proc/self/{link}")
            if (theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino):
                if link == "ns/net":  # 127.0.0.1:6379 there is another remote tier
                    return "the client is in another network namespace"
                return "the client sees other files (mount namespace or root)"
    except OSError:
        return "cannot tell which files the client sees"
    return ""


def _own_environment() -> None:
    """Makes the C environment ``os.environ`` exactly, once: a child then changes only the
    variables its client sets otherwise (:func:`_become`), and the programs it may run (a
    ``--compiler-check`` command, ``ldd``) get the client's environment. An inherited
    environment may name a variable twice, of which ``os.environ`` keeps one."""
    kept = dict(os.environ)
    os.environ.clear()
    os.environ.update(kept)


def _become(fds: list[int], env: dict[str, str], umask: int, ignored: int) -> None:
    """This process takes the client's streams, directory, environment, umask and ignored
    signals (a cached-dist started under nohup ignores SIGHUP too)."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):  # client.c's
        if ignored >> sig & 1:
            signal.signal(sig, signal.SIG_IGN)
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.fchdir(fds[3])
    for fd in fds:
        os.close(fd)
    # Only what differs from the server's own: each change is a putenv() (~0.5 ms for all).
    environ = os.environ
    for name in [name for name in environ if name not in env]:
        del environ[name]
    for name, value in env.items():
        if environ.get(name) != value:
            environ[name] = value
    os.umask(umask)


def _linker(job_file: str, client: int) -> int:
    """A pidfd of the linker that wrote ``job_file``, or -1: LLD names its job file
    ``OUTPUT.PID.dist-file.json``, and the process of that pid must be the client or one of
    its ancestors (a wrapper distributor may stand between them). Called before the client
    is told its link is done: until then the linker waits for it, so the pid is the linker's."""
    name = os.path.basename(job_file)
    if not name.endswith(_JOB_FILE_SUFFIX):
        return -1
    pid = name[: -len(_JOB_FILE_SUFFIX)].rpartition(".")[2]
    if not (pid.isascii() and pid.isdigit()) or not hasattr(os, "pidfd_open"):
        return -1
    linker = int(pid)
    try:
        for _ in range(_ANCESTRY):
            if client == linker:
                return os.pidfd_open(linker)
            client = _parent(client)
            if client <= 1:
                return -1
    except (OSError, ValueError, OverflowError):
        pass
    return -1


def _parent(pid: int) -> int:
    """The parent of process ``pid``; OSError if it cannot be read."""
    from procs import proc_stat

    return int(proc_stat(pid)[1])


def _linger(conn: socket.socket, linker: int) -> None:
    """Waits, up to LINGER seconds, for the linker of the link this child served to exit: the
    server forks the next spare once this child ends (at once, should another link come).
    After its distributor, the linker reads the objects and writes the program; a fork, a
    new spare's start and the exit of this child would take processors from it (two, on
    this project's machines: docs/design.md, "After the link"). Nothing of the client's is
    held meanwhile: its streams (a build tool waits for their end) and its directory."""
    try:
        conn.close()
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        os.chdir("/")
        select.select([linker], [], [], LINGER)  # retried on a signal (PEP 475)
    except OSError:
        pass
    finally:
        os.close(linker)
