"""Interoperability: cached-dist against BuildGrid 0.4.4 (another REAPI server, in Python,
scheduling through PostgreSQL 15), with a small bot written for the tests (BuildGrid ships
no worker). Machine A executes every job through BuildGrid; machine B links everything from
BuildGrid's ActionCache and CAS; the binaries are a local link's.

BuildGrid lives in a virtual environment of its own (.venv/buildgrid, made by scripts/setup:
its dependencies clash with the project's pins). Skipped only where it or PostgreSQL is not
installed, and never in CI.
"""

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .servers import free_port
from .test_remote import uncached, warnings
from .toolchain import CLANG, build, requires_toolchain, stats

ROOT = Path(__file__).parent.parent
BGD_VENV = ROOT / ".venv" / "buildgrid"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
MISSING = [str(p) for p in (BGD_VENV / "bin" / "bgd", PG_BIN / "postgres") if not p.exists()]
pytestmark = [
    requires_toolchain,
    pytest.mark.e2e,
    pytest.mark.skipif(
        bool(MISSING) and not os.environ.get("CI"),
        reason=f"missing {', '.join(MISSING)} (run scripts/setup)",
    ),
]

_CONFIG = """
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
authorization:
  method: none
connections:
  - !sql-connection &sql
    connection-string: postgresql+psycopg2://postgres@127.0.0.1:{pg_port}/bgd
storages:
  - !lru-storage &main-storage
    size: 256MB
caches:
  - !lru-action-cache &main-action
    storage: *main-storage
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: false
schedulers:
  - !sql-scheduler &state-database
    sql: *sql
    action-cache: *main-action
    storage: *main-storage
    property-set: !dynamic-property-set
      match-property-keys: [OSFamily, ISA, toolchain]
    assigners:
      - !priority-age-assigner
        count: 1
        interval: 0.05
        priority-assignment-percentage: 100
        bot-assignment-strategy: !assign-by-capacity
instances:
  - name: ""
    services:
      - !action-cache
        cache: *main-action
      - !execution
        scheduler: *state-database
      - !cas
        storage: *main-storage
      - !bytestream
        storage: *main-storage
thread-pool-size: 64
"""


def _as_postgres(args: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the postgres user."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _wait(what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180  # BuildGrid validates its config slowly on a loaded host
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text(errors='replace')[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start: {log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)


def _listening(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@pytest.fixture
def buildgrid(tmp_path: Path) -> Iterator[str]:
    """PostgreSQL 15 with a fresh database, BuildGrid on a free port, one test bot; stopped
    by PID. Yields BuildGrid's URL."""
    from cached_dist.keys import toolchain

    work = tmp_path / "bgd"
    work.mkdir()
    # The database's directory: where the postgres user can reach it (pytest's are 0700).
    pg = Path(tempfile.mkdtemp(prefix="cached-dist-pg-"))
    pg.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(pg, "postgres")
    subprocess.run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(pg / "data"), "--auth=trust",
                                 "-U", "postgres"]), check=True, capture_output=True)  # fmt: skip
    pg_port = free_port()
    pg_log = work / "postgres.log"
    procs: list[subprocess.Popen[bytes]] = []
    with open(pg_log, "wb") as out:
        procs.append(subprocess.Popen(_as_postgres(
            [str(PG_BIN / "postgres"), "-D", str(pg / "data"), "-p", str(pg_port), "-k", str(pg),
             "-h", "127.0.0.1"]), stdout=out, stderr=subprocess.STDOUT))  # fmt: skip
    try:
        _wait("postgres", lambda: _listening(pg_port), procs[0], pg_log)
        subprocess.run(_as_postgres([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p",
                                     str(pg_port), "-U", "postgres", "bgd"]),
                       check=True, capture_output=True)  # fmt: skip
        bgd = str(BGD_VENV / "bin" / "bgd")
        database = f"postgresql+psycopg2://postgres@127.0.0.1:{pg_port}/bgd"
        subprocess.run([bgd, "migrate", "apply", database], check=True, capture_output=True)
        port = free_port()
        config = work / "bgd.yml"
        config.write_text(_CONFIG.format(port=port, pg_port=pg_port))
        log = work / "bgd.log"
        with open(log, "wb") as out:
            procs.append(subprocess.Popen([bgd, "server", "start", str(config)], stdout=out,
                                          stderr=subprocess.STDOUT))  # fmt: skip
        _wait("bgd", lambda: _listening(port), procs[-1], log)
        identity = toolchain.identity(str(CLANG), toolchain.NoMemo())
        bot_log = work / "bot.log"
        with open(bot_log, "wb") as out:
            procs.append(subprocess.Popen(
                [str(BGD_VENV / "bin" / "python"), str(ROOT / "tests" / "buildgrid_bot.py"),
                 f"grpc://127.0.0.1:{port}", "OSFamily=linux", "ISA=x86-64",
                 f"toolchain={identity}"], stdout=out, stderr=subprocess.STDOUT))  # fmt: skip
        yield f"grpc://127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()  # postgres: a smart shutdown; runuser passes it on
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(pg, ignore_errors=True)


def test_buildgrid_executes_and_serves(tmp_path: Path, buildgrid: str) -> None:
    a = build("calc", tmp_path / "a", "regular")
    done = a.link("app", distributor_args=[f"--cache-dir={tmp_path / 'cache-a'}",
                                           f"--remote-executor={buildgrid}", "--no-fallback",
                                           "--remote-timeout=30", "-v"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "5 jobs: 0 hits, 5 compiled (5 remotely)" in done.stderr, done.stderr
    assert done.stderr.count(f"compiled on REAPI ({buildgrid})") == 5
    assert warnings(done.stderr) == []
    assert stats(tmp_path / "cache-a")["reapi_uploads"] == 5
    assert (a.dir / "app").read_bytes() == uncached(a)
    b = build("calc", tmp_path / "b", "regular")
    done = b.link("app", distributor_args=[f"--cache-dir={tmp_path / 'cache-b'}",
                                           f"--remote-storage={buildgrid}",
                                           "--remote-timeout=30"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "5 jobs: 5 hits (5 from the remote), 0 compiled" in done.stderr, done.stderr
    assert (b.dir / "app").read_bytes() == (a.dir / "app").read_bytes()
