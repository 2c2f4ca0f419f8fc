"""The Dask runner against a real cluster: `dask scheduler` and two `dask worker` processes on
127.0.0.1 whose mount namespace hides the build directory (tmpfs over it), so every input a
job needs must really be shipped, and every output really returned.

Compilations are counted by a wrapper compiler in a directory both sides see; it records
which worker ran it (CACHED_DIST_TEST_WORKER, set only in the workers' environment) and in
which directory, so the tests see that each job ran on a worker, inside its sandbox.
"""

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .dask_cluster import Cluster, cluster, free_port, requires_dask
from .toolchain import CLANG, Archive, Project, build, requires_toolchain

pytestmark = [requires_toolchain, requires_dask, pytest.mark.e2e]


def wrapper(where: Path, name: str, remote_only: str = "") -> Path:
    """A compiler that logs `WORKER PARENT PID CWD ARGS` to where/NAME.log, runs
    ``remote_only`` (shell) when on a worker, then clang."""
    log = where / f"{name}.log"
    script = where / name
    script.write_text(
        "#!/bin/sh\n"
        f"echo \"${{CACHED_DIST_TEST_WORKER:-local}} $PPID $$ $PWD $*\" >> '{log}'\n"
        f'if [ -n "$CACHED_DIST_TEST_WORKER" ]; then :; {remote_only}\nfi\n'
        f"exec '{CLANG}' \"$@\"\n"
    )
    script.chmod(0o755)
    return script


def runs(script: Path) -> list[list[str]]:
    log = script.with_name(script.name + ".log")
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


class Site:
    """The module's cluster: builds go under ``hidden`` (invisible to workers), wrapper
    compilers and their logs under ``shared``."""

    def __init__(self, cluster: Cluster, hidden: Path, shared: Path) -> None:
        self.cluster = cluster
        self.hidden = hidden
        self.shared = shared

    def args(self, *more: str) -> list[str]:
        return [f"--dask-scheduler={self.cluster.address}", "--verbose", *more]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    hidden = tmp_path_factory.mktemp("dask-build")
    shared = tmp_path_factory.mktemp("dask-shared")
    logs = tmp_path_factory.mktemp("dask-logs")
    other = shared / "other-clang"  # what workers see at mismatch-clang: another toolchain
    other.write_text(f"#!/bin/sh\n# another build of the compiler\nexec '{CLANG}' \"$@\"\n")
    other.chmod(0o755)
    mismatch = wrapper(shared, "mismatch-clang")
    with cluster(logs, 2, hide=[hidden], swap={mismatch: other}) as c:
        seen = c.run_on_workers(os.path.exists, str(hidden / "probe"))
        (hidden / "probe").write_text("the link machine sees this")
        assert os.path.exists(hidden / "probe")
        assert c.run_on_workers(os.path.exists, str(hidden / "probe")) == seen
        assert set(seen.values()) == {False}, seen  # the workers really cannot see it
        yield Site(c, hidden, shared)


def build_in(site: Site, name: str, archive: Archive, absolute: bool, tag: str) -> Project:
    project = build(name, site.hidden / tag, archive)
    if absolute:
        project.link_inputs = [str(project.dir / p) for p in project.link_inputs]
    return project


CASES = [
    ("calc", "regular", False),
    ("shapes", "thin", True),
    ("shapes", "regular", True),
]


@pytest.mark.parametrize(("name", "archive", "absolute"), CASES)
def test_every_miss_compiles_on_a_worker_that_cannot_see_the_build(
    site: Site, name: str, archive: Archive, absolute: bool
) -> None:
    tag = f"{name}-{archive}-{'abs' if absolute else 'rel'}"
    project = build_in(site, name, archive, absolute, tag)
    compiler = wrapper(site.shared, f"clang-{tag}")
    cache = site.shared / f"cache-{tag}"
    plain = project.link("plain", remote_compiler=compiler, distributor_args=["--disable"])
    assert plain.returncode == 0, plain.stderr
    local_runs = len(runs(compiler))

    first = project.link(remote_compiler=compiler,
                         distributor_args=site.args(f"--cache-dir={cache}"))  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "warning" not in first.stderr, first.stderr
    remote = runs(compiler)[local_runs:]
    jobs = len(remote)
    assert jobs >= 4 and {r[0] for r in remote} <= {"w1", "w2"}, remote
    assert all("/cached-dist-sandbox." in r[3] for r in remote), remote  # cwd: a sandbox
    assert first.stderr.count("compiled on Dask worker") == jobs, first.stderr
    assert f"{jobs} jobs: 0 hits, {jobs} compiled ({jobs} remotely)," in first.stderr
    assert project.run_program() == project.expected_output
    assert (project.dir / "app").read_bytes() == (project.dir / "plain").read_bytes()

    again = project.link("again", remote_compiler=compiler,
                         distributor_args=site.args(f"--cache-dir={cache}"))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert f"{jobs} jobs: {jobs} hits, 0 compiled" in again.stderr
    assert len(runs(compiler)) == local_runs + jobs
    assert (project.dir / "again").read_bytes() == (project.dir / "plain").read_bytes()


def test_each_input_is_sent_once_per_link(site: Site) -> None:
    project = build_in(site, "calc", "none", False, "once")
    compiler = wrapper(site.shared, "clang-once")
    done = project.link(remote_compiler=compiler, distributor_args=site.args("--disable"))
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stderr.splitlines() if "Dask: sending" in x)
    # 5 modules and 5 shards, though the jobs name 5 modules, 5 shards and their imports
    distinct, shipped, named = [int(w) for w in line.split() if w.isdigit()][:3]
    assert distinct == 10, line
    modules = sum((project.dir / o).stat().st_size for o in project.link_inputs)
    assert modules < shipped < named, line


def test_a_worker_with_another_toolchain_refuses_and_the_job_compiles_here(site: Site) -> None:
    project = build_in(site, "calc", "thin", False, "mismatch")
    compiler = site.shared / "mismatch-clang"
    done = project.link(remote_compiler=compiler,
                        distributor_args=site.args(f"--cache-dir={site.shared}/cache-mm"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    warnings = [x for x in done.stderr.splitlines() if "warning" in x]
    assert len(warnings) == 1, done.stderr
    assert "has another toolchain at " + str(compiler) in warnings[0]
    assert "compiling 5 of 5 jobs locally" in warnings[0]
    assert {r[0] for r in runs(compiler)} == {"local"}  # the workers' compiler never ran
    assert "5 jobs: 0 hits, 0 compiled, 5 fallback" in done.stderr
    assert project.run_program() == project.expected_output


def test_a_job_failing_on_the_worker_falls_back_to_a_local_compile(site: Site) -> None:
    project = build_in(site, "calc", "none", False, "failing")
    compiler = wrapper(
        site.shared,
        "clang-failing",
        remote_only='case "$*" in *" ops.o "*) echo "no room" >&2; exit 3;; esac',
    )
    done = project.link(remote_compiler=compiler,
                        distributor_args=site.args(f"--cache-dir={site.shared}/cache-f"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "warning: exit status 3 on worker " in done.stderr
    assert "no room; compiling 1 of 5 jobs locally" in done.stderr
    assert "5 jobs: 0 hits, 4 compiled (4 remotely), 1 fallback" in done.stderr
    assert project.run_program() == project.expected_output


def test_jobs_unfinished_within_the_bound_compile_here(site: Site) -> None:
    project = build_in(site, "calc", "none", False, "slow")
    compiler = wrapper(site.shared, "clang-slow", remote_only="sleep 6")
    started = time.monotonic()
    done = project.link(remote_compiler=compiler,
                        distributor_args=site.args("--disable", "--dask-timeout=1.5"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "not finished on Dask within --dask-timeout 1.5 s" in done.stderr
    assert time.monotonic() - started < 20
    assert project.run_program() == project.expected_output


def test_an_unreachable_scheduler_costs_one_warning(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    done = project.link(distributor_args=[f"--dask-scheduler={address}",
                                          f"--cache-dir={tmp_path / 'cache'}"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (f"cached-dist: warning: cannot reach the Dask scheduler at {address} "
                        f"(Timed out trying to connect to {address} after 2 s); "
                        "compiling 5 of 5 jobs locally"), done.stderr  # fmt: skip
    assert len(lines) == 2 and "5 jobs: 0 hits, 0 compiled, 5 fallback" in lines[1]
    assert time.monotonic() - started < 15
    assert project.run_program() == project.expected_output


def link_until_a_compile_starts(
    site: Site, project: Project, compiler: Path, cache: str
) -> subprocess.Popen[str]:
    """Starts a link through the cluster in the background; returns once a compile began."""
    link = subprocess.Popen(
        project.link_command(remote_compiler=compiler,
                             distributor_args=site.args(f"--cache-dir={site.shared}/{cache}")),
        cwd=project.dir, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not runs(compiler) and time.monotonic() < deadline:
        time.sleep(0.05)
    return link


def resident_pid(address: str, wait: float = 0.0) -> int | None:
    """The pid of the resident client for ``address`` once it answers (within ``wait`` s)."""
    from cached_dist.runners import dask_resident

    deadline = time.monotonic() + wait
    while True:
        found = dask_resident.connect(address)
        if found is not None:
            found.close()
            return found.pid
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def no_resident(address: str) -> bool:
    """No resident client for ``address`` runs or is starting (its lock is free)."""
    import fcntl

    from cached_dist.runners import dask_resident

    path = dask_resident.socket_path(address)
    assert path is not None
    with open(path + ".lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def stop_residents(address: str) -> None:
    """Kills the resident client for ``address`` left by earlier tests, and waits until none
    is running or starting: a test then starts from none."""
    deadline = time.monotonic() + 30
    while not no_resident(address):
        pid = resident_pid(address)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_links_after_the_first_go_through_the_resident_client(site: Site) -> None:
    address = site.cluster.address
    stop_residents(address)
    project = build_in(site, "calc", "none", False, "resident")
    compiler = wrapper(site.shared, "clang-resident")
    first = project.link("first", remote_compiler=compiler,
                         distributor_args=site.args(f"--cache-dir={site.shared}/cache-r1"))  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert f"Dask: connected to {address} in " in first.stderr
    assert "(distributed imported, workers listed)" in first.stderr
    pid = resident_pid(address, wait=30)
    assert pid is not None, "the first link left no resident client behind"

    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    second = project.link("second", remote_compiler=compiler, env=env,
                          distributor_args=site.args(f"--cache-dir={site.shared}/cache-r2"))  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert f"(through the resident client, pid {pid})" in second.stderr
    assert "5 jobs: 0 hits, 5 compiled (5 remotely)," in second.stderr
    assert {r[0] for r in runs(compiler)[5:]} <= {"w1", "w2"} and len(runs(compiler)) == 10
    imported = {line.rsplit("|", 1)[1].strip() for line in second.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}  # fmt: skip
    assert "cached_dist.runners.dask_resident" in imported  # the measurement works
    assert not {m for m in imported if m.split(".")[0] in ("distributed", "dask")}
    assert (project.dir / "second").read_bytes() == (project.dir / "first").read_bytes()
    assert project.run_program("second") == project.expected_output


def test_a_resident_client_killed_mid_link_leaves_the_rest_to_this_machine(site: Site) -> None:
    address = site.cluster.address
    pid = resident_pid(address)
    if pid is None:
        from cached_dist.runners import dask_resident

        dask_resident.start(address, 600.0)
        pid = resident_pid(address, wait=30)
    assert pid is not None
    project = build_in(site, "calc", "none", False, "resident-killed")
    compiler = wrapper(site.shared, "clang-resident-killed", remote_only="sleep 3")
    link = link_until_a_compile_starts(site, project, compiler, "cache-rk")
    os.kill(pid, signal.SIGKILL)
    _, err = link.communicate(timeout=120)
    assert link.returncode == 0, err
    assert f"(through the resident client, pid {pid})" in err
    warnings = [x for x in err.splitlines() if "warning" in x]
    assert len(warnings) == 1 and "the resident Dask client stopped" in warnings[0], err
    assert "compiling 5 of 5 jobs locally" in warnings[0], err
    assert project.run_program() == project.expected_output

    # What it left (a socket nobody answers) is refused: the next link works in-process and
    # leaves a new resident client behind.
    again = project.link("again", remote_compiler=compiler,
                         distributor_args=site.args(f"--cache-dir={site.shared}/cache-rk2"))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "(distributed imported, workers listed)" in again.stderr
    assert resident_pid(address, wait=30) not in (None, pid)


def test_a_resident_client_exits_when_idle_and_zero_starts_none(site: Site) -> None:
    address = site.cluster.address
    stop_residents(address)
    project = build_in(site, "calc", "none", False, "resident-idle")
    compiler = wrapper(site.shared, "clang-resident-idle")
    off = project.link("off", remote_compiler=compiler, distributor_args=site.args(
        f"--cache-dir={site.shared}/cache-ri0", "--dask-resident-idle=0"))  # fmt: skip
    assert off.returncode == 0, off.stderr
    assert "(distributed imported, workers listed)" in off.stderr
    assert "5 jobs: 0 hits, 5 compiled (5 remotely)," in off.stderr
    time.sleep(3)
    assert no_resident(address)  # none was started

    short = project.link("short", remote_compiler=compiler, distributor_args=site.args(
        f"--cache-dir={site.shared}/cache-ri1", "--dask-resident-idle=1"))  # fmt: skip
    assert short.returncode == 0, short.stderr
    assert resident_pid(address, wait=30) is not None
    deadline = time.monotonic() + 30  # idle 1 s; it looks every second
    while not no_resident(address):
        assert time.monotonic() < deadline, "the idle resident client did not exit"
        time.sleep(0.2)


def test_a_worker_killed_mid_job_is_replaced_and_the_link_completes(site: Site) -> None:
    """Runs last in the module: a killed worker is restarted by its nanny."""
    project = build_in(site, "calc", "none", False, "killed")
    release = site.shared / "killed-release"  # compiles on workers wait for it (up to 60 s)
    compiler = wrapper(site.shared, "clang-killed", remote_only=(
        f"for _ in $(seq 1200); do [ -e '{release}' ] && break; sleep 0.05; done"))  # fmt: skip
    link = link_until_a_compile_starts(site, project, compiler, "cache-k")
    victim = runs(compiler)[0]  # still running: it waits for the release
    os.kill(int(victim[1]), signal.SIGKILL)  # the worker process running this compile
    os.kill(int(victim[2]), signal.SIGKILL)  # and the compile it started
    release.write_text("")
    _, err = link.communicate(timeout=180)
    assert link.returncode == 0, err
    assert "warning" not in err, err  # Dask gave the task to a worker: no fallback
    assert err.count("compiled on Dask worker") == 5, err
    module = next(a for a in victim[4:] if a.endswith(".o") and "native" not in a)
    again = [r for r in runs(compiler)[1:] if module in r[4:]]
    assert again, runs(compiler)  # the killed job ran again
    assert project.run_program() == project.expected_output
    site.cluster.await_workers(2)  # the nanny restarted the killed worker


def test_a_scheduler_without_workers_and_one_that_dies_mid_link(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    compiler = wrapper(tmp_path, "clang-doomed", remote_only="sleep 4")
    logs = tmp_path / "logs"
    logs.mkdir()
    with cluster(logs, 0, hide=[project.dir]) as c:
        args = [f"--dask-scheduler={c.address}", "--disable"]
        done = project.link(remote_compiler=compiler, distributor_args=args)
        assert done.returncode == 0, done.stderr
        assert (f"warning: the Dask scheduler at {c.address} cannot run jobs (it has no "
                "workers); compiling 5 of 5 jobs locally") in done.stderr  # fmt: skip
        c.start_worker("w1", hide=[project.dir])
        c.await_workers(1)

        started = time.monotonic()
        link = subprocess.Popen(project.link_command("app2", remote_compiler=compiler,
                                                     distributor_args=args),
                                cwd=project.dir, stderr=subprocess.PIPE, text=True)  # fmt: skip
        deadline = time.monotonic() + 60
        while not any(r[0] == "w1" for r in runs(compiler)) and time.monotonic() < deadline:
            time.sleep(0.05)
        c.stop("scheduler", signal.SIGKILL)
        _, err = link.communicate(timeout=120)
    assert link.returncode == 0, err
    assert time.monotonic() - started < 60
    warnings = [x for x in err.splitlines() if "warning" in x]
    assert len(warnings) == 1 and "compiling 5 of 5 jobs locally" in warnings[0], err
    assert all(x.startswith("cached-dist: ") for x in err.splitlines()), err  # Dask's quiet
    assert project.run_program("app2") == project.expected_output
