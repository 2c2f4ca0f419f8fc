"""Scenarios LLVM's own DTLTO tests exercise that concern a distributor, as our own e2e tests.

Written for cached-dist from the list of situations in LLVM's cross-project-tests/dtlto and
lld/test/ELF/dtlto (paths with spaces, archive members sharing a name, FatLTO objects,
-mllvm options, prepended compiler arguments, a link without ThinLTO, the job file an inner
distributor is given); -save-temps and killed links are covered in test_e2e_side_outputs.py
and test_e2e_cache.py. Each one must link, run, relink from the cache with no compilation,
and give the same bytes as a link without the cache.
"""

import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from .llvm21 import Llvm21, requires_llvm21
from .toolchain import (
    CLANG,
    LLVM_BIN,
    Project,
    build,
    cached_dist_exe,
    compilations,
    counting_compiler,
    requires_toolchain,
    run,
    stats,
)

pytestmark = [requires_toolchain, pytest.mark.e2e]


def relinks_from_cache(
    project: Project, where: Path, extra: Sequence[str] = (), cache: Path | None = None
) -> str:
    """Links twice through one cache and once without it; returns the first link's stderr."""
    where.mkdir(parents=True, exist_ok=True)
    wrapper, counter = counting_compiler(where)
    args = [f"--cache-dir={cache or where / 'cache'}"]
    first = project.link("first", distributor_args=args, remote_compiler=wrapper, extra=extra)
    assert first.returncode == 0, first.stderr
    jobs = int(first.stderr.split(" jobs: ", 1)[0].rsplit(" ", 1)[-1])
    second = project.link("second", distributor_args=args, remote_compiler=wrapper, extra=extra)
    assert second.returncode == 0, second.stderr
    compiled = compilations(counter)
    assert f"{jobs} jobs: {jobs} hits, 0 compiled" in second.stderr
    assert compilations(counter) == compiled
    plain = project.link("plain", distributor_args=["--disable"], remote_compiler=wrapper,
                         extra=extra)  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    outputs = {(project.dir / n).read_bytes() for n in ("first", "second", "plain")}
    assert len(outputs) == 1
    assert project.run_program("second") == project.expected_output
    assert stats(cache or where / "cache").get("shards_not_canonical", 0) == 0
    return first.stderr


def test_paths_with_spaces(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "dir with spaces", "regular")
    for name in list(project.link_inputs):
        spaced = name.replace(".", " x.", 1)
        (project.dir / name).rename(project.dir / spaced)
        project.link_inputs[project.link_inputs.index(name)] = spaced
    relinks_from_cache(project, tmp_path / "w")


@pytest.mark.parametrize("archive", ["regular", "thin"])
def test_fat_lto_objects(tmp_path: Path, archive: str) -> None:
    project = build("calc", tmp_path / "p", archive, cflags=["-ffat-lto-objects"])  # type: ignore[arg-type]
    relinks_from_cache(project, tmp_path / "w", ["-ffat-lto-objects"])


@pytest.mark.parametrize(
    ("extra", "changed"),
    [
        (["-Wl,--thinlto-remote-compiler-arg=-mllvm",
          "-Wl,--thinlto-remote-compiler-arg=-inline-threshold=0"], 5),
        (["-Wl,--thinlto-remote-compiler-prepend-arg=-mllvm",
          "-Wl,--thinlto-remote-compiler-prepend-arg=-inline-threshold=0"], 5),
        (["-Wl,-mllvm,-import-instr-limit=0"], 1),  # changes the shards of importing jobs
    ],
    ids=["mllvm-remote-arg", "prepend-arg", "mllvm-thin-link"],
)  # fmt: skip
def test_backend_options_are_in_the_key(tmp_path: Path, extra: list[str], changed: int) -> None:
    """After a link without the option, a link with it misses (at least ``changed`` jobs),
    then hits its own entries."""
    project = build("calc", tmp_path / "p", "regular")
    cache = tmp_path / "cache"
    base = relinks_from_cache(project, tmp_path / "base", cache=cache)
    assert "5 jobs: 0 hits, 5 compiled" in base
    err = relinks_from_cache(project, tmp_path / "opt", extra, cache=cache)
    compiled = int(err.split(" compiled", 1)[0].rsplit(" ", 1)[-1])
    assert changed <= compiled <= 5, err


def _write(directory: Path, name: str, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)


def same_name_members(where: Path, cc: list[str], env: dict[str, str] | None = None) -> Project:
    """Two archives holding a member part.o each, and one archive holding two dup.o."""
    _write(where, "main.c", '#include <stdio.h>\nint one(void); int two(void); int three(void);'
           ' int four(void);\nint main(void) { printf("%d %d %d %d\\n", one(), two(), three(),'
           ' four()); return 0; }\n')  # fmt: skip
    _write(where / "a", "part.c", "int one(void) { return 1; }\n")
    _write(where / "b", "part.c", "int two(void) { return 2; }\n")
    _write(where / "d1", "dup.c", "int three(void) { return 3; }\n")
    _write(where / "d2", "dup.c", "int four(void) { return 4; }\n")
    for src in ("main.c", "a/part.c", "b/part.c", "d1/dup.c", "d2/dup.c"):
        done = run([*cc, "-flto=thin", "-O2", "-c", src, "-o", src[:-2] + ".o"], where, env=env)
        assert done.returncode == 0, done.stderr
    ar = LLVM_BIN / "llvm-ar"
    for d in ("a", "b"):
        assert run([ar, "rcs", "libpart.a", "part.o"], where / d).returncode == 0
    assert run([ar, "rcs", "libdup.a", "d1/dup.o"], where).returncode == 0
    assert run([ar, "qs", "libdup.a", "d2/dup.o"], where).returncode == 0  # a second dup.o
    (where / "expected.txt").write_text("1 2 3 4\n")
    project = Project("same-name", where, ["main.o", "a/libpart.a", "b/libpart.a", "libdup.a"],
                      False)  # fmt: skip
    return project


class _Expected(Project):
    @property
    def expected_output(self) -> str:
        return (self.dir / "expected.txt").read_text()


def test_two_archive_members_with_the_same_name(tmp_path: Path) -> None:
    p = same_name_members(tmp_path / "p", [str(CLANG)])
    project = _Expected(p.name, p.dir, p.link_inputs, p.cxx)
    relinks_from_cache(project, tmp_path / "w")


@requires_llvm21
def test_two_archive_members_with_the_same_name_on_llvm21(tmp_path: Path) -> None:
    """LLD 21 names each by offset (``libdup.a(dup.o at N)``) and writes neither."""
    tc = Llvm21(tmp_path / "tc")
    from .llvm21 import ZIG

    p = same_name_members(tmp_path / "p", [str(ZIG), "cc", "-target", "x86_64-linux-gnu"], tc.env)
    project = _Expected(p.name, p.dir, p.link_inputs, p.cxx)
    cache = f"--cache-dir={tmp_path / 'cache'}"
    for out, summary in (("first", "0 hits, 5 compiled"), ("second", "5 hits, 0 compiled")):
        done = run(tc.link_command(project, out, [cache, "--verbose"]), project.dir, env=tc.env)
        assert done.returncode == 0, done.stderr
        assert summary in done.stderr and done.stderr.count("libdup.a(dup.o at ") == 2
        assert project.run_program(out) == "1 2 3 4\n"
    assert not [n for n in project.dir.rglob("*") if n.name.endswith(")")]


def test_a_link_without_thinlto_never_runs_the_distributor(tmp_path: Path) -> None:
    where = tmp_path / "p"
    shutil.copytree(Path(__file__).parent / "programs" / "calc", where)
    objects = []
    for src in sorted(where.glob("*.c")):
        done = run([CLANG, "-O2", "-c", src.name, "-o", src.stem + ".o"], where)
        assert done.returncode == 0, done.stderr
        objects.append(src.stem + ".o")
    project = Project("calc", where, objects, False)
    done = project.link(distributor_args=[f"--cache-dir={tmp_path / 'cache'}"])
    assert done.returncode == 0, done.stderr
    assert "cached-dist" not in done.stderr
    assert project.run_program() == project.expected_output


def test_a_job_file_without_jobs(tmp_path: Path) -> None:
    job_file = tmp_path / "empty.json"
    job_file.write_text(json.dumps({"common": {"linker_output": "a", "args": ["clang"],
                                               "inputs": []}, "jobs": []}))  # fmt: skip
    done = run([cached_dist_exe(), f"--cache-dir={tmp_path / 'cache'}", job_file], tmp_path)
    assert done.returncode == 0 and "0 jobs: 0 hits, 0 compiled" in done.stderr, done.stderr


# Our statement of the rules LLVM's validator (llvm/utils/dtlto/validate.py) applies to the
# job file a distributor is given: exactly these fields, of these types and sizes.
VALIDATOR = """
import json, subprocess, sys
doc = json.load(open(sys.argv[-1]))
def strings(value, least):
    return isinstance(value, list) and len(value) >= least and all(isinstance(s, str) for s in value)
problems = []
if set(doc) != {"common", "jobs"}: problems.append("top-level fields %s" % sorted(doc))
common = doc.get("common", {})
if set(common) != {"linker_output", "args", "inputs"}: problems.append("common %s" % sorted(common))
if not isinstance(common.get("linker_output"), str): problems.append("linker_output")
if not strings(common.get("args"), 1): problems.append("common.args")
if not strings(common.get("inputs"), 0): problems.append("common.inputs")
for i, job in enumerate(doc.get("jobs", [])):
    if not isinstance(job, dict) or set(job) != {"args", "inputs", "outputs"}:
        problems.append("job %d fields" % i); continue
    for field, least in (("args", 0), ("inputs", 2), ("outputs", 1)):
        if not strings(job[field], least): problems.append("job %d %s" % (i, field))
with open(sys.argv[1], "a") as f:
    f.write("%d jobs: %s\\n" % (len(doc.get("jobs", [])), "; ".join(problems) or "valid"))
for job in doc["jobs"]:
    if subprocess.run(common["args"] + job["args"]).returncode:
        sys.exit(1)
"""


def test_the_job_file_for_an_inner_distributor_passes_llvms_validator_rules(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p", "regular")
    inner = tmp_path / "validate.py"
    inner.write_text(VALIDATOR)
    verdicts = tmp_path / "verdicts"
    cache = f"--cache-dir={tmp_path / 'cache'}"
    done = project.link(distributor_args=[cache, "--", sys.executable, str(inner), str(verdicts)])
    assert done.returncode == 0, done.stderr
    # A second link after one module changed hands the inner distributor only some jobs.
    ops = project.dir / "ops.c"
    ops.write_text(ops.read_text() + "\nint unused_extra(int x) { return x * 7; }\n")
    assert (
        run([CLANG, "-flto=thin", "-O2", "-c", "ops.c", "-o", "ops.o"], project.dir).returncode == 0
    )
    assert run([LLVM_BIN / "llvm-ar", "rcs", "libcalc.a", "ops.o"], project.dir).returncode == 0
    done = project.link("again", distributor_args=[cache, "--", sys.executable, str(inner),
                                                   str(verdicts)])  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = verdicts.read_text().splitlines()
    assert lines[0] == "5 jobs: valid" and len(lines) == 2 and lines[1].endswith(": valid")
    assert 0 < int(lines[1].split()[0]) < 5
    assert project.run_program("again") == project.expected_output
