"""The command-line contract and its user-facing errors, through the installed console script."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from cached_dist import __version__
from cached_dist.cli import split_invocation
from cached_dist.errors import UsageError

from .toolchain import cached_dist_exe


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "XDG_CONFIG_HOME": str(cwd / "cfg"), "XDG_CACHE_HOME": str(cwd),
                **(env or {})}  # fmt: skip
    return subprocess.run(
        [cached_dist_exe(), *args], cwd=cwd, capture_output=True, text=True, env=full_env
    )


def assert_one_line_error(done: subprocess.CompletedProcess[str], status: int, text: str) -> None:
    assert done.returncode == status, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("cached-dist: error: ") and text in lines[0], lines[0]
    assert "Traceback" not in done.stderr


def test_split_invocation() -> None:
    assert split_invocation(["j.json"]) == ([], [], "j.json")
    assert split_invocation(["--jobs", "2", "--", "py", "d.py", "-x", "j.json"]) == (
        ["--jobs", "2"], ["py", "d.py", "-x"], "j.json",
    )  # fmt: skip
    for bad in ([], ["--"], ["--verbose"], ["--", "j.json"]):
        with pytest.raises(UsageError):
            split_invocation(bad)


def test_help_and_version(tmp_path: Path) -> None:
    done = cli("--help", cwd=tmp_path)
    assert done.returncode == 0 and "usage: cached-dist" in done.stdout
    assert "CACHED_DIST_JOBS" in done.stdout and "stats" in done.stdout
    done = cli("--version", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == f"cached-dist {__version__}"


def _job_file(d: Path, **job: object) -> Path:
    (d / "m.o").write_text("bitcode")
    (d / "m.o.thinlto.bc").write_text("shard")
    entry = {"args": ["m.o"], "inputs": ["m.o", "m.o.thinlto.bc"], "outputs": ["m.native.o"]}
    entry.update(job)  # type: ignore[arg-type]
    doc = {"common": {"linker_output": "a", "args": ["true"], "inputs": []}, "jobs": [entry]}
    path = d / "job.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("setup", "args", "status", "text"),
    [
        (None, ["missing.json"], 2, "job file not found: missing.json"),
        ("dir", ["adir"], 2, "job file is a directory: adir"),
        ("badjson", ["bad.json"], 2, "job file bad.json: invalid JSON"),
        ("shape", ["shape.json"], 2, "job file shape.json: jobs[0]: missing field 'outputs'"),
        ("noinput", ["job.json"], 2, "input not found: gone.o (job 0, module m.o)"),
        ("nodir", ["job.json"], 2, "output directory does not exist: nowhere"),
        ("ok", ["--no-fallback", "--", "./no-such-distributor", "job.json"], 2,
         "cannot run inner distributor './no-such-distributor'"),
        ("ok", ["--jobs", "x", "job.json"], 2, "option --jobs: not a whole number"),
        ("ok", ["--bogus", "job.json"], 2, "unknown option '--bogus'"),
        ("ok", ["extra", "job.json"], 2, "unexpected argument 'extra'"),
        (None, [], 2, "missing JOBFILE"),
        ("ok", ["--", "job.json"], 2, "'--' must be followed by the inner distributor's command"),
        ("ok", ["--no-fallback", "--", "false", "job.json"], 1,
         "backend job for m.native.o failed: inner distributor 'false' failed (exit status 1)"),
        ("failjob", ["job.json"], 1, "backend job for m.native.o failed: exit status 1"),
        ("ok", ["--debug", "job.json"], 0, ""),
    ],
)  # fmt: skip
def test_user_errors_are_one_line(
    tmp_path: Path, setup: str | None, args: list[str], status: int, text: str
) -> None:
    if setup == "dir":
        (tmp_path / "adir").mkdir()
    elif setup == "badjson":
        (tmp_path / "bad.json").write_text("{not json")
    elif setup == "shape":
        (tmp_path / "shape.json").write_text(
            '{"common": {"args": []}, "jobs": [{"args": [], "inputs": ["a"]}]}'
        )
    elif setup == "noinput":
        _job_file(tmp_path, inputs=["m.o", "m.o.thinlto.bc", "gone.o"])
    elif setup == "nodir":
        _job_file(tmp_path, outputs=["nowhere/m.native.o"])
    elif setup == "ok":
        _job_file(tmp_path, args=["-c", "import sys; open(sys.argv[-1], 'w').write('obj')",
                                  "m.native.o"])  # fmt: skip
        doc = json.loads((tmp_path / "job.json").read_text())
        doc["common"]["args"] = ["python3"]
        (tmp_path / "job.json").write_text(json.dumps(doc))
    elif setup == "failjob":
        _job_file(tmp_path)
        doc = json.loads((tmp_path / "job.json").read_text())
        doc["common"]["args"] = ["false"]
        (tmp_path / "job.json").write_text(json.dumps(doc))
    done = (
        cli("--quiet", *args, cwd=tmp_path) if args and setup != "dir" else cli(*args, cwd=tmp_path)
    )
    if status == 0:
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert (tmp_path / "m.native.o").read_text() == "obj"
    else:
        assert_one_line_error(done, status, text)


def test_bad_environment_and_config_are_one_line(tmp_path: Path) -> None:
    _job_file(tmp_path)
    assert_one_line_error(
        cli("job.json", cwd=tmp_path, env={"CACHED_DIST_JOBS": "many"}), 2,
        "environment variable CACHED_DIST_JOBS: not a whole number",
    )  # fmt: skip
    cfg = tmp_path / "cfg" / "cached-dist"
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text("jobs = [")
    assert_one_line_error(cli("job.json", cwd=tmp_path), 2, "invalid TOML")


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    done = cli("--debug", "missing.json", cwd=tmp_path)
    assert done.returncode == 2
    assert "cached-dist: error: job file not found" in done.stderr
    assert "Traceback" in done.stderr


def test_subcommand_names_are_never_job_files(tmp_path: Path) -> None:
    for name in ("stats", "clear", "trim", "verify"):
        (tmp_path / name).write_text("{}")
        done = cli(name, cwd=tmp_path)
        assert "job file" not in done.stderr, done.stderr
