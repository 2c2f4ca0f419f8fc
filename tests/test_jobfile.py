"""Both job-file schemas into one model, template expansion, and every structural error."""

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cached_dist import jobfile
from cached_dist.errors import JobFileError
from cached_dist.jobfile import Job

LLD_DOC: dict[str, Any] = {
    "common": {
        "linker_output": "a.out",
        "args": ["/usr/lib/llvm-22/bin/clang", "-c", "-O2"],
        "inputs": ["prof.profdata"],
    },
    "jobs": [
        {
            "args": ["t1.o", "-fthinlto-index=t1.1.2427.native.o.thinlto.bc", "-o",
                     "t1.1.2427.native.o"],
            "inputs": ["t1.o", "t1.1.2427.native.o.thinlto.bc", "t2.o"],
            "outputs": ["t1.1.2427.native.o"],
            "extra": "tolerated",
        }
    ],
    "unknown_top_level": 1,
}  # fmt: skip

DESIGN_DOC: dict[str, Any] = {
    "common": {
        "linker_output": "dtlto.elf",
        "linker_version": "LLD 20.0.0",
        "args": ["/usr/local/clang", "-O3", "-fprofile-sample-use=my.profdata",
                 "-o", ["primary_output", 0], "-c", "-x", "ir", ["primary_input", 0],
                 ["summary_index", "-fthinlto-index=", 0], "-target", "x86_64-sie-ps5"],
    },
    "jobs": [
        {
            "primary_input": ["dtlto.o"],
            "summary_index": ["dtlto.1.51232.native.o.thinlto.bc"],
            "primary_output": ["dtlto.1.51232.native.o"],
            "imports": ["other.o"],
            "additional_inputs": ["my.profdata"],
        }
    ],
}  # fmt: skip


def test_lld_schema_roles() -> None:
    jf = jobfile.parse(LLD_DOC, "x.json")
    assert jf.schema == "lld" and jf.linker_output == "a.out" and jf.linker_version is None
    assert jf.common_inputs == ("prof.profdata",)
    (job,) = jf.jobs
    assert job == Job(
        0, tuple(LLD_DOC["jobs"][0]["args"]), "t1.o", "t1.1.2427.native.o.thinlto.bc",
        ("t2.o",), (), ("t1.1.2427.native.o",),
    )  # fmt: skip
    assert jf.command(job)[:3] == ["/usr/lib/llvm-22/bin/clang", "-c", "-O2"]
    assert job.primary_output == "t1.1.2427.native.o"


def test_design_schema_expands_the_template_like_the_design_document() -> None:
    jf = jobfile.parse(DESIGN_DOC)
    assert jf.schema == "design" and jf.linker_version == "LLD 20.0.0"
    (job,) = jf.jobs
    assert " ".join(jf.command(job)) == (
        "/usr/local/clang -O3 -fprofile-sample-use=my.profdata -o dtlto.1.51232.native.o "
        "-c -x ir dtlto.o -fthinlto-index=dtlto.1.51232.native.o.thinlto.bc "
        "-target x86_64-sie-ps5"
    )
    assert jf.common_args == ("/usr/local/clang", "-O3", "-fprofile-sample-use=my.profdata", "-o")
    assert job.module == "dtlto.o" and job.shard == "dtlto.1.51232.native.o.thinlto.bc"
    assert job.imports == ("other.o",) and job.extra_inputs == ("my.profdata",)
    assert job.outputs == ("dtlto.1.51232.native.o",)


def test_design_schema_custom_tool_template() -> None:
    doc = json.loads(json.dumps(DESIGN_DOC))
    doc["common"]["args"] = ["custom-codgen-tool", "-opt-level=2", "-output",
                             ["primary_output", 0], "-input", ["primary_input", 0],
                             "-thinlto-index", ["summary_index", 0]]  # fmt: skip
    jf = jobfile.parse(doc)
    assert jf.command(jf.jobs[0]) == [
        "custom-codgen-tool", "-opt-level=2", "-output", "dtlto.1.51232.native.o", "-input",
        "dtlto.o", "-thinlto-index", "dtlto.1.51232.native.o.thinlto.bc",
    ]  # fmt: skip


def test_write_lld_round_trips_a_design_file(tmp_path: Path) -> None:
    jf = jobfile.parse(DESIGN_DOC, "d.json")
    out = tmp_path / "inner.json"
    jobfile.write_lld(jf, jf.jobs, str(out))
    again = jobfile.load(str(out))
    assert again.schema == "lld" and again.linker_version == "LLD 20.0.0"
    assert [again.command(j) for j in again.jobs] == [jf.command(j) for j in jf.jobs]
    assert again.jobs[0].inputs == jf.jobs[0].inputs
    plain = jobfile.parse(LLD_DOC)
    jobfile.write_lld(plain, plain.jobs, str(out))
    assert jobfile.load(str(out)).jobs == plain.jobs


def _mutate(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()


@pytest.mark.parametrize(
    ("base", "path", "value", "message"),
    [
        (LLD_DOC, ["common"], _DELETE, "top level: missing field 'common'"),
        (LLD_DOC, ["jobs"], _DELETE, "top level: missing field 'jobs'"),
        (LLD_DOC, ["jobs"], {}, "jobs: expected a list, got an object"),
        (LLD_DOC, ["common"], [], "common: expected an object, got a list"),
        (LLD_DOC, ["common", "args"], _DELETE, "common: missing field 'args'"),
        (LLD_DOC, ["common", "args", 1], 7, "common.args[1]: expected a string, got a number"),
        (LLD_DOC, ["common", "inputs"], "x", "common.inputs: expected a list of strings"),
        (LLD_DOC, ["common", "linker_output"], 3, "common.linker_output: expected a string"),
        (LLD_DOC, ["jobs", 0], "job", "jobs[0]: expected an object, got a string"),
        (LLD_DOC, ["jobs", 0, "outputs"], _DELETE, "jobs[0]: missing field 'outputs'"),
        (LLD_DOC, ["jobs", 0, "outputs"], [], "jobs[0].outputs: expected at least 1 entries"),
        (LLD_DOC, ["jobs", 0, "inputs"], [], "jobs[0].inputs: expected at least 1 entries"),
        (LLD_DOC, ["jobs", 0, "inputs", 2], None, "jobs[0].inputs[2]: expected a string, got null"),
        (LLD_DOC, ["jobs", 0, "inputs", 0], "", "jobs[0].inputs[0]: empty path"),
        (LLD_DOC, ["jobs", 0, "outputs", 0], "", "jobs[0].outputs[0]: empty path"),
        (LLD_DOC, ["jobs", 0, "args"], True, "jobs[0].args: expected a list of strings"),
        (DESIGN_DOC, ["jobs", 0, "primary_input"], _DELETE, "jobs[0]: missing field 'primary_input'"),
        (DESIGN_DOC, ["jobs", 0, "imports"], [1], "jobs[0].imports[0]: expected a string"),
        (DESIGN_DOC, ["common", "args", 4], ["primary_output", 1],
         "jobs[0]: common.args[4]: placeholder refers to primary_output[1], which does not exist"),
        (DESIGN_DOC, ["common", "args", 4], ["nowhere", 0],
         "jobs[0]: common.args[4]: placeholder refers to unknown field 'nowhere'"),
        (DESIGN_DOC, ["common", "args", 4], [], "common.args[4]: expected a string or a placeholder"),
        (DESIGN_DOC, ["common", "args", 4], ["primary_output", True],
         "common.args[4][1]: expected a string or index, got a boolean"),
        (DESIGN_DOC, ["common", "args"], "clang", "common.args: expected a list, got a string"),
        (DESIGN_DOC, ["common", "linker_version"], 20, "common.linker_version: expected a string"),
    ],
)  # fmt: skip
def test_structural_errors_name_the_field(
    base: dict[str, Any], path: list[Any], value: Any, message: str
) -> None:
    with pytest.raises(JobFileError) as e:
        jobfile.parse(_mutate(base, path, value), "bad.json")
    assert str(e.value).startswith("job file bad.json: ")
    assert message in str(e.value)


def test_empty_arguments_are_kept() -> None:
    """LLD writes "" as the compiler when no --thinlto-remote-compiler is given; arguments
    are not paths, so empty ones pass through to whoever runs the job."""
    doc = _mutate(_mutate(LLD_DOC, ["common", "args", 0], ""), ["jobs", 0, "args", 1], "")
    jf = jobfile.parse(doc)
    assert jf.common_args[0] == "" and jf.jobs[0].args[1] == ""


def test_top_level_not_an_object() -> None:
    with pytest.raises(JobFileError, match="top level: expected an object, got a list"):
        jobfile.parse([1, 2])


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "job file not found"), (b"{", "invalid JSON"), (b"\xff\xfe", "invalid JSON"),
     (b"[" * 100000, "invalid JSON")],
)  # fmt: skip
def test_load_errors(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "job.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(JobFileError, match=message):
        jobfile.load(str(path))


def test_load_directory(tmp_path: Path) -> None:
    with pytest.raises(JobFileError, match="job file is a directory"):
        jobfile.load(str(tmp_path))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_names = st.sampled_from(
    ["common", "jobs", "args", "inputs", "outputs", "linker_output", "linker_version",
     "primary_input", "primary_output", "summary_index", "imports", "additional_inputs"]
)  # fmt: skip
_near_valid = st.recursive(
    st.none() | st.integers(-2, 3) | st.text(max_size=4) | st.just("primary_output"),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_names, inner, max_size=6),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(_json, _near_valid))
def test_arbitrary_json_never_raises_anything_but_job_file_error(document: object) -> None:
    try:
        jobfile.parse(document)
    except JobFileError as e:
        assert str(e).startswith("job file ")


def _outcome(f: Any) -> object:
    try:
        job_file = f()
    except JobFileError as e:
        return str(e)
    return (job_file.schema, job_file.common_args, job_file.common_inputs, job_file.jobs,
            [j.index for j in job_file.jobs], job_file.linker_output)  # fmt: skip


_lld_like = st.fixed_dictionaries(
    {"args": st.lists(st.sampled_from(["", "a", "-o", "x.o"]), max_size=3),
     "inputs": st.lists(st.sampled_from(["", "a.o", "b.o"]), max_size=3),
     "outputs": st.lists(st.sampled_from(["", "x.o", "y.o"]), max_size=2)}
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.one_of(_near_valid, st.fixed_dictionaries(
    {"common": st.one_of(_lld_like, st.just({"args": ["cc"]}), st.just({"args": [["x"]]})),
     "jobs": st.lists(st.one_of(_lld_like, _near_valid), max_size=4)})))  # fmt: skip
def test_load_decodes_jobs_early_with_the_same_outcome_as_parse(document: object) -> None:
    """load() turns well-formed jobs into Jobs while decoding (to save memory); it must give
    exactly what parse() gives for the same document, errors included."""
    import os
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f)
        assert _outcome(lambda: jobfile.load(path)) == _outcome(
            lambda: jobfile.parse(json.loads(json.dumps(document)), path)
        )
    finally:
        os.unlink(path)
