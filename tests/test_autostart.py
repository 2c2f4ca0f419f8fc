"""The warm server started on first use, with real links, processes, pipes and users.

A link through the flags `cached-dist flags` prints that finds no server starts one once it
is done (cached_dist/serve/autostart.py): detached from the build, it serves the next link.
Each test runs cached-dist through a launcher of its own (a copy of bin/cached-dist that
notes every interpreter start in a file): a served link starts none, which is how these
tests know it was served; and the servers it starts are found by that launcher's path, so
that every one is stopped at the end. tests/conftest.py keeps every other test's links from
starting servers.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil
import pytest

from cached_dist.serve import CLIENT
from cached_dist.serve.autostart import may_start

from .test_cli import assert_one_line_error
from .toolchain import CLANG, Project, build, requires_toolchain, run

pytestmark = pytest.mark.skipif(not os.access(CLIENT, os.X_OK),
                                reason="the client is not built (run scripts/setup)")  # fmt: skip

#: A copy of bin/cached-dist that appends its arguments to $STARTED_LOG first.
LAUNCHER = """#!{python}
import os, sys
with open(os.environ["STARTED_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
from cached_dist.cli import run
run()
"""
WAIT = 60.0  # seconds: a generous bound for what takes well under a second


def wait_for(condition: object, what: str, bound: float = WAIT) -> None:
    deadline = time.monotonic() + bound
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {bound:g} s: {what}"
        time.sleep(0.05)


class Setup:
    """A launcher, its start log, a socket in a short private directory, and the environment
    links run with (no CACHED_DIST_NO_SERVER: conftest.py sets it for every other test)."""

    def __init__(self, where: Path, sockets: Path, python: str = sys.executable) -> None:
        self.where = where
        self.launcher = where / "bin" / "cached-dist"
        self.launcher.parent.mkdir(parents=True, exist_ok=True)
        self.launcher.write_text(LAUNCHER.format(python=python))
        self.launcher.chmod(0o755)
        self.log = where / "started.log"
        self.socket = sockets / "s.sock"
        self.env = {k: v for k, v in os.environ.items() if k != "CACHED_DIST_NO_SERVER"}
        self.env.update(CACHED_DIST_SOCKET=str(self.socket), STARTED_LOG=str(self.log))

    def command(self, *args: str, env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        return run([self.launcher, *args], self.where, env=env or self.env)

    def flags(self, *args: str) -> list[str]:
        done = self.command("flags", "--cc", str(CLANG), *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    def link(self, project: Project, flags: Sequence[str], out: str = "app", opt: str = "-O2",
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        cmd = [driver(project), opt, *project.link_inputs, "-o", out, *flags]
        return run(cmd, project.dir, env=env or self.env)

    def starts(self) -> list[str]:
        """The arguments of every interpreter this launcher started, in order."""
        return self.log.read_text().splitlines() if self.log.exists() else []

    def servers(self) -> list[psutil.Process]:
        """The servers this launcher runs now (not their children: spares, links)."""
        return servers_of(str(self.launcher))

    def status(self) -> subprocess.CompletedProcess[str]:
        return self.command("serve", "--status")


def driver(project: Project) -> str:
    return f"{CLANG}++" if project.cxx else str(CLANG)


def servers_of(launcher: str) -> list[psutil.Process]:
    found = {}
    for p in psutil.process_iter(["cmdline", "ppid"]):
        cmdline = p.info["cmdline"] or []
        if launcher in cmdline and "serve" in cmdline:
            found[p.pid] = p
    return [p for p in found.values() if p.info["ppid"] not in found]


def end_servers(launcher: str) -> None:
    """Ends whatever servers (and their children) ``launcher`` still runs."""
    procs = servers_of(launcher)
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            for q in [p, *p.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    q.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=WAIT)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory for sockets, short enough for any test's name (sun_path: 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="cd-as-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def setup(tmp_path: Path, short_dir: Path) -> Iterator[Setup]:
    s = Setup(tmp_path, short_dir)
    try:
        yield s
    finally:
        s.command("serve", "--stop")
        end_servers(str(s.launcher))


def one_server(setup: Setup) -> psutil.Process:
    (server,) = setup.servers()
    return server


@requires_toolchain
@pytest.mark.e2e
def test_the_first_link_starts_a_detached_server_that_serves_the_next(
    tmp_path: Path, setup: Setup
) -> None:
    project = build("shapes", tmp_path / "p", "thin")
    flags = setup.flags(f"--cache-dir={tmp_path / 'cache'}")
    assert flags[2:4] == [f"-fthinlto-distributor={CLIENT}",
                          f"-Xthinlto-distributor={setup.launcher}"]  # fmt: skip
    first = setup.link(project, flags)
    assert first.returncode == 0, first.stderr
    assert "4 jobs: 0 hits, 4 compiled" in first.stderr
    # Started before that link's cached-dist exited: there now, whether it listens yet or not.
    server = one_server(setup)
    assert server.cmdline()[-3:] == ["serve", "--idle-exit=600.0", "--quiet"]
    assert os.getsid(server.pid) == server.pid  # a session of its own: no terminal, no group
    assert server.cwd() == "/"
    # Only 0-2: the server opens and closes others as it starts (a listing of /proc/PID/fd can
    # name one that is gone by the time it is read). That it inherited no other descriptor is
    # the pipe test's to show.
    std = [os.readlink(f"/proc/{server.pid}/fd/{fd}") for fd in (0, 1, 2)]
    assert std == ["/dev/null"] * 3
    wait_for(lambda: setup.status().returncode == 0, "the server listens")
    assert setup.status().stdout == f"a server listens on {setup.socket} (pid {server.pid})\n"

    before = len(setup.starts())
    second = setup.link(project, flags, "app2")
    assert second.returncode == 0, second.stderr
    assert "4 jobs: 4 hits, 0 compiled" in second.stderr
    assert len(setup.starts()) == before  # served: no interpreter started for it
    assert (project.dir / "app2").read_bytes() == (project.dir / "app").read_bytes()
    assert project.run_program("app2") == project.expected_output

    # A link the server hands back (a miss at -O1) is done by cached-dist, which starts no
    # other server: the client found one.
    third = setup.link(project, flags, "app3", opt="-O1")
    assert third.returncode == 0, third.stderr
    assert "4 jobs: 0 hits, 4 compiled" in third.stderr
    assert len(setup.starts()) == before + 1
    assert [p.pid for p in setup.servers()] == [server.pid]

    stopped = setup.command("serve", "--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout == f"stopped the server on {setup.socket} (pid {server.pid})\n"
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert not setup.socket.exists()
    done = setup.status()
    assert (done.returncode, done.stdout) == (1, f"no server listens on {setup.socket}\n")
    again = setup.command("serve", "--stop")
    assert (again.returncode, again.stdout) == (0, f"no server listens on {setup.socket}\n")


@requires_toolchain
@pytest.mark.e2e
@pytest.mark.parametrize("how", ["environment", "CACHED_DIST_SERVER=0", "flag", "config",
                                 "--disable"])  # fmt: skip
def test_no_server_is_started_when_told_not_to(tmp_path: Path, setup: Setup, how: str) -> None:
    project = build("shapes", tmp_path / "p")
    args = [f"--cache-dir={tmp_path / 'cache'}"]
    env, extra = dict(setup.env), []
    if how == "environment":
        env["CACHED_DIST_NO_SERVER"] = "1"
    elif how == "CACHED_DIST_SERVER=0":
        env["CACHED_DIST_SERVER"] = "0"
    elif how == "flag":  # on the link's command line (`flags --no-server` prints no client)
        extra = ["-Xthinlto-distributor=--no-server"]
    elif how == "config":
        config = tmp_path / "config.toml"
        config.write_text("no-server = true\n")
        args.append(f"--config={config}")
    else:
        args.append("--disable")  # a server would hand every such link back
    flags = setup.flags(*args) + extra
    assert f"-fthinlto-distributor={CLIENT}" in flags
    for out in ("app", "app2"):
        done = setup.link(project, flags, out, env=env)
        assert done.returncode == 0, done.stderr
        assert setup.servers() == []  # it would be there by now: see the test above
    assert len([s for s in setup.starts() if not s.startswith("flags")]) == 2


@requires_toolchain
@pytest.mark.e2e
def test_flags_no_server_links_through_cached_dist_itself(tmp_path: Path, setup: Setup) -> None:
    project = build("shapes", tmp_path / "p")
    flags = setup.flags("--no-server", f"--cache-dir={tmp_path / 'cache'}")
    assert flags[:3] == ["-fuse-ld=lld", "-flto=thin", f"-fthinlto-distributor={setup.launcher}"]
    done = setup.link(project, flags)
    assert done.returncode == 0, done.stderr
    assert setup.servers() == []


@requires_toolchain
@pytest.mark.e2e
def test_the_server_exits_after_its_idle_time(tmp_path: Path, setup: Setup) -> None:
    project = build("shapes", tmp_path / "p")
    flags = setup.flags(f"--cache-dir={tmp_path / 'cache'}", "--server-idle-exit=1")
    done = setup.link(project, flags)
    assert done.returncode == 0, done.stderr
    server = one_server(setup)
    assert "--idle-exit=1.0" in server.cmdline()
    wait_for(lambda: not server.is_running() or server.status() == psutil.STATUS_ZOMBIE,
             "the server exits by itself")  # fmt: skip
    # It listened (its pid is written once it does) and removed its socket when it exited.
    lock = Path(f"{setup.socket}.lock")
    assert lock.read_text() == f"{server.pid}\n"
    assert not setup.socket.exists()
    assert setup.status().returncode == 1


@requires_toolchain
@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_a_build_under_make_whose_output_is_a_pipe_ends_while_the_server_runs(
    tmp_path: Path, setup: Setup
) -> None:
    """make's output and any descriptor a build tool hands its recipes (its jobserver's
    pipe: the recipe is marked `+`; another pipe here) reach their end when the build is
    over: the server started meanwhile holds none of them."""
    project = build("shapes", tmp_path / "p")
    flags = setup.flags(f"--cache-dir={tmp_path / 'cache'}")
    inputs = " ".join(project.link_inputs)
    (project.dir / "Makefile").write_text(f"app:\n\t+$(CXX) -O2 {inputs} -o app $(FLAGS)\n")
    other_r, other_w = os.pipe()
    try:
        make = subprocess.Popen(
            ["make", "-j2", f"CXX={driver(project)}", f"FLAGS={' '.join(flags)}"], cwd=project.dir,
            env={**setup.env, "MAKEFLAGS": ""}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, pass_fds=(other_w,),
        )  # fmt: skip
        os.close(other_w)
        other_w = -1
        output, _ = make.communicate(timeout=300)  # reads to the end of make's output
        assert make.returncode == 0, output.decode()
        assert b"4 jobs: 0 hits, 4 compiled" in output
        ready, _, _ = select.select([other_r], [], [], WAIT)
        assert ready and os.read(other_r, 1) == b"", "the other pipe never reached its end"
    finally:
        os.close(other_r)
        if other_w >= 0:
            os.close(other_w)
    server = one_server(setup)  # started by that link, and running still
    assert server.is_running()
    wait_for(lambda: setup.status().returncode == 0, "the server listens")


@requires_toolchain
@pytest.mark.e2e
def test_a_link_whose_socket_directory_is_not_ours_starts_no_server(
    tmp_path: Path, short_dir: Path
) -> None:
    """The links themselves (may_start below judges the paths): with the socket in a
    directory of another user's (not writable, when not root), each link links by itself,
    and none leaves a server or a socket behind."""
    theirs = short_dir / "theirs"
    theirs.mkdir()
    if os.geteuid() == 0:
        os.chown(theirs, 12345, 12345)
    else:
        theirs.chmod(0o500)
    s = Setup(tmp_path, theirs)
    try:
        project = build("shapes", tmp_path / "p")
        flags = s.flags(f"--cache-dir={tmp_path / 'cache'}")
        assert f"-fthinlto-distributor={CLIENT}" in flags
        for out, summary in (("app", "0 hits, 4 compiled"), ("app2", "4 hits, 0 compiled")):
            done = s.link(project, flags, out)
            assert done.returncode == 0, done.stderr
            assert f"4 jobs: {summary}" in done.stderr
            assert s.servers() == []  # it would be there by now: see the first test
        assert len([a for a in s.starts() if not a.startswith("flags")]) == 2  # none served
        assert os.listdir(theirs) == []
    finally:
        end_servers(str(s.launcher))
        theirs.chmod(0o700)


def test_no_server_where_it_could_not_be_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket's directory someone else owns or that is missing, a default directory open
    to others, anything but a socket at the path: nothing is started."""
    mine = tmp_path / "mine"
    mine.mkdir()
    assert may_start(str(mine / "s.sock"))
    (mine / "file.sock").write_text("")
    assert not may_start(str(mine / "file.sock"))
    (mine / "dir.sock").mkdir()
    assert not may_start(str(mine / "dir.sock"))
    assert not may_start(str(tmp_path / "missing" / "s.sock"))
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    if os.geteuid() == 0:
        os.chown(theirs, 12345, 12345)
    else:
        theirs.chmod(0o500)  # not writable
    assert not may_start(str(theirs / "s.sock"))
    # The default socket's directory (here under tmp_path): made by the server if missing,
    # else it must be private and no symbolic link, as the server requires.
    default = tmp_path / "default" / "server.sock"
    monkeypatch.setattr("cached_dist.serve.autostart.default_socket", lambda: str(default))
    assert may_start(str(default))
    default.parent.mkdir(mode=0o755)
    default.parent.chmod(0o755)
    assert not may_start(str(default))
    default.parent.chmod(0o700)
    assert may_start(str(default))
    default.parent.rename(tmp_path / "elsewhere")
    default.parent.symlink_to(tmp_path / "elsewhere")
    assert not may_start(str(default))


def test_serve_status_and_stop_usage(tmp_path: Path) -> None:
    from .toolchain import cached_dist_exe

    done = run([cached_dist_exe(), "serve", "--status", "--verbose"], tmp_path)
    assert_one_line_error(done, 2, "serve: --status and --stop take no other argument")


def test_a_pid_left_in_the_lock_file_names_no_server(tmp_path: Path, short_dir: Path) -> None:
    """A server killed outright leaves its pid; a process that has it since is no server."""
    from .toolchain import cached_dist_exe

    sock = short_dir / "s.sock"
    Path(f"{sock}.lock").write_text(f"{os.getpid()}\n")  # a live process, not holding the file
    env = {**os.environ, "CACHED_DIST_SOCKET": str(sock)}
    done = run([cached_dist_exe(), "serve", "--status"], tmp_path, env=env)
    assert (done.returncode, done.stdout) == (1, f"no server listens on {sock}\n")
    done = run([cached_dist_exe(), "serve", "--stop"], tmp_path, env=env)
    assert (done.returncode, done.stdout) == (0, f"no server listens on {sock}\n")


def test_stop_ends_a_stopped_server(tmp_path: Path, short_dir: Path) -> None:
    """SIGTERM reaches a server stopped with SIGSTOP too (--stop sends SIGCONT after it)."""
    from .toolchain import cached_dist_exe

    env = {**os.environ, "CACHED_DIST_SOCKET": str(short_dir / "s.sock")}
    server = subprocess.Popen([cached_dist_exe(), "serve"], env=env, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: run([cached_dist_exe(), "serve", "--status"], tmp_path,
                             env=env).returncode == 0, "the server listens")  # fmt: skip
        server.send_signal(signal.SIGSTOP)
        done = run([cached_dist_exe(), "serve", "--stop"], tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"stopped the server on {short_dir / 's.sock'} (pid {server.pid})\n"
        assert server.wait(WAIT) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


# Two users of one machine: real accounts, as tests/test_group_shared.py makes them.


@pytest.mark.e2e
@requires_toolchain
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates two users")
def test_two_users_each_get_a_server_of_their_own(tmp_path_factory: pytest.TempPathFactory
                                                  ) -> None:  # fmt: skip
    from .test_group_shared import GROUP, PACKAGES, USERS, _ensure_account, _interpreter

    _ensure_account("group", GROUP)
    for user in USERS:
        _ensure_account("user", user)
    base = Path(tempfile.mkdtemp(prefix="cached-dist-users-", dir="/tmp"))
    uids = [pwd.getpwnam(user).pw_uid for user in USERS]
    try:
        base.chmod(0o755)
        lib = base / "lib"
        import importlib

        for name in PACKAGES:
            shutil.copytree(Path(importlib.import_module(name).__file__ or "").parent, lib / name)
        python = _interpreter()
        setups: dict[str, Setup] = {}
        projects: dict[str, Project] = {}
        for user, uid in zip(USERS, uids, strict=True):
            home = base / user
            home.mkdir()
            s = Setup(home, Path(f"/tmp/cached-dist-{uid}"), python)  # the default socket
            s.env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
                     "PYTHONPATH": str(lib), "STARTED_LOG": str(s.log)}  # fmt: skip
            projects[user] = build("shapes", home / "p")
            for path in [home, *home.rglob("*")]:
                os.chown(path, uid, -1)
            setups[user] = s

        def as_user(user: str, argv: Sequence[str], cwd: Path,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
            cmd = ["setpriv", f"--reuid={user}", f"--regid={GROUP}", "--init-groups", *argv]
            return subprocess.run(cmd, cwd=cwd, env=env or setups[user].env,
                                  capture_output=True, text=True, timeout=600)  # fmt: skip

        flags = {}
        for user in USERS:
            done = as_user(user, [str(setups[user].launcher), "flags", "--cc", str(CLANG)],
                           setups[user].where)  # fmt: skip
            assert done.returncode == 0, done.stderr
            flags[user] = done.stdout.split()

        def link(user: str, out: str, env: dict[str, str] | None = None
                 ) -> subprocess.CompletedProcess[str]:  # fmt: skip
            project = projects[user]
            done = as_user(user, [driver(project), "-O2", *project.link_inputs, "-o", out,
                                  *flags[user]], project.dir, env)  # fmt: skip
            assert done.returncode == 0, done.stderr
            return done

        for user in USERS:  # each compiles into a cache of their own, and starts a server
            assert "4 compiled" in link(user, "app").stderr
        pids = {}
        for user, uid in zip(USERS, uids, strict=True):
            s = setups[user]
            (server,) = s.servers()
            assert server.uids().real == uid
            sock = s.socket.parent / "server.sock"
            wait_for(lambda s=s, user=user: as_user(user, [str(s.launcher), "serve", "--status"],
                                                    s.where).returncode == 0,
                     f"{user}'s server listens")  # fmt: skip
            status = as_user(user, [str(s.launcher), "serve", "--status"], s.where)
            assert status.stdout == f"a server listens on {sock} (pid {server.pid})\n"
            pids[user] = server.pid
        assert len(set(pids.values())) == 2
        for user in USERS:  # each is served by their own
            before = len(setups[user].starts())
            assert "4 jobs: 4 hits" in link(user, "app2").stderr
            assert len(setups[user].starts()) == before
        # Bob pointed at Ann's server (her socket made reachable): it is not his; he links
        # by himself and starts no server there.
        ann, bob = USERS
        ann_sock = setups[ann].socket.parent / "server.sock"
        ann_sock.parent.chmod(0o711)
        ann_sock.chmod(0o666)
        done = link(bob, "app3", {**setups[bob].env, "CACHED_DIST_SOCKET": str(ann_sock)})
        assert f"{ann_sock} belongs to a server of user {uids[0]}, not yours" in done.stderr
        assert [p.pid for p in setups[bob].servers()] == [pids[bob]]
        assert [p.pid for p in setups[ann].servers()] == [pids[ann]]
        for user in USERS:
            s = setups[user]
            stopped = as_user(user, [str(s.launcher), "serve", "--stop"], s.where)
            assert stopped.returncode == 0, stopped.stderr
            assert stopped.stdout.startswith("stopped the server on ")
    finally:
        for user in USERS:
            end_servers(str(base / user / "bin" / "cached-dist"))
        for uid in uids:
            shutil.rmtree(f"/tmp/cached-dist-{uid}", ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
