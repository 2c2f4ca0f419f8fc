"""The cached link in-process, with real child processes as its jobs."""

import json
import sys
from pathlib import Path

import pytest

from cached_dist import jobfile
from cached_dist.jobfile import JobFile
from cached_dist.keys.key import Recipe
from cached_dist.link import cached as caching
from cached_dist.log import Log
from cached_dist.options import Options

from .test_runners import make_job_file

WRITE = "import sys; open(sys.argv[1], 'w').write('object ' + sys.argv[1])"


def pure_job_file(d: Path, n: int) -> JobFile:
    """Jobs whose output depends only on their command line and module."""
    jobs = []
    for i in range(n):
        (d / f"m{i}.o").write_text(f"module {i}")
        jobs.append({"args": [WRITE, f"out{i}.o"], "inputs": [f"m{i}.o"], "outputs": [f"out{i}.o"]})
    doc = {"common": {"args": [sys.executable, "-c"], "inputs": []}, "jobs": jobs}
    (d / "job.json").write_text(json.dumps(doc))
    return jobfile.load(str(d / "job.json"))


def test_cached_relink_hits_every_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    jf = pure_job_file(tmp_path, 3)
    options = Options(jobs=2, cache_dir=str(tmp_path / "cache"))
    first = caching.run_cached(jf, options, Log())
    assert (first.hits, first.compiled) == (0, 3)
    for i in range(3):
        (tmp_path / f"out{i}.o").unlink()
    second = caching.run_cached(jf, options, Log())
    assert (second.hits, second.compiled) == (3, 0)
    assert all((tmp_path / f"out{i}.o").read_text() == f"object out{i}.o" for i in range(3))


def test_a_bug_in_keying_does_not_fail_the_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    jf = make_job_file(tmp_path, [(0, 0)] * 3)

    def broken(*args: object, **kwargs: object) -> str:
        raise ValueError("a bug")

    monkeypatch.setattr(Recipe, "prefix", broken)
    summary = caching.run_cached(jf, Options(jobs=2, cache_dir=str(tmp_path / "c")), Log())
    assert (summary.hits, summary.compiled) == (0, 3)
    assert "cannot compute keys (ValueError: a bug); linking without it" in capsys.readouterr().err
    with pytest.raises(ValueError):  # --debug shows the bug instead
        caching.run_cached(jf, Options(jobs=2, cache_dir=str(tmp_path / "c"), debug=True), Log())
