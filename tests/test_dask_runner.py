"""The Dask runner's options and shipping plan, without a cluster (tests/test_e2e_dask.py
has the real one)."""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cached_dist.errors import UsageError
from cached_dist.jobfile import parse
from cached_dist.options import resolve
from cached_dist.runners.shipment import content_key, plan

from .test_cli import assert_one_line_error, cli


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), **extra}


def test_scheduler_from_flag_environment_and_config(tmp_path: Path) -> None:
    assert resolve([], [], _env(tmp_path)).dask_scheduler == ""
    env = _env(tmp_path, CACHED_DIST_DASK_SCHEDULER="tcp://a:1", CACHED_DIST_DASK_TIMEOUT="30")
    options = resolve([], [], env)
    assert (options.dask_scheduler, options.dask_timeout) == ("tcp://a:1", 30.0)
    assert resolve(["--dask-scheduler", "tls://b:2"], [], env).dask_scheduler == "tls://b:2"
    config = tmp_path / "c.toml"
    config.write_text('dask-scheduler = "tcp://c:3"\ndask-timeout = 60\n')
    options = resolve([f"--config={config}"], [], _env(tmp_path))
    assert (options.dask_scheduler, options.dask_timeout) == ("tcp://c:3", 60.0)


def test_the_resident_client_idle_time_and_turning_it_off(tmp_path: Path) -> None:
    assert resolve([], [], _env(tmp_path)).dask_resident_idle == 600.0
    assert resolve(["--dask-resident-idle=0"], [], _env(tmp_path)).dask_resident_idle == 0.0
    assert resolve(["--dask-resident-idle=0.00"], [], _env(tmp_path)).dask_resident_idle == 0.0
    env = _env(tmp_path, CACHED_DIST_DASK_RESIDENT_IDLE="30")
    assert resolve([], [], env).dask_resident_idle == 30.0
    config = tmp_path / "c.toml"
    config.write_text("dask-resident-idle = 0\n")
    assert resolve([f"--config={config}"], [], _env(tmp_path)).dask_resident_idle == 0.0


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--dask-scheduler="], {}, "option --dask-scheduler: empty address"),
        (["--dask-timeout=0"], {}, "option --dask-timeout: must be a positive number of seconds"),
        (["--dask-timeout=soon"], {}, "option --dask-timeout: not a number of seconds"),
        ([], {"CACHED_DIST_DASK_TIMEOUT": "-1"}, "environment variable CACHED_DIST_DASK_TIMEOUT"),
        (["--dask-resident-idle=-5"], {}, "option --dask-resident-idle: must be a positive"),
        (["--dask-resident-idle=later"], {}, "option --dask-resident-idle: not a number"),
    ],
)  # fmt: skip
def test_option_errors(tmp_path: Path, flags: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as e:
        resolve(flags, [], _env(tmp_path, **env))
    assert message in str(e.value)


def test_an_inner_distributor_and_dask_together_are_a_usage_error(tmp_path: Path) -> None:
    done = cli("--dask-scheduler=tcp://127.0.0.1:9", "--", "true", "x.json", cwd=tmp_path)
    assert_one_line_error(
        done, 2, "--dask-scheduler and an inner distributor cannot be used together"
    )


def test_choosing_the_runner_does_not_import_distributed() -> None:
    code = (
        "import sys\n"
        "from cached_dist.log import Log\n"
        "from cached_dist.options import Options\n"
        "from cached_dist.runners import make_runner\n"
        "runner = make_runner(Options(dask_scheduler='tcp://127.0.0.1:9'), Log())\n"
        "print(type(runner).__name__, 'distributed' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["DaskRunner", "False"], done.stderr


def test_plan_sends_each_content_once_and_reroots_paths(tmp_path: Path) -> None:
    (tmp_path / "a.o").write_bytes(b"module a")
    (tmp_path / "b.o").write_bytes(b"module b")
    (tmp_path / "a.thinlto.bc").write_bytes(b"shard a")
    (tmp_path / "b.thinlto.bc").write_bytes(b"shard b")
    out = tmp_path / "out"
    out.mkdir()
    job_file = parse({
        "common": {"args": ["/opt/clang", "-c", "-O2"], "inputs": []},
        "jobs": [
            {"args": ["a.o", "-fthinlto-index=a.thinlto.bc", "-o", f"{out}/a.native.o"],
             "inputs": ["a.o", "a.thinlto.bc", "b.o"], "outputs": [f"{out}/a.native.o"]},
            {"args": ["b.o", "-fthinlto-index=b.thinlto.bc", "-o", "b.native.o"],
             "inputs": ["b.o", "b.thinlto.bc", "a.o"], "outputs": ["b.native.o"]},
        ],
    })  # fmt: skip
    shipment = plan(job_file, job_file.jobs, {"/opt/clang": "id"}, str(tmp_path))
    assert shipment.refused == {}
    assert sorted(shipment.contents.values()) == [b"module a", b"module b", b"shard a", b"shard b"]
    assert shipment.input_bytes == 2 * (8 + 7 + 8) and shipment.shipped_bytes == 2 * (8 + 7)
    spec, keys = shipment.specs[0]
    # Everything is below the link's directory: it is the sandbox's root ("" for cwd).
    assert spec["cwd"] == "" and spec["identity"] == "id"
    assert spec["inputs"] == ["a.o", "a.thinlto.bc", "b.o"]
    assert keys == [content_key(b"module a"), content_key(b"shard a"), content_key(b"module b")]
    # an absolute output becomes relative to the link's directory; the compiler stays
    assert spec["argv"] == ["/opt/clang", "-c", "-O2", "a.o", "-fthinlto-index=a.thinlto.bc",
                            "-o", "out/a.native.o"]  # fmt: skip
    assert spec["outputs"] == ["out/a.native.o"]
    assert shipment.specs[1][0]["outputs"] == ["b.native.o"]


def test_the_sandbox_keeps_the_directories_relative_paths_climb_through(tmp_path: Path) -> None:
    """cwd t/x/y naming ../../x/z.o: the sandbox must hold t's x, not only x's content."""
    deep = tmp_path / "t" / "x" / "y"
    deep.mkdir(parents=True)
    (tmp_path / "t" / "x" / "z.o").write_bytes(b"module z")
    (deep / "z.bc").write_bytes(b"shard z")
    job_file = parse({
        "common": {"args": ["/opt/clang", "-c"]},
        "jobs": [{"args": ["../../x/z.o", "-fthinlto-index=z.bc", "-o", "z.native.o"],
                  "inputs": ["../../x/z.o", "z.bc"], "outputs": ["z.native.o"]}],
    })  # fmt: skip
    spec, _ = plan(job_file, job_file.jobs, {"/opt/clang": "id"}, str(deep)).specs[0]
    assert spec["cwd"] == "x/y"  # the root is t: ../.. from x/y stays inside it
    assert spec["inputs"] == ["x/z.o", "x/y/z.bc"] and spec["outputs"] == ["x/y/z.native.o"]
    sandbox = Path("/sandbox")
    assert os.path.normpath(sandbox / spec["cwd"] / "../../x/z.o") == str(sandbox / "x/z.o")


def test_plan_refuses_what_it_cannot_send(tmp_path: Path) -> None:
    (tmp_path / "a.o").write_bytes(b"module a")
    job_file = parse({
        "common": {"args": ["/opt/clang", "-c"]},
        "jobs": [
            {"args": ["a.o"], "inputs": ["a.o", "missing.bc"], "outputs": ["a.native.o"]},
            {"args": ["a.o"], "inputs": ["a.o"], "outputs": ["b.native.o"]},
            {"args": ["a.o"], "inputs": [str(tmp_path / "a.o"), "s.bc"], "outputs": ["c.o"]},
        ],
    })  # fmt: skip
    (tmp_path / "s.bc").write_bytes(b"not bitcode")
    shipment = plan(job_file, job_file.jobs, {}, str(tmp_path))
    assert "no toolchain identity for compiler '/opt/clang'" in shipment.refused[1]
    shipment = plan(job_file, job_file.jobs, {"/opt/clang": "id"}, str(tmp_path))
    assert shipment.refused[0] == f"cannot read {tmp_path}/missing.bc: No such file or directory"
    assert 1 in shipment.specs
    assert (
        "the shard names modules by absolute paths and cannot be rewritten" in shipment.refused[2]
    )


def test_workers_check_their_compiler_the_way_the_key_identifies_it(tmp_path: Path) -> None:
    from cached_dist.log import Log
    from cached_dist.runners.dask import DaskRunner
    from cached_dist.runners.dask_task import compile_job

    log = Log()
    assert DaskRunner("tcp://127.0.0.1:1", 1.0, log, compiler_check="mtime").check == "content"
    assert (
        DaskRunner("tcp://127.0.0.1:1", 1.0, log, compiler_check="string:v1").check == "string:v1"
    )
    spec = {
        "compiler": "/bin/true",
        "identity": "string:x",
        "check": "string:v2",
        "argv": [],
        "cwd": "",
        "inputs": [],
        "outputs": [],
    }
    done = compile_job(spec)
    assert done["failure"] is not None and "another toolchain" in done["failure"]


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory with a short path: a Unix socket's path must fit in 108 bytes."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="cd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_resident_client_lives_only_in_a_private_directory(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cached_dist.runners import dask_resident

    tmp_path = short_tmp
    assert dask_resident.socket_path("tcp://h:1") is not None  # the default place works
    (tmp_path / ("long" * 25)).mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / ("long" * 25)))
    assert dask_resident.socket_path("tcp://h:1") is None  # no room for the name: in-process
    assert (tmp_path / ("long" * 25) / "cached-dist").is_dir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = dask_resident.socket_path("tcp://10.0.0.1:8786")
    assert path is not None and Path(path).parent == tmp_path / "cached-dist"
    assert (tmp_path / "cached-dist").stat().st_mode & 0o777 == 0o700
    assert dask_resident.socket_path("tcp://10.0.0.2:8786") != path  # one per scheduler
    (tmp_path / "cached-dist").chmod(0o755)  # others could put a socket there
    assert dask_resident.socket_path("tcp://10.0.0.1:8786") is None
    assert dask_resident.connect("tcp://10.0.0.1:8786") is None  # so: in-process


def _fake_resident(path: str, behaviour: str) -> None:
    """Listens at ``path`` like a resident client that misbehaves, for one link."""
    import socket
    import threading

    from cached_dist.runners import dask_resident

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            if behaviour == "garbage":
                conn.sendall(b"\x00\x00\x00\x00\x00\x00\x00\x05nope!")
                return
            dask_resident.send(conn, ("hello", 4242, dask_resident.PROTOCOL))
            dask_resident.receive(conn)  # the shipment
            if behaviour == "half":
                dask_resident.send(conn, ("job", 7, "Dask task failed: boom"))
                # then it dies: the connection closes without "end"

    threading.Thread(target=serve, daemon=True).start()


@pytest.mark.parametrize("behaviour", ["garbage", "half"])
def test_a_resident_client_that_misbehaves_is_not_trusted(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str
) -> None:
    import time

    from cached_dist.runners import dask_resident
    from cached_dist.runners.shipment import Shipment

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_tmp))
    address = f"tcp://127.0.0.1:1/{behaviour}"
    path = dask_resident.socket_path(address)
    assert path is not None
    _fake_resident(path, behaviour)
    resident = dask_resident.connect(address)
    if behaviour == "garbage":
        assert resident is None  # no greeting: the link works in-process
        return
    assert resident is not None and resident.pid == 4242
    shipment = Shipment()
    shipment.specs = {7: ({}, []), 8: ({}, [])}
    got = []
    with pytest.raises(dask_resident.ResidentLost):
        for outcome in resident.run(shipment, 10.0, time.monotonic() + 10, print):
            got.append(outcome)
    resident.close()
    assert got == [(7, "Dask task failed: boom")]  # what came before is kept


def test_links_with_other_dask_settings_use_another_resident_client(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cached_dist.runners import dask_resident

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_tmp))
    plain = dask_resident.socket_path("tcp://h:1")
    monkeypatch.setenv("DASK_DISTRIBUTED__COMM__TLS__CA_FILE", "/etc/ca.pem")
    assert dask_resident.socket_path("tcp://h:1") not in (None, plain)
