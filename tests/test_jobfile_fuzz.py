"""A job-file fuzzer: seeded mutations of real job files, through the installed console script.

Job files are captured once per module from real clang-22/ld.lld-22 links (C and C++, regular
and thin archives) with their inputs. Each case copies one capture, damages its job file
(structural edits: outputs that are inputs or repeat, FIFOs, devices, directories, paths
outside, wrong types, dropped fields, swapped inputs, changed options; and raw byte damage),
runs cached-dist with a cache shared by every case, and checks:

- the exit status is 0, 1 or 2 (never 3, the internal error) and there is no traceback;
- it ended within a bound (a FIFO or device is never read);
- no file changed outside the job's outputs and the paths its command names (the directory
  holding the copy and a sibling "outside" directory are snapshotted before and after: path,
  kind, size, mtime); exit 2 changes nothing at all;
- the cache is never poisoned: every few cases and at the end, the untouched job files are
  served from the shared cache and give the reference objects, and real clean links give
  the reference binaries.

CACHED_DIST_FUZZ_CASES sets the number of cases (CI: 100; ``make fuzz``: 2000) and
CACHED_DIST_FUZZ_SEED the first seed, CACHED_DIST_FUZZ_EXE another installation's console
script to fuzz (the references always come from this one); a failure names its seed, and rerunning that one case
is ``CACHED_DIST_FUZZ_SEED=N CACHED_DIST_FUZZ_CASES=1``.
"""

import contextlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from store import LAYOUT
from store.layout import TAG

from .test_jobfile_checks import snapshot
from .toolchain import Project, build, cached_dist_exe, requires_toolchain

pytestmark = [requires_toolchain, pytest.mark.e2e]

CASES = int(os.environ.get("CACHED_DIST_FUZZ_CASES", "100"))
FIRST_SEED = int(os.environ.get("CACHED_DIST_FUZZ_SEED", "0"))
TARGET = os.environ.get("CACHED_DIST_FUZZ_EXE")  # another installation to fuzz, if set
CHECK_EVERY = 40  # cases between checks that the shared cache still serves the right bytes
BOUND = float(
    os.environ.get("CACHED_DIST_FUZZ_BOUND", "60")
)  # seconds a case may take; killed at 2x
PROJECTS = [("calc", "regular"), ("calc", "thin"), ("shapes", "regular"), ("shapes", "thin")]
CAPTURE = Path(__file__).parent / "capture_jobfile.py"


@dataclass
class Capture:
    label: str
    saved: Path  # job.json, every input, reference/ and reference.json
    project: Project
    binary: bytes


@dataclass
class Fuzz:
    root: Path
    cache: Path
    captures: list[Capture]


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory: pytest.TempPathFactory) -> Fuzz:
    root = tmp_path_factory.mktemp("fuzz")
    captures = []
    for name, archive in PROJECTS:
        project = build(name, root / f"{name}-{archive}", archive)  # type: ignore[arg-type]
        saved = root / f"captured-{name}-{archive}"
        done = project.link("app", distributor=sys.executable, distributor_args=[
            str(CAPTURE), str(saved), cached_dist_exe(), f"--cache-dir={root / 'capture-cache'}",
            "--quiet"])  # fmt: skip
        assert done.returncode == 0, done.stderr
        binary = (project.dir / "app").read_bytes()
        captures.append(Capture(f"{name}-{archive}", saved, project, binary))
    return Fuzz(root, root / "cache", captures)


# -- mutations ---------------------------------------------------------------------------


def _paths(doc: dict[str, Any], key: str) -> list[str]:
    found = []
    for job in doc.get("jobs", []):
        if isinstance(job, dict) and isinstance(job.get(key), list):
            found += [p for p in job[key] if isinstance(p, str)]
    return found


def mutate(rng: random.Random, doc: dict[str, Any], work: Path, cache: Path) -> str:
    """Applies one random edit to ``doc`` (may create odd files in ``work``); returns its name."""
    if not isinstance(doc.get("jobs"), list):
        doc["jobs"] = []  # an earlier edit dropped it: this one puts back an empty list
    if not isinstance(doc.get("common"), dict):
        doc["common"] = {}
    jobs = doc["jobs"]
    job = rng.choice(jobs) if jobs else {}
    inputs, outputs = _paths(doc, "inputs"), _paths(doc, "outputs")
    strange: dict[str, Callable[[], str]] = {
        "fifo": lambda: _fifo(work / f"fifo{rng.randrange(1000)}"),
        # Devices only through symlinks in the copy: a cached-dist that wrongly removes an
        # output then removes the link, never /dev/zero itself (the tests may run as root).
        "dev-zero": lambda: _symlink(work / "zero", "/dev/zero"),
        "dev-null": lambda: _symlink(work / "null", "/dev/null"),
        "directory": lambda: _directory(work / f"dir{rng.randrange(1000)}"),
        "outside": lambda: "../outside/keep.o",
        "outside-abs": lambda: str(work.parent / "outside" / "keep.o"),
        "missing": lambda: "no/such/file.o",
        "cache": lambda: str(cache / rng.choice(LAYOUT) / "x.o"),
        "empty": lambda: "",
    }

    def a_path() -> str:
        kind = rng.choice([*strange, "input", "output"])
        if kind == "input" and inputs:
            return rng.choice(inputs)
        if kind == "output" and outputs:
            return rng.choice(outputs)
        return strange.get(kind, strange["missing"])()

    def a_value() -> Any:
        return rng.choice([None, 0, 1.5, True, "x", [], {}, [1], {"a": []}, [None], a_path()])

    edits: dict[str, Callable[[], object]] = {
        "output-is-input": lambda: _set(job, "outputs", rng.choice(inputs) if inputs else "x"),
        "output-repeats": lambda: _set(job, "outputs", rng.choice(outputs) if outputs else "x"),
        "output-strange": lambda: _set(job, "outputs", a_path()),
        "input-strange": lambda: _put(job, "inputs", a_path()),
        "common-input-strange": lambda: doc["common"].setdefault("inputs", []).append(a_path()),
        "module-strange": lambda: _set(job, "inputs", a_path()),
        "swap-inputs": lambda: rng.shuffle(job.get("inputs") or []),
        "drop-field": lambda: job.pop(rng.choice(["args", "inputs", "outputs"]), None),
        "drop-common-field": lambda: doc["common"].pop(rng.choice(["args", "inputs"]), None),
        "wrong-type": lambda: job.__setitem__(rng.choice(["args", "inputs", "outputs"]), a_value()),
        "wrong-element": lambda: _put(job, rng.choice(["args", "inputs", "outputs"]), a_value()),
        "empty-list": lambda: job.__setitem__(rng.choice(["inputs", "outputs"]), []),
        "duplicate-job": lambda: jobs.append(json.loads(json.dumps(job))) if jobs else None,
        "drop-job": lambda: jobs.pop(rng.randrange(len(jobs))) if jobs else None,
        "shuffle-jobs": lambda: rng.shuffle(jobs),
        "no-jobs": lambda: jobs.clear(),
        "drop-arg": lambda: (job.get("args") or [0]).pop(),
        "opt-level": lambda: doc["common"]["args"].append(rng.choice(["-O0", "-O1", "-O3"])),
        "arg-strange": lambda: _put(job, "args", a_path()),
        "design-key": lambda: job.__setitem__(
            rng.choice(["primary_input", "primary_output"]), [a_path()]
        ),
        "top-level": lambda: doc.pop(rng.choice(["common", "jobs"])),
    }
    name = rng.choice(list(edits))
    # An earlier edit may have removed what this one edits: the document stays as it was.
    with contextlib.suppress(KeyError, IndexError, TypeError, AttributeError):
        edits[name]()
    return name


def _fifo(path: Path) -> str:
    if not path.exists():
        os.mkfifo(path)
    return path.name


def _symlink(path: Path, target: str) -> str:
    if not path.is_symlink():
        path.symlink_to(target)
    return path.name


def _directory(path: Path) -> str:
    path.mkdir(exist_ok=True)
    return path.name


def _set(job: dict[str, Any], key: str, value: str) -> None:
    items = job.get(key)
    if isinstance(items, list) and items:
        items[random.Random(value).randrange(len(items))] = value
    else:
        job[key] = [value]


def _put(job: dict[str, Any], key: str, value: Any) -> None:
    items = job.get(key)
    if isinstance(items, list):
        items.insert(random.Random(str(value)).randrange(len(items) + 1), value)


def damage(rng: random.Random, text: bytes) -> bytes:
    """Raw byte damage: flips, cuts, insertions."""
    data = bytearray(text)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        kind = rng.choice(["flip", "cut", "insert", "truncate"])
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << rng.randrange(8)
        elif kind == "cut":
            del data[at : at + rng.randint(1, 8)]
        elif kind == "insert":
            data[at:at] = rng.choice([b"\x00", b"\xff", b'"', b"[", b"}", b",", b"\\u0000", b"9"])
        else:
            del data[at:]
    return bytes(data)


# -- invariants ----------------------------------------------------------------------------


def may_change(doc: object, work: Path, root: Path) -> set[str]:
    """What a link may write: the outputs, and the paths its command names (the compiler
    obeys its command line; -o must name an output, which cached-dist checks)."""
    tables = []
    if isinstance(doc, dict):
        tables = [doc.get("common"), *(doc["jobs"] if isinstance(doc.get("jobs"), list) else [])]
    named: set[str] = set()
    for table in tables:
        if not isinstance(table, dict):
            continue
        for key in ("args", "outputs", "primary_output"):
            values = table.get(key)
            for value in values if isinstance(values, list) else []:
                for text in value if isinstance(value, list) else [value]:
                    if isinstance(text, str):
                        for path in (text, text.partition("=")[2]):
                            if path:
                                named.add(os.path.relpath(os.path.normpath(work / path), root))
    return named


def _lld_files(doc: object) -> tuple[list[str], list[str]] | None:
    """(inputs, outputs) of an LLD-schema document whose fields have the right types."""
    if not isinstance(doc, dict) or not isinstance(doc.get("common"), dict):
        return None
    common, jobs = doc["common"], doc.get("jobs")
    common_inputs = common.get("inputs", [])
    if (
        not isinstance(jobs, list)
        or not _strings(common_inputs)
        or not _strings(common.get("args"))
    ):
        return None
    inputs, outputs = list(common_inputs), []
    for job in jobs:
        if not isinstance(job, dict) or not all(_strings(job.get(k)) for k in
                                                ("args", "inputs", "outputs")):  # fmt: skip
            return None
        inputs += job["inputs"]
        outputs += job["outputs"]
    return inputs, outputs


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def must_refuse(doc: object, work: Path) -> str | None:
    """The fuzzer's own oracle: why cached-dist must refuse this job file, if it must."""
    files = _lld_files(doc)
    if files is None:
        return None
    inputs, outputs = files
    normal_inputs = {os.path.normpath(p) for p in inputs}
    seen: set[str] = set()
    for out in outputs:
        normal = os.path.normpath(out)
        if normal in normal_inputs:
            return f"output {out} is an input"
        if normal in seen:
            return f"output {out} repeats"
        seen.add(normal)
    for path in inputs:
        with contextlib.suppress(OSError, ValueError):  # ValueError: a NUL in the path
            if not stat.S_ISREG(os.stat(work / path).st_mode):
                return f"input {path} is not a regular file"
    return None


def input_contents(doc: object, work: Path) -> dict[str, bytes]:
    """The bytes of every input the document names that is a regular file in the copy."""
    found = {}
    files = _lld_files(doc)
    for path in files[0] if files else []:
        with contextlib.suppress(OSError, ValueError):  # ValueError: a NUL in the path
            if stat.S_ISREG(os.stat(work / path).st_mode):
                found[path] = (work / path).read_bytes()
    return found


def changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def target() -> str:
    return TARGET or cached_dist_exe()


def run_case(fuzz: Fuzz, seed: int) -> tuple[str, int]:
    rng = random.Random(seed)
    capture = fuzz.captures[seed % len(fuzz.captures)]
    case = fuzz.root / "cases" / str(seed)
    work = case / "work"
    shutil.copytree(capture.saved, work, ignore=shutil.ignore_patterns("reference*"))
    (case / "outside").mkdir()
    (case / "outside" / "keep.o").write_bytes(b"keep me")
    doc = json.loads((work / "job.json").read_text())
    names = [mutate(rng, doc, work, fuzz.cache) for _ in range(rng.randint(1, 3))]
    text = json.dumps(doc, indent=rng.choice([None, 1])).encode()
    if rng.random() < 0.2:
        text = damage(rng, text)
        names.append("bytes")
    (work / "job.json").write_bytes(text)
    try:
        parsed: object = json.loads(text)
    except ValueError:
        parsed = None
    what = f"seed {seed} ({capture.label}: {', '.join(names)})"
    refuse = must_refuse(parsed, work)
    inputs = input_contents(parsed, work)
    before = snapshot(case, dir_times=False)
    env = {**os.environ, "XDG_CACHE_HOME": str(case / "xdg"), "XDG_CONFIG_HOME": str(case)}
    started = time.monotonic()
    try:
        done = subprocess.run([target(), f"--cache-dir={fuzz.cache}", "job.json"],
                              cwd=work, capture_output=True, text=True, env=env,
                              timeout=2 * BOUND)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: still running after {2 * BOUND:.0f} s")
    took = time.monotonic() - started
    assert done.returncode in (0, 1, 2), f"{what}: exit {done.returncode}: {done.stderr}"
    assert "Traceback" not in done.stderr, f"{what}: {done.stderr}"
    assert took < BOUND, f"{what}: took {took:.1f} s"
    if refuse is not None:
        assert done.returncode == 2, f"{what}: {refuse}, yet exit {done.returncode}"
    for path, data in inputs.items():
        assert (work / path).read_bytes() == data, f"{what}: input {path} changed"
    touched = changed(before, snapshot(case, dir_times=False))
    if done.returncode == 2:
        assert touched == set(), f"{what}: exit 2 but changed {sorted(touched)}: {done.stderr}"
    else:
        allowed = may_change(parsed, work, case)
        assert touched <= allowed, (
            f"{what}: changed {sorted(touched - allowed)} outside the outputs: {done.stderr}"
        )
    made = os.listdir(fuzz.cache) if fuzz.cache.exists() else []
    assert set(made) <= {*LAYOUT, TAG}, f"{what}: {made}"
    for device in ("/dev/null", "/dev/zero"):  # named only through symlinks; still there?
        assert stat.S_ISCHR(os.stat(device).st_mode), f"{what}: {device} is gone"
    shutil.rmtree(case)
    return what, done.returncode


def check_cache_serves_references(fuzz: Fuzz) -> None:
    """The untouched job files, served from the shared cache, give the reference objects."""
    for capture in fuzz.captures:
        work = fuzz.root / "verify" / capture.label
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(capture.saved, work)
        done = subprocess.run([target(), f"--cache-dir={fuzz.cache}", "job.json"],
                              cwd=work, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        references = json.loads((work / "reference.json").read_text())
        for out, ref in references.items():
            assert (work / out).read_bytes() == (work / ref).read_bytes(), (
                f"{capture.label}: the cache served a wrong {out}"
            )


SEEDS = range(FIRST_SEED, FIRST_SEED + CASES)


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_job_file(fuzz: Fuzz, seed: int) -> None:
    run_case(fuzz, seed)
    if (seed - FIRST_SEED) % CHECK_EVERY == CHECK_EVERY - 1:
        check_cache_serves_references(fuzz)


def test_clean_links_after_fuzzing_give_the_reference_binaries(fuzz: Fuzz) -> None:
    check_cache_serves_references(fuzz)
    for capture in fuzz.captures:
        project = capture.project
        done = project.link("clean", distributor_args=[f"--cache-dir={fuzz.cache}"])
        assert done.returncode == 0, done.stderr
        assert (project.dir / "clean").read_bytes() == capture.binary, capture.label
        assert project.run_program("clean") == project.expected_output
