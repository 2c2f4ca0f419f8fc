"""End to end: side outputs, an empty compiler, and signals while an inner distributor runs."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from .toolchain import LLVM_BIN, build, compilations, counting_compiler, requires_toolchain, stats

pytestmark = [requires_toolchain, pytest.mark.e2e]


def side_files(directory: Path, suffix: str) -> set[str]:
    return {p.name for p in directory.iterdir() if p.name.endswith(suffix)}


@pytest.mark.parametrize(
    ("option", "suffix"),
    [("-gsplit-dwarf", ".dwo"), ("-save-temps=obj", ".s.resolution.txt"),
     ("-ftime-trace", ".native.json")],
)  # fmt: skip
def test_side_outputs_are_written_by_every_link(tmp_path: Path, option: str, suffix: str) -> None:
    """Two links of copies of one build directory on one cache: each gets its own side
    files, and a fresh compile of every job agrees with what the link used."""
    project = build("calc", tmp_path / "p", cflags=["-g"])
    wrapper, counter = counting_compiler(tmp_path)
    cache = tmp_path / "cache"
    links = []
    for name in ("one", "two"):
        where = tmp_path / name
        shutil.copytree(project.dir, where)
        done = project.link(
            cwd=where, remote_compiler=wrapper,
            extra=[f"-Wl,--thinlto-remote-compiler-arg={option}"],
            distributor_args=[f"--cache-dir={cache}", "--verify-hits=1", "--verbose"],
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "HIT MISMATCH" not in done.stderr
        assert "not cached: " in done.stderr
        assert project.run_program(cwd=where) == project.expected_output
        links.append(where)
    assert compilations(counter) == 10  # never served from the cache
    one, two = (side_files(d, suffix) for d in links)
    assert len(one) == len(two) == 5, (one, two)
    if option == "-gsplit-dwarf":
        dump = subprocess.run([LLVM_BIN / "llvm-dwarfdump", "--debug-info", links[1] / "app"],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
        named = {links[1] / n for n in re.findall(r'DW_AT_dwo_name\s+\("([^"]+)"\)', dump)}
        assert named == {links[1] / n for n in two}  # the second link's own, all present
    assert stats(cache)["jobs_not_cacheable"] == 10


INNER = """
import json, subprocess, sys
doc = json.load(open(sys.argv[-1]))
common = [sys.argv[1] if a == "" else a for a in doc["common"]["args"]]
for job in doc["jobs"]:
    if subprocess.run([*common, *job["args"]]).returncode != 0:
        sys.exit(1)
"""


def test_an_empty_compiler_is_passed_to_an_inner_distributor(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    inner = tmp_path / "inner.py"
    inner.write_text(INNER)
    done = project.link(
        extra=["-Wl,--thinlto-remote-compiler="],
        distributor_args=[f"--cache-dir={tmp_path / 'cache'}", "--",
                          sys.executable, str(inner), str(LLVM_BIN / "clang")],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "5 jobs: 0 hits, 5 compiled, " in done.stderr and "fallback" not in done.stderr
    assert project.run_program() == project.expected_output


def test_an_empty_compiler_without_an_inner_distributor_is_one_error(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    done = project.link(extra=["-Wl,--thinlto-remote-compiler="],
                        distributor_args=[f"--cache-dir={tmp_path / 'cache'}"])  # fmt: skip
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if line.startswith("cached-dist")]
    assert len(ours) == 1, done.stderr
    assert "--thinlto-remote-compiler" in ours[0] and "common.args[0] is empty" in ours[0]
    assert "Traceback" not in done.stderr


SLOW_INNER = """
import json, subprocess, sys
doc = json.load(open(sys.argv[-1]))
procs = [subprocess.Popen(doc["common"]["args"] + job["args"]) for job in doc["jobs"]]
sys.exit(max(p.wait() for p in procs))
"""


def _members(pgids: set[int]) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) in pgids and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.Error, ProcessLookupError):
            pass
    return found


def test_sigterm_stops_the_inner_distributor_and_its_compilers(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, counter = counting_compiler(tmp_path, sleep=4.0)
    inner = tmp_path / "inner.py"
    inner.write_text(SLOW_INNER)
    link = subprocess.Popen(
        project.link_command(remote_compiler=wrapper, distributor_args=[
            f"--cache-dir={tmp_path / 'cache'}", "--", sys.executable, str(inner)]),
        cwd=project.dir, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while compilations(counter) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert compilations(counter) == 5, "the inner distributor did not start every compile"
    ours = [p for p in psutil.Process(link.pid).children(recursive=True)
            if any(a.endswith("/cached-dist") for a in p.cmdline()[:2])]  # fmt: skip
    assert len(ours) == 1
    tree = ours[0].children(recursive=True)
    groups = {os.getpgid(p.pid) for p in tree}
    assert tree and ours[0].pid not in groups  # the inner tool runs in a group of its own
    ours[0].send_signal(signal.SIGTERM)
    _, err = link.communicate(timeout=60)
    assert link.returncode != 0 and "cached-dist: error: interrupted" in err
    assert _members(groups) == []
    time.sleep(5)  # a stray compiler would have finished its sleep and written by now
    assert not list(project.dir.glob("*.native.o")), list(project.dir.glob("*.native.o"))
    assert not list(project.dir.glob("*.cached-dist.*.json"))


def test_a_job_file_left_by_a_killed_run_is_swept(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    inner = tmp_path / "inner.py"
    inner.write_text(SLOW_INNER)
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = os.uname().nodename
    stale = project.dir / f"app.123.dist-file.cached-dist.{host}.{dead.pid}.json"
    stale.write_text(json.dumps({"common": {}, "jobs": []}))
    other_host = project.dir / f"app.1.dist-file.cached-dist.elsewhere.{dead.pid}.json"
    other_host.write_text("{}")
    done = project.link(distributor_args=[f"--cache-dir={tmp_path / 'cache'}", "--",
                                          sys.executable, str(inner)])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not stale.exists()
    assert other_host.exists()  # another host's run may still be alive
