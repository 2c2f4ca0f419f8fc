"""Scenarios of tests/test_docs_output.py for the docs' tables of error messages: each runs
the program on a bad input (a job file with one defect, a bad option of ``flags``,
``cached-dist-cc`` or ``serve``, a directory that is not a cache) and returns the lines it
printed; every run must fail with its documented exit status."""

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from cached_dist.launcher import LAUNCHER

from .test_jobfile_checks import directory, fifo, job, project, symlink, write_job_file
from .toolchain import CLANG, LLVM_BIN, cached_dist_exe

Jobs = Callable[[Path], list[dict[str, list[str]]]]


def _argv(*args: str) -> dict[str, list[str]]:
    """A job of module a.o whose command line adds ``args`` (its output a.native.o)."""
    return {"args": list(args), **job("a.o", "a.native.o")}


#: One defect each: the table "Checks before anything is touched" of docs/reference.md.
JOB_FILES: list[Jobs] = [
    lambda d: [job("a.o", "a.native.o", imports=("missing.o",))],
    lambda d: [job("a.o", "a.native.o", imports=(fifo(d / "pipe"),))],
    lambda d: [job("a.o", "a.native.o", imports=("lib.o/x",))],
    lambda d: [job("a.o", "a.o")],
    lambda d: [job("a.o", symlink(d / "alias.o", "lib.o"), imports=("lib.o",))],
    lambda d: [job("a.o", "same.o"), job("b.o", "./same.o")],
    lambda d: [job("a.o", "x.o", "x.o")],
    lambda d: [job("a.o", "outdir/")],
    lambda d: [job("a.o", directory(d / "out.o"))],
    lambda d: [job("a.o", "lib.o/out.o")],
    lambda d: [job("a.o", "cache/blobs/x.o")],
    lambda d: [_argv("--output=lib.o")],
    lambda d: [_argv("-dumpdir", "pre-", "-o", "a.native.o")],
    lambda d: [_argv("--driver-mode=cl", "/Fodir/")],
    lambda d: [_argv("@args.rsp", "-o", "a.native.o")],
    lambda d: [_argv("--driver-mode=dxc", "-Fo", "a.native.o")],
    lambda d: [job("a.o", "nowhere/a.native.o")],
]


def _cached_dist(cwd: Path, *args: str, env: dict[str, str] | None = None,
                 status: int = 2) -> list[str]:  # fmt: skip
    done = subprocess.run([cached_dist_exe(), *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == status, (args, done.stdout, done.stderr)
    return done.stderr.splitlines()


def job_files(top: Path) -> list[str]:
    """Each job file of JOB_FILES, then one without -o for clang and one that is no file."""
    lines = []
    for n, jobs in enumerate(JOB_FILES):
        d = top / f"job-{n}"
        (d / "cache" / "blobs").mkdir(parents=True)
        project(d)
        write_job_file(d, jobs(d), [])
        lines += _cached_dist(d, f"--cache-dir={d / 'cache'}", "job.json")
    d = top / "no-o"
    d.mkdir()
    project(d)
    doc = {"common": {"args": [str(CLANG), "-c", "-O2"], "inputs": []},
           "jobs": [{"args": ["a.o", "-fthinlto-index=a.thinlto.bc"],
                     "inputs": ["a.o", "a.thinlto.bc"], "outputs": ["a.native.o"]}]}  # fmt: skip
    (d / "job.json").write_text(json.dumps(doc))
    lines += _cached_dist(d, f"--cache-dir={d / 'cache'}", "job.json")
    return lines + _cached_dist(top, "/dev/zero")


def flags(top: Path) -> list[str]:
    """`cached-dist flags` refusing compilers, option words and option combinations."""
    top.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "XDG_CONFIG_HOME": str(top / "cfg"), "CC": "clang-22",
           "PATH": f"{os.path.dirname(cached_dist_exe())}:{LLVM_BIN}:/usr/bin:/bin"}  # fmt: skip
    env.pop("CXX", None)
    (top / "x;y").mkdir()
    (top / "base.toml").write_text("base-dir = 3\n")
    runs: list[tuple[list[str], dict[str, str]]] = [
        (["--cc", "no-such-cc"], {}),
        (["--cc", "clang-14"], {}),
        ([], {"CC": "clang-22 -fno-such-flag"}),
        ([f"--cache-dir={top}/a,b"], {}),
        (["--server", "--no-server"], {}),
        (["--lld-link", "--cc", "no-such-cc"], {}),
        (["--lld-link", "--cc", "gcc"], {}),
        (["--lld-link", "--cc", "clang-14"], {}),
        (["--libtool", "--lld-link"], {}),
        (["--launcher", "--jobs=3"], {}),
        (["--launcher=make"], {}),
        (["--launcher", f"--base-dir={top}/none"], {}),
        (["--launcher", f"--base-dir={top}/base.toml"], {}),
        (["--launcher", "--base-dir=/"], {}),
        (["--launcher"], {"CACHED_DIST_CONFIG": str(top / "base.toml")}),
        (["--launcher=cmake", f"--base-dir={top}/x;y"], {}),
    ]
    lines = []
    for args, more in runs:
        lines += _cached_dist(top, "flags", *args, env={**env, **more})
    return lines


def launcher(top: Path) -> list[str]:
    """`cached-dist-cc` refusing its options, a base directory and a compiler."""
    (top / "a=b").mkdir(parents=True)
    runs: list[tuple[list[str], dict[str, str], int]] = [
        (["--no-such-option", "clang-22"], {}, 2),
        ([], {}, 2),
        (["--base-dir"], {}, 2),
        (["--prefix-map="], {}, 2),
        (["--base-dir=rel", "clang-22"], {}, 2),
        ([f"--base-dir={top}/none", "clang-22"], {}, 2),
        ([f"--base-dir={LAUNCHER}", "clang-22"], {}, 2),
        (["clang-22", "--version"], {"CACHED_DIST_BASE_DIR": ""}, 2),
        (
            [
                "--prefix-map",
                f"--base-dir={top}/a=b",
                "--print",
                "clang-22",
                "-c",
                f"{top}/a=b/x.c",
            ],
            {},
            2,
        ),
        ([f"{top}/none/cc", "-c", "x.c"], {}, 127),
    ]
    lines = []
    for args, more, status in runs:
        env = {k: v for k, v in os.environ.items() if k != "CACHED_DIST_BASE_DIR"} | more
        done = subprocess.run([LAUNCHER, *args], cwd=top, capture_output=True, text=True,
                              env=env, timeout=60)  # fmt: skip
        assert done.returncode == status, (args, done.stderr)
        lines += done.stderr.splitlines()
    return lines


def serve(top: Path) -> list[str]:
    """`cached-dist serve` refusing its arguments and sockets it cannot listen on (each fails
    before it would serve)."""
    top.mkdir(parents=True, exist_ok=True)
    (top / "file.sock").write_text("")
    (top / "dir.sock").mkdir()
    lines = []
    for sock, args in (
        ("s.sock", ["--idle-exit=soon"]),
        ("s.sock", ["--idle-exit=-1"]),
        ("s.sock", ["--no-such-argument"]),
        ("s.sock", ["--status", "--stop"]),
        ("file.sock", []),
        ("dir.sock", []),
        ("none/s.sock", []),
    ):
        env = {**os.environ, "CACHED_DIST_SOCKET": str(top / sock)}
        lines += _cached_dist(top, "serve", *args, env=env)
    return lines


def commands(top: Path) -> list[str]:
    """`stats` and `clear` of what is not a cache: nothing, a file, another directory."""
    (top / "other").mkdir(parents=True)
    (top / "file").write_text("")
    lines = []
    for command, where in (("stats", "none"), ("clear", "file"), ("clear", "other")):
        lines += _cached_dist(top, command, f"--cache-dir={top / where}")
    return lines


def scenarios(top: Path) -> dict[str, list[str]]:
    return {
        "job-file-errors": job_files(top / "jobs"),
        "flags-errors": flags(top / "flags"),
        "launcher-errors": launcher(top / "launcher"),
        "serve-errors": serve(top / "serve"),
        "command-errors": commands(top / "commands"),
    }
