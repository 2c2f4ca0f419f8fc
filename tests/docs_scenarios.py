"""More scenarios of tests/test_docs_output.py: the commands, the warm server, the launcher,
remote tiers that fail or refuse, and a link that waits for another. Each returns the lines
the program printed; a transcript's lines start with the command, ``$ WORDS``, as the docs
show it (program names without their directories)."""

import os
import socket
import subprocess
import time
from pathlib import Path

import redis

from cached_dist.launcher import LAUNCHER
from cached_dist.serve import CLIENT

from .servers import Server
from .toolchain import CLANG, Project, cached_dist_exe, run


def _cd(*args: str, env: dict[str, str] | None = None, status: int = 0) -> list[str]:
    """stdout and stderr lines of ``cached-dist ARGS``, which must exit with ``status``."""
    done = run([cached_dist_exe(), *args], Path("/"), env=env)
    assert done.returncode == status, (args, done.stdout, done.stderr)
    return done.stdout.splitlines() + done.stderr.splitlines()


def commands(cache: Path) -> dict[str, list[str]]:
    """stats --zero, verify, trim and clear of a cache a link filled; an unknown command."""
    where = f"--cache-dir={cache}"
    return {
        "zero": _cd("stats", "--zero", where),
        "verify": _cd("verify", where),
        "trim": _cd("trim", where),
        "clear": _cd("clear", where),
        "did-you-mean": _cd(where, "stat", status=2),
    }


def flags(top: Path) -> dict[str, list[str]]:
    """`cached-dist flags` in its other forms: --launcher, --no-server, --lld-link."""
    env = {**os.environ, "CC": "clang-22", "XDG_CONFIG_HOME": str(top / "cfg")}
    env.pop("CXX", None)
    launcher = ["$ cached-dist flags --launcher", *_cd("flags", "--launcher", env=env),
                "$ cached-dist flags --launcher=cmake --prefix-map",
                *_cd("flags", "--launcher=cmake", "--prefix-map", env=env)]  # fmt: skip
    return {
        "launcher": launcher,
        "no-server": _cd("flags", "--no-server", "--jobs=8", env=env),
        "lld-link": _cd("flags", "--lld-link", "--cc", "clang-cl-22", env=env),
    }


def launcher_print(top: Path) -> list[str]:
    """`cached-dist-cc --print` in a CMake-like build directory of a checkout at
    TOP/home/ann/proj, shown as /home/ann/proj."""
    proj = top / "home/ann/proj"
    for d in (".git", "include", "src", "build/CMakeFiles/app.dir/src"):
        (proj / d).mkdir(parents=True)
    (proj / "src/util.c").write_text("int util(void) { return 1; }\n")
    shown = ["clang-22", "-O3", "-flto=thin", "-I/home/ann/proj/include",
             "-o", "CMakeFiles/app.dir/src/util.c.o", "-c", "/home/ann/proj/src/util.c"]  # fmt: skip
    real = [w.replace("/home/ann/proj", str(proj)) for w in shown]
    done = run([LAUNCHER, "--print", *real], proj / "build")
    assert done.returncode == 0, done.stderr
    return [f"$ cached-dist-cc --print {' '.join(shown)}", *done.stdout.splitlines()]


def serve(project: Project, top: Path, cache: Path) -> dict[str, list[str]]:
    """A real `cached-dist serve --verbose` on a private socket: a full hit it serves, a
    link it hands back (all misses: another cache), then `serve --status` and `serve --stop`."""
    top.mkdir(parents=True, exist_ok=True)
    sock = top / "s.sock"
    env = {**os.environ, "CACHED_DIST_SOCKET": str(sock)}
    log = top / "server.log"
    with log.open("w") as err:
        proc = subprocess.Popen([cached_dist_exe(), "serve", "--verbose"], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "serving on" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        for out, where in (("app-served", cache), ("app-handed", top / "empty-cache")):
            done = project.link(
                out,
                distributor=str(CLIENT),
                env=env,
                distributor_args=[cached_dist_exe(), f"--cache-dir={where}"],
            )
            assert done.returncode == 0, done.stderr
        status = ["$ cached-dist serve --status", *_cd("serve", "--status", env=env)]
        stop = ["$ cached-dist serve --stop", *_cd("serve", "--stop", env=env)]
        assert proc.wait(timeout=60) == 0
        stop += ["$ cached-dist serve --status", *_cd("serve", "--status", env=env, status=1)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return {"serve-control": status + stop, "serve-verbose": log.read_text().splitlines()}


def remote_faults(project: Project, top: Path, redis_server: Server) -> dict[str, list[str]]:
    """Links whose remote tiers fail or refuse: a server nothing listens on (a port bound
    here but not listening: connections are refused), one server of a sharded tier down,
    values the signing key does not vouch for (machine-a's, unsigned), and before them a link
    that finds a damaged value, another key's and one of an older format."""
    top.mkdir(parents=True, exist_ok=True)
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        return _remote_faults(project, top, redis_server.url,
                              f"redis://127.0.0.1:{bound.getsockname()[1]}/0")  # fmt: skip


def _remote_faults(project: Project, top: Path, url: str, dead: str) -> dict[str, list[str]]:
    client = redis.Redis(host="127.0.0.1", port=int(url.rsplit(":", 1)[1].split("/")[0]))
    damaged, wrong, other = sorted(client.keys("cached-dist:v1:*"))[:3]
    client.set(wrong, client.get(other) or b"")  # another key's whole, valid value
    client.set(damaged, b"garbage")
    client.set(other, b"CDR1 of an older writer")
    key = top / "signing.key"
    key.write_text("s3cret\n")
    key.chmod(0o600)
    out = {}
    for name, args in (
        ("refused", [f"--remote-storage={url}", "--verbose"]),
        ("remote-down", [f"--remote-storage={dead}"]),
        ("shard-down", [f"--remote-storage={url}|{dead}(100)"]),  # nearly every key its
        ("unsigned", [f"--remote-storage={url}", f"--remote-signing-key={key}"]),
    ):
        done = project.link(f"app-{name}", distributor_args=[f"--cache-dir={top / name}", *args])
        assert done.returncode == 0, done.stderr
        out[name] = done.stderr.splitlines()
    return out


def waited(project: Project, top: Path, redis_server: Server) -> list[str]:
    """Link B waits for jobs link A compiles: A's compiler holds every compile until the
    file ``go`` exists, which the test makes only once B polls for them (B's remote tier,
    an empty read-only redis, counts B's lookups: its first, and then its polls)."""
    top.mkdir(parents=True, exist_ok=True)
    gate = top / "go"
    compiler = top / "gated-clang"
    started = top / "started"  # A claims every job before it compiles any
    compiler.write_text(f"#!/bin/sh\n: > '{started}'\nwhile [ ! -e '{gate}' ]; do sleep 0.05; done\n"
                        f"exec '{CLANG}' \"$@\"\n")  # fmt: skip
    compiler.chmod(0o755)
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    client.flushall()
    client.config_resetstat()
    cache = top / "cache"

    def start(out: str, *extra: str) -> subprocess.Popen[str]:
        cmd = project.link_command(out, remote_compiler=compiler, opt="-O1",
                                   distributor_args=[f"--cache-dir={cache}", *extra])  # fmt: skip
        return subprocess.Popen(cmd, cwd=project.dir, stderr=subprocess.PIPE, text=True)

    def lookups() -> int:
        calls: int = client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0)
        return calls

    a = start("app-a")
    b = None
    try:
        deadline = time.monotonic() + 120
        while not started.exists():  # A holds its claims
            assert a.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        b = start("app-b", "--verbose", f"--remote-storage={redis_server.url}",
                  "--remote-read-only")  # fmt: skip
        while lookups() < 2:  # B looked its misses up, then polled them once
            assert b.poll() is None and time.monotonic() < deadline, b.communicate()
            time.sleep(0.02)
        gate.touch()
        a_err = a.communicate(timeout=120)[1]
        b_err = b.communicate(timeout=120)[1]
    finally:
        gate.touch()
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert a.returncode == 0, a_err
    assert b.returncode == 0, b_err
    assert project.run_program("app-b") == project.expected_output
    return b_err.splitlines()


def client_errors() -> list[str]:
    """What `cached-dist-client` says with too few arguments, and with a CACHED_DIST that
    cannot be run."""
    lines = []
    for args, status in (([], 2), (["/nonexistent/cached-dist", "job.json"], 127)):
        done = run([CLIENT, *args], Path("/"))
        assert done.returncode == status, done.stderr
        lines += done.stderr.splitlines()
    return lines
