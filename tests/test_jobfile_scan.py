"""The C scanner of LLD's job files (cached_dist/jobfile/_scan.c) against the Python parser:
whatever it takes, the Python parser takes too, with the same values; everything else it
hands back. Checked on LLD-shaped job files and on thousands of damaged ones."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cached_dist import jobfile
from cached_dist.errors import JobFileError

from .llvm21 import Llvm21, requires_llvm21
from .sanitized import sanitized_build
from .toolchain import build, cached_dist_exe, requires_toolchain, run

_built = sanitized_build("CACHED_DIST_SANITIZED_SCAN", "_scan")
if _built is not None:  # scripts/sanitize: this file runs against its ASan/UBSan build
    jobfile._scan = _built

needs_native = pytest.mark.skipif(jobfile._scan is None, reason="the C extension is not built")
MUTATIONS = int(os.environ.get("CACHED_DIST_SCAN_MUTATIONS", "3000"))


def test_ci_builds_the_scanner() -> None:
    """CI installs with a C compiler (scripts/setup): there the scanner must be present."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        assert jobfile._scan is not None
    elif jobfile._scan is None:
        pytest.skip("the C extension is not built (CI is not set)")


def lld_document(jobs: int, pid: int = 2427, member: str = "m", seed: int = 0) -> dict[str, Any]:
    """A job file shaped as LLD 22 writes one: a regular archive's members, each job
    importing some of them."""
    rng = random.Random(seed)
    names = [f"lib.a({member}{i}.o at {100 + 40 * i}).{i + 2}.{pid:X}.o" for i in range(jobs)]
    return {
        "common": {
            "linker_output": "app",
            "args": ["/usr/lib/llvm-22/bin/clang", "-c", "--target=x86_64-pc-linux-gnu", "-O2",
                     "-faddrsig", "-ffunction-sections", "-fdata-sections", "-fpic",
                     "-Wno-unused-command-line-argument"],
            "inputs": [],
        },
        "jobs": [
            {
                "args": [name, f"-fthinlto-index={name}.{i}.{pid}.native.o.thinlto.bc", "-o",
                         f"{name}.{i}.{pid}.native.o"],
                "inputs": [name, f"{name}.{i}.{pid}.native.o.thinlto.bc",
                           *rng.sample(names, min(len(names), rng.randrange(4)))],
                "outputs": [f"{name}.{i}.{pid}.native.o"],
            }
            for i, name in enumerate(names)
        ],
    }  # fmt: skip


def _outcome(raw: bytes, tmp: Path, scanner: Any) -> object:
    """What load() gives for these bytes (its values, or its error), with ``scanner`` as
    the C scanner (None: the Python parser alone)."""
    path = tmp / "job.json"
    path.write_bytes(raw)
    saved = jobfile._scan
    jobfile._scan = scanner
    try:
        job_file = jobfile.load(str(path))
    except JobFileError as e:
        return str(e)
    finally:
        jobfile._scan = saved
    return (job_file.schema, job_file.linker_output, job_file.linker_version,
            job_file.common_args, job_file.common_inputs, job_file.jobs,
            [j.index for j in job_file.jobs])  # fmt: skip


def _same(raw: bytes, tmp: Path) -> bool:
    """Checks the scanner against the Python parser on ``raw``; returns whether it took it."""
    scan = jobfile._scan
    assert scan is not None
    taken = scan.lld(raw) is not None
    assert _outcome(raw, tmp, scan) == _outcome(raw, tmp, None), raw[:200]
    if taken:
        assert isinstance(_outcome(raw, tmp, None), tuple)  # the Python parser took it too
    return taken


@needs_native
@pytest.mark.parametrize("indent", [None, 1, "\t"])
def test_lld_job_files_are_taken_with_the_same_values(tmp_path: Path, indent: Any) -> None:
    for jobs in (0, 1, 3, 300):
        doc = lld_document(jobs)
        assert _same(json.dumps(doc, indent=indent).encode(), tmp_path), jobs
        assert _same(json.dumps(doc, separators=(",", ":")).encode(), tmp_path), jobs


@needs_native
def test_each_distinct_string_is_one_object() -> None:
    """A module imported by every job is one str, not one a job (memory, hashing once)."""
    assert jobfile._scan is not None
    doc = lld_document(50)
    shared = doc["jobs"][0]["inputs"][0]
    for job in doc["jobs"]:
        job["inputs"].append(shared)
    scanned = jobfile._scan.lld(json.dumps(doc).encode())
    assert scanned is not None
    ids = {id(inputs[-1]) for _, inputs, _ in scanned[4]}
    assert len(ids) == 1


@needs_native
@pytest.mark.parametrize("text", [
    '{"common": {"args": ["cc"], "linker_version": "LLD 22", "linker_output": "é.out"},'
    ' "jobs": [{"outputs": ["ö.o"], "inputs": ["ü.o", "s"], "args": ["", "x"]}]}',
    '  \r\n{"jobs":[],"common":{"args":[]}}\n\t ',
    '{"common": {"args": ["cc"], "inputs": ["p.prof"]}, "jobs": [{"args": [], "inputs": ["a"],'
    ' "outputs": ["b"]}]}',
    '{"common": {"args": ["\\ud800 surrogate escaped"]}, "jobs": []}',
])  # fmt: skip
def test_plain_variants_are_taken(tmp_path: Path, text: str) -> None:
    raw = text.encode("utf-8")
    taken = _same(raw, tmp_path)
    assert taken is ("\\" not in text)  # escapes are the Python parser's


@needs_native
@pytest.mark.parametrize("text", [
    '{"common": {"args": ["cc"]}, "jobs": [], "extra": 1}',  # a key it does not know
    '{"common": {"args": ["cc"]}, "common": {"args": ["cc"]}, "jobs": []}',  # a key twice
    '{"common": {"args": ["cc"], "args": ["cc"]}, "jobs": []}',
    '{"common": {"args": ["cc"]}, "jobs": [{"args": [], "inputs": ["a"], "outputs": ["b"],'
    ' "args": []}]}',
    '{"common": {"args": ["cc"]}, "jobs": [{"args": [], "inputs": [], "outputs": ["b"]}]}',
    '{"common": {"args": ["cc"]}, "jobs": [{"args": [], "inputs": ["a"], "outputs": []}]}',
    '{"common": {"args": ["cc"]}, "jobs": [{"args": [], "inputs": ["a", ""], "outputs": ["b"]}]}',
    '{"common": {"args": ["cc"]}, "jobs": [{"args": [], "inputs": ["a"], "outputs": [""]}]}',
    '{"common": {"args": ["cc"], "inputs": [""]}, "jobs": []}',
    '{"common": {"args": ["cc"], "linker_output": null}, "jobs": []}',
    '{"common": {"args": ["cc", ["primary_output", 0]]}, "jobs": []}',
    '{"common": {"args": ["cc"]}, "jobs": [{"primary_input": ["a"], "primary_output": ["b"]}]}',
    '{"common": {"inputs": []}, "jobs": []}',  # no args
    '{"common": {"args": ["cc"]}}',  # no jobs
    '{"jobs": []}',
    '{"common": {"args": ["cc"]}, "jobs": []} x',  # something after
    '{"common": {"args": ["cc"]}, "jobs": [],}',
    '{"common": {"args": ["cc",]}, "jobs": []}',
    '{"common": {"args": ["a\\"b"]}, "jobs": []}',  # an escape
    '{"common": {"args": ["a\tb"]}, "jobs": []}',  # a control character
    '{"common": {"args": ["cc"]}, "jobs": [1]}',
    '\ufeff{"common": {"args": ["cc"]}, "jobs": []}',  # a byte-order mark
    '{"common": {"args": ["cc"]}, "jobs": [{"args": [], "inputs": ["a"], "outputs": ["b"]}',
    '',
    '[]',
])  # fmt: skip
def test_anything_else_is_handed_back(tmp_path: Path, text: str) -> None:
    assert not _same(text.encode("utf-8"), tmp_path)


@needs_native
def test_bytes_that_are_not_utf8_are_handed_back(tmp_path: Path) -> None:
    for raw in (b'{"common": {"args": ["\xff"]}, "jobs": []}',
                b'{"common": {"args": ["a"]}, "jobs": []}\xff',
                b'{"common": {"args": ["\xed\xa0\x80"]}, "jobs": []}',  # a surrogate, passed
                '{"common": {"args": ["cc"]}, "jobs": []}'.encode("utf-16")):  # fmt: skip
        _same(raw, tmp_path)


_TOKENS = [b'"', b"\\", b",", b":", b"[", b"]", b"{", b"}", b" ", b"\n", b"\x00", b"\x1f",
           b"\xff", b"\xc3\xa9", b"\xed\xa0\x80", b"0", b"null", b'""', b'"args"', b'"inputs"',
           b'"outputs"', b'"jobs"', b'"common"', b'[""]', b"[[]]", b"{}"]  # fmt: skip


def damage(rng: random.Random, raw: bytes) -> bytes:
    """One to four edits: a byte flipped, a span cut or doubled, a JSON-ish token put in."""
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        kind = rng.randrange(4)
        if kind == 0 and at < len(data):
            data[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            del data[at : at + rng.randint(1, 12)]
        elif kind == 2:
            data[at:at] = data[at : at + rng.randint(1, 40)]
        else:
            data[at:at] = rng.choice(_TOKENS)
    return bytes(data)


@needs_native
def test_damaged_job_files_are_taken_only_as_the_python_parser_takes_them(
    tmp_path: Path,
) -> None:
    """Seeded mutations of LLD-shaped job files: never a crash; a file taken gives what the
    Python parser gives. Both kinds of outcome must be common, or the test proves little."""
    rng = random.Random(1234)
    seeds = [json.dumps(lld_document(n, seed=n), indent=rng.choice([None, 1])).encode()
             for n in (1, 2, 5, 12)]  # fmt: skip
    taken = 0
    for _ in range(MUTATIONS):
        taken += _same(damage(rng, rng.choice(seeds)), tmp_path)
    assert MUTATIONS // 50 < taken < MUTATIONS - MUTATIONS // 50, taken


_names = st.sampled_from(["common", "jobs", "args", "inputs", "outputs", "linker_output",
                          "linker_version", "primary_input", "x"])  # fmt: skip
_values = st.recursive(
    st.none() | st.integers(-1, 2) | st.text(max_size=3) | st.sampled_from(["", "a.o", "é"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=4),
    max_leaves=25,
)
_job = st.fixed_dictionaries({"args": st.lists(st.sampled_from(["", "a", "-o"]), max_size=3),
                              "inputs": st.lists(st.sampled_from(["", "a.o", "b"]), max_size=3),
                              "outputs": st.lists(st.sampled_from(["", "x.o"]), max_size=2)})  # fmt: skip


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.one_of(_values, st.fixed_dictionaries(
    {"common": st.one_of(st.fixed_dictionaries({"args": st.lists(st.text(max_size=3))}),
                         st.dictionaries(_names, _values, max_size=4)),
     "jobs": st.lists(st.one_of(_job, _values), max_size=4)})))  # fmt: skip
def test_documents_give_what_the_python_parser_gives(document: object) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        _same(json.dumps(document, ensure_ascii=False).encode("utf-8", "surrogatepass"),
              Path(tmp))  # fmt: skip


_KEEP = """import shutil, subprocess, sys
shutil.copy(sys.argv[-1], sys.argv[1])  # the job file, before LLD removes it
sys.exit(subprocess.run(sys.argv[2:]).returncode)
"""


def _kept_job_file(tmp_path: Path, link: Any) -> bytes:
    """The job file of a real link through cached-dist (``link(distributor, args)`` runs it)."""
    keep = tmp_path / "keep.py"
    keep.write_text(_KEEP)
    saved = tmp_path / "saved.json"
    done = link(sys.executable, [str(keep), str(saved), cached_dist_exe(),
                                 f"--cache-dir={tmp_path / 'cache'}", "--quiet"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    return saved.read_bytes()


@needs_native
@requires_toolchain
@pytest.mark.e2e
@pytest.mark.parametrize("name, archive", [("calc", "regular"), ("shapes", "thin")])
def test_real_lld_22_job_files_are_taken(tmp_path: Path, name: str, archive: Any) -> None:
    """What clang-22 and ld.lld-22 write (C and C++, a regular and a thin archive) is the
    plain form: taken, with the Python parser's values (else every link pays the slow way)."""
    project = build(name, tmp_path / "project", archive)
    raw = _kept_job_file(tmp_path, lambda exe, args: project.link(
        distributor=exe, distributor_args=args))  # fmt: skip
    (tmp_path / "check").mkdir()
    assert _same(raw, tmp_path / "check")


@needs_native
@requires_llvm21
@pytest.mark.e2e
@pytest.mark.parametrize("archive", ["regular", "thin"])
def test_real_lld_21_job_files_are_taken(tmp_path: Path, archive: Any) -> None:
    """LLD 21's job files, which name a regular archive's members ``lib.a(m.o at N)``."""
    llvm21 = Llvm21(tmp_path / "llvm21")
    project = llvm21.build("calc", tmp_path / "project", archive)
    raw = _kept_job_file(tmp_path, lambda exe, args: run(
        llvm21.link_command(project, "app", args, distributor=exe), project.dir,
        env=llvm21.env))  # fmt: skip
    (tmp_path / "check").mkdir()
    assert _same(raw, tmp_path / "check")
