"""Remote execution of backend jobs on a real REAPI server (buildbox-casd running each Action
in a bubblewrap sandbox whose / is the input root), and every way it falls back."""

import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

from .servers import Casd, casd, requires_execution, start_casd  # noqa: F401
from .test_remote import uncached, warnings
from .toolchain import CLANG, Archive, Project, build, requires_toolchain, stats

pytestmark = [requires_toolchain, requires_execution, pytest.mark.e2e]


def salted() -> str:
    """A backend argument that changes nothing but the keys (and so the Actions): tests that
    share the session's server do not see each other's results."""
    return f"-Wl,--thinlto-remote-compiler-arg=-DCACHED_DIST_TEST_SALT={uuid.uuid4().hex}"


def link(
    project: Project, url: str, cache: Path, *extra: str, out: str = "app", ok: bool = True,
    compiler: Path | None = None, salt: str = "",
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    done = project.link(out, remote_compiler=compiler, extra=[salt] if salt else [],
                        distributor_args=[f"--cache-dir={cache}", f"--remote-executor={url}",
                                          *extra])  # fmt: skip
    if ok:
        assert done.returncode == 0, done.stderr
        assert project.run_program(out) == project.expected_output
    return done


@pytest.mark.parametrize(
    ("program", "archive", "absolute"),
    [("calc", "none", False), ("calc", "regular", True), ("calc", "thin", False),
     ("shapes", "regular", False), ("shapes", "thin", True)],
)  # fmt: skip
def test_every_job_executes_remotely(
    tmp_path: Path,
    casd: Casd,  # noqa: F811
    program: str,
    archive: Archive,
    absolute: bool,
) -> None:
    """C and C++, regular and thin archives, relative and absolute paths: every job runs in
    the sandbox (--no-fallback: none may run here), the binary is a local link's, and a
    relink from another directory is all hits from the executor's own cache."""
    project = build(program, tmp_path / "a", archive)
    if absolute:
        project.link_inputs = [str(project.dir / p) for p in project.link_inputs]
    jobs = 5 if program == "calc" else 4
    salt = salted()
    done = link(project, casd.url, tmp_path / "cache-a", "--no-fallback", "-v", salt=salt)
    assert f"{jobs} jobs: 0 hits, {jobs} compiled ({jobs} remotely)" in done.stderr, done.stderr
    assert len(re.findall(rf"compiled on REAPI \({re.escape(casd.url)}\), [0-9.]+ s",
                          done.stderr)) == jobs  # fmt: skip
    assert warnings(done.stderr) == []
    s = stats(tmp_path / "cache-a")
    assert s["reapi_executed"] == jobs and s["reapi_exec_failed"] == 0
    assert s["reapi_exec_bytes_uploaded"] > 0 and s["reapi_uploads"] == jobs
    assert (project.dir / "app").read_bytes() == uncached(project)
    other = build(program, tmp_path / "b", archive)
    if absolute:
        other.link_inputs = [str(other.dir / p) for p in other.link_inputs]
    done = link(other, casd.url, tmp_path / "cache-b", "--no-fallback", salt=salt)
    assert f"{jobs} jobs: {jobs} hits ({jobs} from the remote), 0 compiled" in done.stderr
    assert (other.dir / "app").read_bytes() == (project.dir / "app").read_bytes()


def test_output_in_another_directory(tmp_path: Path, casd: Casd) -> None:  # noqa: F811
    """-o ../out/app: LLD writes the jobs' outputs beside the binary, outside the working
    directory; such jobs compile here (an output path may not leave the working directory)."""
    project = build("calc", tmp_path / "a")
    (tmp_path / "out").mkdir()
    done = link(project, casd.url, tmp_path / "cache", "-v", out="../out/app", ok=False,
                salt=salted())  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = warnings(done.stderr)
    assert len(found) == 1 and "an output lies outside the working directory" in found[0]
    assert "5 fallback" in done.stderr
    assert project.run_program("../out/app") == project.expected_output


def test_a_job_failing_only_remotely_compiles_here(tmp_path: Path, casd: Casd) -> None:  # noqa: F811
    """The compiler exists here but not in the sandbox: every Action fails, nothing failed
    is cached, the jobs compile here with one warning, and the next link hits."""
    own = tmp_path / "toolchain" / "clang"  # the same clang (same identity), elsewhere
    own.parent.mkdir()
    shutil.copy(CLANG, own)
    project = build("calc", tmp_path / "a")
    salt = salted()
    done = link(project, casd.url, tmp_path / "cache", "-v", compiler=own, salt=salt)
    found = warnings(done.stderr)
    assert len(found) == 1, done.stderr
    assert "on REAPI" in found[0] and found[0].endswith("; compiling 5 of 5 jobs locally")
    assert "5 jobs: 0 hits, 0 compiled, 5 fallback" in done.stderr
    s = stats(tmp_path / "cache")
    assert s["reapi_exec_failed"] == 5 and s["reapi_uploads"] == 5
    again = build("calc", tmp_path / "b")
    done = link(again, casd.url, tmp_path / "cache-b", compiler=own, salt=salt)
    assert "5 jobs: 5 hits (5 from the remote)" in done.stderr
    assert (again.dir / "app").read_bytes() == (project.dir / "app").read_bytes()


def test_unreachable_executor_falls_back(tmp_path: Path) -> None:
    server = start_casd(tmp_path / "gone", execute=True)
    server.stop()
    project = build("calc", tmp_path / "a")
    done = link(project, server.url, tmp_path / "cache")
    found = warnings(done.stderr)
    assert any("compiling 5 of 5 jobs locally" in w for w in found), done.stderr
    assert "5 fallback" in done.stderr
    assert (project.dir / "app").read_bytes() == uncached(project)


def test_server_killed_mid_link(tmp_path: Path) -> None:
    server = start_casd(tmp_path / "casd", execute=True)
    project = build("calc", tmp_path / "a")
    cmd = project.link_command(distributor_args=[f"--cache-dir={tmp_path / 'cache'}",
                                                 f"--remote-executor={server.url}", "-v"])  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=project.dir, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:  # the inputs are uploaded: kill it as the actions run
        lines.append(line)
        if "REAPI: 5 actions" in line:
            server.kill()
            break
    rest = proc.stderr.read()
    proc.wait(timeout=120)
    err = "".join(lines) + rest
    assert proc.returncode == 0, err
    assert "compiled on REAPI" not in err or "fallback" in err
    assert len([w for w in warnings(err) if "jobs locally" in w]) <= 1
    assert (project.dir / "app").read_bytes() == uncached(project)
    server.stop()


def test_exec_timeout_falls_back(tmp_path: Path) -> None:
    """A paused server: the link waits at most --remote-timeout per call, then compiles here."""
    server = start_casd(tmp_path / "casd", execute=True)
    try:
        server.pause()
        project = build("calc", tmp_path / "a")
        started = time.monotonic()
        done = link(project, server.url, tmp_path / "cache", "--remote-timeout=0.5")
        assert time.monotonic() - started < 60
        assert "5 fallback" in done.stderr and "timed out" in done.stderr, done.stderr
    finally:
        server.stop()


class _DroppingProxy:
    """A gRPC proxy in the test process in front of casd that forwards every call but
    Execute, which it (``mode``) drops after its first message (as a load balancer restarting
    would), holds without an answer, or answers at once with a failed operation."""

    def __init__(self, sock: str, target: str, mode: str = "drop") -> None:
        import grpc

        channel = grpc.insecure_channel(target)
        self.dropped = 0
        self.waited = 0
        self.lock = threading.Lock()
        streams = {"/build.bazel.remote.execution.v2.Execution/Execute",
                   "/build.bazel.remote.execution.v2.Execution/WaitExecution",
                   "/google.bytestream.ByteStream/Read"}  # fmt: skip
        proxy = self

        def unary(method: str) -> Any:
            call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method)

            def handle(request: bytes, context: grpc.ServicerContext) -> bytes:
                answer: bytes = call(request, metadata=context.invocation_metadata())
                return answer

            return grpc.unary_unary_rpc_method_handler(handle)

        def stream(method: str) -> Any:
            call: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(method)

            def handle(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
                if method.endswith("/Execute") and mode == "hold":
                    while context.is_active():
                        time.sleep(0.05)
                    return
                if method.endswith("/Execute") and mode == "fail":
                    from google.longrunning import operations_pb2

                    failed = operations_pb2.Operation(name="op-1", done=True)
                    failed.error.code = 13
                    failed.error.message = "the worker was lost"
                    yield failed.SerializeToString()
                    return
                if method.endswith("/WaitExecution"):  # counted as it comes: the link may
                    with proxy.lock:  # end before this handler runs on after its last message
                        proxy.waited += 1
                for message in call(request, metadata=context.invocation_metadata()):
                    yield message
                    if method.endswith("/Execute"):
                        with proxy.lock:
                            proxy.dropped += 1
                        context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")

            return grpc.unary_stream_rpc_method_handler(handle)

        class Handler(grpc.GenericRpcHandler):
            def service(inner, details: grpc.HandlerCallDetails) -> Any:
                method = details.method
                return stream(method) if method in streams else unary(method)

        self.server = grpc.server(futures.ThreadPoolExecutor(16), handlers=[Handler()])
        self.server.add_insecure_port(f"unix:{sock}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(None)


def test_a_dropped_stream_is_resumed_with_wait_execution(tmp_path: Path, casd: Casd) -> None:  # noqa: F811
    sock = str(tmp_path / "proxy.sock")
    proxy = _DroppingProxy(sock, casd.url)
    try:
        project = build("tally", tmp_path / "a")
        done = link(project, f"unix:{sock}", tmp_path / "cache", "--no-fallback", "-v",
                    salt=salted())  # fmt: skip
    finally:
        proxy.stop()
    jobs = len(re.findall(r"compiled on REAPI", done.stderr))
    assert jobs >= 2 and f"{jobs} compiled ({jobs} remotely)" in done.stderr, done.stderr
    assert proxy.dropped == jobs and proxy.waited == jobs
    assert len(re.findall(r"dropped \(UNAVAILABLE\); resuming it", done.stderr)) == jobs
    assert (project.dir / "app").read_bytes() == uncached(project)


@pytest.mark.parametrize(
    ("mode", "warning"),
    [("hold", "not finished on REAPI within --remote-exec-timeout 1 s"),
     ("fail", "REAPI execution failed: the worker was lost")],
)  # fmt: skip
def test_unfinished_and_failed_executions_compile_here(
    tmp_path: Path,
    casd: Casd,  # noqa: F811
    mode: str,
    warning: str,
) -> None:
    sock = str(tmp_path / "proxy.sock")
    proxy = _DroppingProxy(sock, casd.url, mode)
    try:
        project = build("calc", tmp_path / "a")
        done = link(project, f"unix:{sock}", tmp_path / "cache", "--remote-exec-timeout=1",
                    salt=salted())  # fmt: skip
    finally:
        proxy.stop()
    found = warnings(done.stderr)
    assert f"cached-dist: warning: {warning}; compiling 5 of 5 jobs locally" in found, found
    assert "5 jobs: 0 hits, 0 compiled, 5 fallback" in done.stderr
    assert (project.dir / "app").read_bytes() == uncached(project)
