"""End to end: real clang-22/ld.lld-22 links through cached-dist as a plain distributor."""

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from .toolchain import (
    CLANG,
    LLVM_BIN,
    build,
    cached_dist_exe,
    compilations,
    counting_compiler,
    requires_toolchain,
    run,
)

pytestmark = [requires_toolchain, pytest.mark.e2e]
SERIAL = Path(__file__).parent / "serial_distributor.py"
NO_CACHE = ["--disable"]


@pytest.mark.parametrize(
    ("program", "archive"),
    [("calc", "none"), ("calc", "regular"), ("shapes", "thin"), ("shapes", "regular")],
)
def test_link_runs_and_compiles_every_job(tmp_path: Path, program: str, archive: str) -> None:
    project = build(program, tmp_path / "p", archive)  # type: ignore[arg-type]
    wrapper, counter = counting_compiler(tmp_path)
    done = project.link(distributor_args=NO_CACHE, remote_compiler=wrapper)
    assert done.returncode == 0, done.stderr
    assert project.run_program() == project.expected_output
    jobs = 5 if program == "calc" else 4
    assert compilations(counter) == jobs
    assert f"cached-dist: {jobs} jobs" in done.stderr


def test_link_wrapping_an_external_serial_distributor(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p", "regular")
    wrapper, counter = counting_compiler(tmp_path)
    marker = tmp_path / "serial-ran"
    done = project.link(
        distributor_args=[*NO_CACHE, "--", sys.executable, str(SERIAL), str(marker)],
        remote_compiler=wrapper,
    )
    assert done.returncode == 0, done.stderr
    assert project.run_program() == project.expected_output
    assert marker.read_text() == "5\n"  # the inner distributor got all five jobs
    assert compilations(counter) == 5  # and cached-dist compiled nothing itself
    assert "5 jobs: 0 hits, 5 compiled, " in done.stderr  # no fallback: the summary names none
    assert "fallback" not in done.stderr and "warning" not in done.stderr
    leftovers = [p.name for p in project.dir.iterdir() if ".cached-dist." in p.name]
    assert leftovers == []


def test_inner_distributor_false_succeeds_through_fallback(tmp_path: Path) -> None:
    project = build("shapes", tmp_path / "p", "thin")
    done = project.link(distributor_args=[*NO_CACHE, "--", "/bin/false"])
    assert done.returncode == 0, done.stderr
    assert "warning: inner distributor '/bin/false' failed (exit status 1)" in done.stderr
    assert "4 fallback" in done.stderr
    assert project.run_program() == project.expected_output


def test_no_fallback_fails_the_link(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    done = project.link(distributor_args=[*NO_CACHE, "--no-fallback", "--", "/bin/false"])
    assert done.returncode != 0
    assert "cached-dist: error: " in done.stderr
    assert "distributor execution failed" in done.stderr


def test_failing_backend_job_fails_the_link_with_its_stderr(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    bad = tmp_path / "bad-clang"
    bad.write_text(
        f"#!/bin/sh\ncase \"$*\" in *eval*) echo 'eval: simulated backend crash' >&2; exit 3;; "
        f"esac\nexec '{CLANG}' \"$@\"\n"
    )
    bad.chmod(0o755)
    done = project.link(distributor_args=NO_CACHE, remote_compiler=bad)
    assert done.returncode != 0
    error = [ln for ln in done.stderr.splitlines() if ln.startswith("cached-dist: error:")]
    assert len(error) == 1
    assert "eval.1." in error[0] or "eval." in error[0]  # names the job's primary output
    assert "exit status 3" in error[0] and "simulated backend crash" in error[0]
    assert "cached-dist: [eval.o] eval: simulated backend crash" in done.stderr


def test_design_schema_job_file_from_index_only_link(tmp_path: Path) -> None:
    """Shards from --thinlto-index-only, a design-document job file, objects linked natively."""
    project = build("calc", tmp_path / "p")
    d = project.dir
    index = run(
        [CLANG, "-flto=thin", "-O2", "-fuse-ld=lld", *project.link_inputs, "-o", "app",
         "-Wl,--thinlto-index-only", "-Wl,--thinlto-emit-imports-files"], d,
    )  # fmt: skip
    assert index.returncode == 0, index.stderr
    jobs: list[dict[str, Any]] = []
    for obj in project.link_inputs:
        imports = (d / f"{obj}.imports").read_text().split()
        jobs.append({
            "primary_input": [obj],
            "summary_index": [f"{obj}.thinlto.bc"],
            "primary_output": [obj.replace(".o", ".native.o")],
            "imports": imports,
            "additional_inputs": [],
            "an_unknown_field": {"is": "tolerated"},
        })  # fmt: skip
    document = {
        "common": {
            "linker_output": "app",
            "linker_version": "LLD 22.1.8",
            "args": [str(CLANG), "-O2", "-fpic", "-o", ["primary_output", 0], "-c", "-x", "ir",
                     ["primary_input", 0], ["summary_index", "-fthinlto-index=", 0],
                     "--target=x86_64-pc-linux-gnu"],
        },
        "jobs": jobs,
    }  # fmt: skip
    (d / "design.json").write_text(json.dumps(document))
    done = run([cached_dist_exe(), *NO_CACHE, "design.json"], d)
    assert done.returncode == 0, done.stderr
    natives = [j["primary_output"][0] for j in jobs]
    link = run([LLVM_BIN / "clang", "-fuse-ld=lld", *natives, "-o", "app"], d)
    assert link.returncode == 0, link.stderr
    assert project.run_program() == project.expected_output
