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


def test_options_may_come_before_a_command(tmp_path: Path) -> None:
    """As with git or ccache: `cached-dist --cache-dir X stats`, `cached-dist -v stats`."""
    cache = tmp_path / "c"
    _cache_with_one_entry(tmp_path, cache)
    for args in (["--cache-dir", str(cache), "stats"], [f"--cache-dir={cache}", "-v", "stats"],
                 ["-v", "--cache-dir", str(cache), "stats", "--json"]):  # fmt: skip
        done = cli(*args, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
        assert str(cache) in done.stdout
    # The value of an option is never taken for a command: a cache directory called stats.
    done = cli("--cache-dir", "stats", "--quiet", "missing.json", cwd=tmp_path)
    assert_one_line_error(done, 2, "job file not found: missing.json")


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["stat"], "unknown command 'stat' (did you mean 'stats'?)"),
        (["verfy"], "unknown command 'verfy' (did you mean 'verify'?)"),
        # The mistyped command is told, not the option after it (it would be taken for the
        # job file's place, the last word).
        (["stat", "--cache-dir=X"], "unknown command 'stat' (did you mean 'stats'?)"),
        (["-v", "stat", "--json"], "unknown command 'stat' (did you mean 'stats'?)"),
        (["-x"], "unknown option '-x' (see cached-dist --help)"),
        (["stats", "extra"], "stats: unexpected argument 'extra' (see cached-dist stats --help)"),
        (["stats", "--bogus"], "unknown option '--bogus' (see cached-dist stats --help)"),
        (["flags", "-x"], "unknown option '-x' (see cached-dist flags --help)"),
        (["clear", "--", "x"], "clear: takes no inner distributor"),
        (["help"], "unknown command 'help' (did you mean '--help'?)"),
        (["--cache-dir"], "option --cache-dir needs a value (DIR)"),
        (["-v", "--jobs"], "option --jobs needs a value (N)"),
    ],
)  # fmt: skip
def test_mistyped_commands_and_options(tmp_path: Path, args: list[str], text: str) -> None:
    assert_one_line_error(cli(*args, cwd=tmp_path), 2, text)


def test_a_file_named_like_a_mistyped_command_is_a_job_file(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("{not json")
    assert_one_line_error(cli("stat", cwd=tmp_path), 2, "job file stat: invalid JSON")


@pytest.mark.parametrize(
    "args", [["stats"], ["--help"], ["--version"], ["stats", "--json"], ["flags"],
             ["serve", "--help"], ["serve", "--status"], ["-v", "stats"]],
)  # fmt: skip
def test_a_closed_pipe_ends_the_output_as_ls_does(tmp_path: Path, args: list[str]) -> None:
    """`cached-dist stats | head -1`: no traceback, no error; killed by SIGPIPE as `ls`
    would be (the reader here is gone before the first write: deterministic)."""
    import signal

    _cache_with_one_entry(tmp_path, tmp_path / "cache-dir")
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
           "CACHED_DIST_DIR": str(tmp_path / "cache-dir"),
           "CC": "/usr/lib/llvm-22/bin/clang", "CACHED_DIST_SOCKET": str(tmp_path / "s")}  # fmt: skip
    try:
        done = subprocess.run([cached_dist_exe(), *args], cwd=tmp_path, stdout=write,
                              stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == -signal.SIGPIPE, done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize(
    "args", [["stats"], ["--help"], ["--version"], ["stats", "--json"], ["flags"],
             ["serve", "--help"], ["serve", "--status"], ["trim", "--help"]],
)  # fmt: skip
def test_output_that_cannot_be_written_is_one_error_line(tmp_path: Path, args: list[str]) -> None:
    """`cached-dist stats > /dev/full`: as `ls` then, an error line and status 2."""
    _cache_with_one_entry(tmp_path, tmp_path / "cache-dir")
    env = {"CACHED_DIST_DIR": str(tmp_path / "cache-dir"), "CC": "/usr/lib/llvm-22/bin/clang",
           "CACHED_DIST_SOCKET": str(tmp_path / "s")}  # fmt: skip
    with open("/dev/full", "w") as full:
        done = subprocess.run([cached_dist_exe(), *args], cwd=tmp_path, stdout=full,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, **env})  # fmt: skip
    assert_one_line_error(done, 2, "cannot write the output: No space left on device")


def _ok_job_file(d: Path) -> None:
    """A job file whose compiler (python3) writes its output."""
    _job_file(d, args=["-c", "import sys; open(sys.argv[-1], 'w').write('obj')", "m.native.o"])
    doc = json.loads((d / "job.json").read_text())
    doc["common"]["args"] = ["python3"]
    (d / "job.json").write_text(json.dumps(doc))


def _cache_with_one_entry(d: Path, cache: Path) -> None:
    _ok_job_file(d)
    done = cli(f"--cache-dir={cache}", "--quiet", "job.json", cwd=d)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_store_warnings_speak_plainly(tmp_path: Path) -> None:
    """A cache problem is told in the system's words, not as a Python exception."""
    _ok_job_file(tmp_path)
    (tmp_path / "file").write_text("not a directory")
    done = cli(f"--cache-dir={tmp_path / 'file' / 'cache'}", "--quiet", "job.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"cached-dist: warning: cache {tmp_path / 'file' / 'cache'}: "), line
    assert "Not a directory" in line and "Error" not in line and "(io)" not in line, line


def test_the_stats_log_has_a_line_per_link(tmp_path: Path) -> None:
    _ok_job_file(tmp_path)
    log = tmp_path / "links.jsonl"
    for _ in range(2):
        done = cli(f"--stats-log={log}", "--quiet", "job.json", cwd=tmp_path)
        assert done.returncode == 0 and done.stderr == "", done.stderr
    first, second = (json.loads(line) for line in log.read_text().splitlines())
    assert (first["output"], first["cwd"], first["jobs"]) == ("a", str(tmp_path), 1)
    assert (first["hits"], first["compiled"], first["runner"]) == (0, 1, "local")
    assert (second["hits"], second["local_hits"], second["compiled"]) == (1, 1, 0)
    assert second["bytes_served"] == 3 and second["seconds"] > 0
    keys = {"time", "cwd", "output", "jobs", "hits", "local_hits", "remote_hits", "waited",
            "compiled", "runner", "compiled_remotely", "fallback", "verified", "mismatches",
            "bytes_served", "remote_tier_hits", "remote_misses", "remote_errors",
            "remote_rejected", "bytes_downloaded", "bytes_uploaded", "seconds"}  # fmt: skip
    assert set(first) == keys
    assert first["remote_tier_hits"] == [] and first["bytes_uploaded"] == 0
    reference = (Path(__file__).parent.parent / "docs" / "reference.md").read_text()
    table = reference[reference.index("### The stats log") :]
    assert all(f"`{key}`" in table for key in keys)
    # A log that cannot be written is a warning; the link goes on.
    done = cli(f"--stats-log={tmp_path}", "--quiet", "job.json", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stderr == f"cached-dist: warning: cannot write the stats log {tmp_path}: " \
                          "Is a directory\n"  # fmt: skip
