"""The local runner and the wrapped-distributor runner with real child processes."""

import json
import sys
import time
from pathlib import Path

import pytest

from cached_dist import jobfile
from cached_dist.errors import JobsFailedError
from cached_dist.jobfile import Job, JobFile
from cached_dist.link.dispatch import dispatch, raise_failures
from cached_dist.log import Log
from cached_dist.options import Options
from cached_dist.runners import Result
from cached_dist.runners.local import LocalRunner

# A fake backend: records its start and end, sleeps, prints a diagnostic, writes its output.
JOB = """
import sys, time, os
out, sleep, status, log = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(log, "a") as f: f.write(f"start {out} {time.time()}\\n")
time.sleep(sleep)
print(f"note from {out}", file=sys.stderr)
if status == 0:
    open(out, "w").write("object " + out)
with open(log, "a") as f: f.write(f"end {out} {time.time()}\\n")
sys.exit(status)
"""


def make_job_file(d: Path, specs: list[tuple[float, int]]) -> JobFile:
    (d / "job.py").write_text(JOB)
    jobs = []
    for i, (sleep, status) in enumerate(specs):
        (d / f"m{i}.o").write_text(f"module {i}")
        jobs.append({"args": [f"out{i}.o", str(sleep), str(status), str(d / "events.log")],
                     "inputs": [f"m{i}.o"], "outputs": [str(d / f"out{i}.o")]})  # fmt: skip
    doc = {"common": {"args": [sys.executable, str(d / "job.py")], "inputs": []}, "jobs": jobs}
    (d / "job.json").write_text(json.dumps(doc))
    return jobfile.load(str(d / "job.json"))


def run_local(parallel: int, jf: JobFile, jobs: tuple[Job, ...]) -> list[Result]:
    """Every result the local runner reported, in the order it reported them."""
    results: list[Result] = []
    LocalRunner(parallel, Log()).run(jf, jobs, results.append)
    return results


def failures(results: list[Result]) -> list[Result]:
    return [r for r in results if not r.ok]


def events(d: Path) -> list[tuple[str, str, float]]:
    rows = [line.split() for line in (d / "events.log").read_text().splitlines()]
    return sorted(((kind, out, float(t)) for kind, out, t in rows), key=lambda r: r[2])


def max_concurrency(d: Path) -> int:
    level = peak = 0
    for kind, _, _ in events(d):
        level += 1 if kind == "start" else -1
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize("parallel", [1, 3])
def test_local_runner_respects_parallelism(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parallel: int
) -> None:
    monkeypatch.chdir(tmp_path)
    jf = make_job_file(tmp_path, [(0.3, 0)] * 6)
    results = run_local(parallel, jf, jf.jobs)
    assert failures(results) == [] and len(results) == 6
    assert max_concurrency(tmp_path) == parallel
    assert all((tmp_path / f"out{i}.o").read_text() == f"object out{i}.o" for i in range(6))


def test_local_runner_relays_diagnostics_tagged_by_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    jf = make_job_file(tmp_path, [(0, 0), (0, 0)])
    run_local(2, jf, jf.jobs)
    err = capsys.readouterr().err
    assert "cached-dist: [m0.o] note from out0.o" in err
    assert "cached-dist: [m1.o] note from out1.o" in err


def test_failure_stops_new_jobs_and_lets_running_ones_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # job 0 fails fast while job 1 is still running; jobs 2.. must never start.
    jf = make_job_file(tmp_path, [(0.1, 7), (0.8, 0), (0, 0), (0, 0)])
    failed = failures(run_local(2, jf, jf.jobs))
    assert [r.job.index for r in failed] == [0, 2, 3]
    assert failed[0].failure is not None
    assert failed[0].failure.startswith("exit status 7: note from out0.o")
    assert {r.failure for r in failed[1:]} == {"not started after an earlier job failed"}
    started = {out for kind, out, _ in events(tmp_path) if kind == "start"}
    ended = {out for kind, out, _ in events(tmp_path) if kind == "end"}
    assert started == ended == {"out0.o", "out1.o"}
    assert (tmp_path / "out1.o").exists()


def test_missing_program_is_a_job_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    jf = make_job_file(tmp_path, [(0, 0)])
    jf = JobFile(jf.path, jf.schema, "", None, ("/no/such/compiler",), (), jf.jobs)
    (failure,) = run_local(1, jf, jf.jobs)
    assert "cannot run /no/such/compiler: No such file or directory" in (failure.failure or "")


def test_sigterm_stops_children(tmp_path: Path) -> None:
    """SIGTERM to cached-dist mid-run: its jobs are stopped, none keeps running."""
    import os
    import signal
    import subprocess

    import psutil

    from .toolchain import cached_dist_exe

    make_job_file(tmp_path, [(60, 0), (60, 0)])
    proc = subprocess.Popen([cached_dist_exe(), "--disable", "-j2", "job.json"], cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        children = psutil.Process(proc.pid).children()
        if len(children) == 2 and (tmp_path / "events.log").exists():
            break
        time.sleep(0.05)
    assert len(children) == 2
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "cached-dist: error: interrupted" in err
    assert "Traceback" not in err
    _gone, alive = psutil.wait_procs(children, timeout=5)
    assert alive == []
    assert not any(kind == "end" for kind, _, _ in events(tmp_path))


INNER = """
import json, sys
doc = json.load(open(sys.argv[-1]))
for job in doc["jobs"][: int(sys.argv[1])]:
    open(job["outputs"][0], "w").write("from inner")
sys.exit(int(sys.argv[2]))
"""


@pytest.mark.parametrize(("done_by_inner", "status", "fallback"), [(3, 0, 0), (1, 0, 2), (3, 4, 3)])
def test_wrapped_runner_and_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, done_by_inner: int, status: int, fallback: int
) -> None:
    """Missing outputs are compiled locally; an inner failure redoes all of its jobs."""
    monkeypatch.chdir(tmp_path)
    jf = make_job_file(tmp_path, [(0, 0)] * 3)
    (tmp_path / "inner.py").write_text(INNER)
    inner = (sys.executable, str(tmp_path / "inner.py"), str(done_by_inner), str(status))
    outcome = dispatch(jf, jf.jobs, Options(jobs=2, inner=inner), Log())
    assert outcome.fallback == fallback and outcome.compiled == 3
    texts = [(tmp_path / f"out{i}.o").read_text() for i in range(3)]
    assert texts.count("from inner") == 3 - fallback


@pytest.mark.parametrize(
    ("done_by_inner", "status", "message"),
    [(1, 0, "backend job for .*out1.o failed: inner distributor .* did not write .*out1.o "
            r"\(and 1 more failed jobs\)"),
     (3, 4, r"backend job for .*out0.o failed: inner distributor .* failed \(exit status 4\)")],
)  # fmt: skip
def test_no_fallback_reports_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, done_by_inner: int, status: int, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    jf = make_job_file(tmp_path, [(0, 0)] * 3)
    (tmp_path / "inner.py").write_text(INNER)
    inner = (sys.executable, str(tmp_path / "inner.py"), str(done_by_inner), str(status))
    with pytest.raises(JobsFailedError, match=message):
        outcome = dispatch(jf, jf.jobs, Options(jobs=2, inner=inner, no_fallback=True), Log())
        raise_failures(outcome.failures)


def test_largest_module_starts_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    jf = make_job_file(tmp_path, [(0, 0)] * 4)
    for i, size in enumerate([10, 300, 20, 300]):
        (tmp_path / f"m{i}.o").write_text("x" * size)
    run_local(1, jf, jf.jobs)
    starts = [out for kind, out, _ in events(tmp_path) if kind == "start"]
    assert starts == ["out1.o", "out3.o", "out2.o", "out0.o"]
