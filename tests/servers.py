"""Real servers for tests: redis-server and nginx (WebDAV) on 127.0.0.1, on free ports.

Each is a child process of the test, stopped when the test ends; faults are real: kill(),
pause() (SIGSTOP: the socket accepts, nothing answers) and resume().
"""

import os
import shutil
import signal
import socket
import subprocess
import time
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
