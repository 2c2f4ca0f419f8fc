"""Each ingredient of the key makes a miss when it changes; per-link names alone do not."""

import os
from pathlib import Path
from typing import Any

import pytest

from cached_dist import jobfile
from cached_dist.jobfile import JobFile
from cached_dist.keys import key, toolchain
from cached_dist.keys.digests import Digests
from cached_dist.keys.key import job_key


def write(d: Path, name: str, data: str) -> str:
    path = d / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)
    return name


def job_file(
    d: Path, pid: int = 2427, member: str = "t2.o", linker_version: str | None = None,
    common_args: list[str] | None = None, contents: dict[str, str] | None = None,
) -> JobFile:  # fmt: skip
    """A one-job LLD-schema file whose per-link names depend on ``pid`` and ``member``."""
    c = {"module": "bitcode of t1", "shard": "shard", "import": "bitcode of t2", "prof": "p"}
    c.update(contents or {})
    module = write(d, "t1.o", c["module"])
    imp = write(d, member, c["import"])
    shard = write(d, f"t1.1.{pid}.native.o.thinlto.bc", c["shard"])
    prof = write(d, "prof.profdata", c["prof"])
    out = f"t1.1.{pid}.native.o"
    common: dict[str, Any] = {
        "linker_output": f"app{pid}",
        "args": common_args or ["clang", "-c", "--target=x86_64-pc-linux-gnu", "-O2", "-fpic"],
        "inputs": [prof],
    }
    if linker_version:
        common["linker_version"] = linker_version
    doc = {"common": common, "jobs": [{
        "args": [module, f"-fthinlto-index={shard}", "-o", out],
        "inputs": [module, shard, imp], "outputs": [out]}]}  # fmt: skip
    return jobfile.parse(doc, str(d / f"app.{pid}.dist-file.json"))


def key_of(jf: JobFile, tool: str = "toolchain-a") -> str:
    return job_key(jf, jf.jobs[0], Digests(), tool)


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    return key_of(job_file(tmp_path))


def test_same_inputs_same_key(tmp_path: Path, base: str) -> None:
    assert key_of(job_file(tmp_path)) == base


def test_per_link_names_do_not_enter_the_key(tmp_path: Path, base: str) -> None:
    other = job_file(tmp_path, pid=9911, member="libx.a(t2.o at 78).2.EAB.o")
    assert key_of(other) == base


@pytest.mark.parametrize("ingredient", ["module", "import", "shard", "prof"])
def test_changed_content_misses(tmp_path: Path, base: str, ingredient: str) -> None:
    assert key_of(job_file(tmp_path, contents={ingredient: "changed"})) != base


def test_changed_toolchain_and_linker_version_miss(tmp_path: Path, base: str) -> None:
    assert key_of(job_file(tmp_path), tool="toolchain-b") != base
    with_version = key_of(job_file(tmp_path, linker_version="LLD 22.1.8"))
    assert with_version != base
    assert key_of(job_file(tmp_path, linker_version="LLD 22.1.9")) != with_version


ARGS = ["clang", "-c", "--target=x86_64-pc-linux-gnu", "-O2", "-fpic"]


@pytest.mark.parametrize("position", range(1, len(ARGS)))
def test_every_command_line_argument_counts(tmp_path: Path, base: str, position: int) -> None:
    args = list(ARGS)
    args[position] += "x"
    assert key_of(job_file(tmp_path, common_args=args)) != base
    assert key_of(job_file(tmp_path, common_args=[*ARGS, "-g"])) != base


def test_other_files_on_the_command_line_count_by_content_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    keys = []
    for sub, text in (("a", "list1"), ("a", "list2"), ("b", "list2")):
        monkeypatch.chdir(tmp_path / sub)
        write(tmp_path / sub, "sym.txt", text)
        keys.append(key_of(job_file(tmp_path / sub, common_args=[*ARGS, "-fsymbol-list=sym.txt"])))
    assert len(set(keys)) == 3  # content, then working directory, each make a difference


def test_the_name_the_compiler_is_run_by_counts(tmp_path: Path, base: str) -> None:
    """clang-cl is clang under another name that reads the same options otherwise: the
    identity follows the link to one executable, so the name must count; the directory and
    a Windows .exe do not."""
    as_cl = key_of(job_file(tmp_path, common_args=["clang-cl", *ARGS[1:]]))
    assert as_cl != base
    assert key_of(job_file(tmp_path, common_args=["/opt/llvm/bin/clang", *ARGS[1:]])) == base
    windows = ["C:\\LLVM\\bin\\clang-cl.exe", *ARGS[1:]]
    assert key_of(job_file(tmp_path, common_args=windows)) == as_cl


@pytest.mark.parametrize(
    ("option", "file"),
    [
        ("-mllvm=-codegen-data-use-path={}", "merged.cgdata"),  # the value is an option
        ("-Xclang=-fprofile-instrument-use-path={}", "p.profdata"),
        ("-fprofile-use={}", "p.profdata"),
        ("-fprofile-use={}", "pgo/default.profdata"),  # a directory: clang reads this in it
        ("-fprofile-use", "default.profdata"),  # bare: the working directory's
        ("-fprofile-instr-use", "default.profdata"),
    ],
)
def test_files_options_name_count_by_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str, file: str
) -> None:
    monkeypatch.chdir(tmp_path)
    spelled = option.format(file.removesuffix("/default.profdata"))
    args = [*ARGS, spelled]
    write(tmp_path, file, "one")
    first = key_of(job_file(tmp_path, common_args=args))
    write(tmp_path, file, "two")
    assert key_of(job_file(tmp_path, common_args=args)) != first


def test_a_response_file_makes_a_job_not_cacheable(tmp_path: Path, base: str) -> None:
    write(tmp_path, "opts.rsp", "-O3\n")
    with pytest.raises(key.NotCacheableError, match=r"response file .*\(@opts.rsp\)"):
        key_of(job_file(tmp_path, common_args=[*ARGS, "@opts.rsp"]))


def test_the_compiler_identity_covers_its_content(tmp_path: Path) -> None:
    compiler = tmp_path / "cc"
    compiler.write_text("#!/bin/sh\necho v1\n")
    compiler.chmod(0o755)
    first = toolchain.identity(str(compiler), toolchain.NoMemo())
    compiler.write_text("#!/bin/sh\necho v2\n")
    assert toolchain.identity(str(compiler), toolchain.NoMemo()) != first


def test_real_clang_identity_includes_its_llvm_libraries() -> None:
    clang = "/usr/lib/llvm-22/bin/clang"
    if not os.path.exists(clang):
        pytest.skip("clang-22 not installed")
    libs = toolchain.toolchain_libraries(os.path.realpath(clang))
    assert any("libLLVM" in lib for lib in libs) and any("libclang-cpp" in lib for lib in libs)


class DictMemo:
    def __init__(self) -> None:
        self.data: dict[tuple[str, str], str] = {}

    def memo_get(self, namespace: str, key: str) -> str | None:
        return self.data.get((namespace, key))

    def memo_put(self, namespace: str, key: str, value: str) -> None:
        self.data[(namespace, key)] = value


def test_toolchain_identity_is_memoized_by_file_identity(tmp_path: Path) -> None:
    compiler = tmp_path / "cc"
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    memo = DictMemo()
    first = toolchain.identity(str(compiler), memo)
    assert any(ns == "toolchain" for ns, _ in memo.data)
    assert toolchain.identity(str(compiler), memo) == first
    compiler.write_text("#!/bin/sh\n# now different\n")  # new size and mtime: memo misses
    assert toolchain.identity(str(compiler), memo) != first


@pytest.mark.parametrize(
    ("path", "per_link"),
    [
        ("libx.a(t2.o at 106).2.244C.o", True),
        ("/abs/dir/liblua.a(lapi.o at 7834).3.1F.o", True),
        ("t2.o", False),
        ("libx.a", False),
        ("dir (copy)/t2.o", False),
        ("libx.a(t2.o at 106)", False),
        ("libb.libb.obj3016.2.18AC.o", True),  # lld-link: archive, member, offset run together
        ("libb.libc.o168.3.46C2.o", True),
        ("b.1.18114.native.o", False),  # an output
        ("libb.libb.obj3016.2.18ac.o", False),  # LLD writes the pid in upper case
        ("libb.libb.obj.2.18AC.o", False),  # no offset
        ("sub/libb.libb.obj3016.2.18AC.o", False),  # LLD writes members without a directory
        ("v1.2.o", False),
    ],
)
def test_per_link_member_names(path: str, per_link: bool) -> None:
    from cached_dist.keys.shard_key import per_link_member

    assert per_link_member(path) is per_link


def _digest(data: str) -> str:
    import xxhash

    return xxhash.xxh3_128_hexdigest(data.encode())


def _expected_key(*parts: str) -> str:
    import xxhash

    return xxhash.xxh3_128_hexdigest("\0".join(parts).encode())


def test_the_recipe_spelled_out_for_every_job_of_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact recipe, for jobs where the shared arguments play no role, and for one where a
    shared argument happens to be that job's own file (its role then, not its name). Keys
    computed once per link must equal those computed job by job: entries stay valid."""
    from cached_dist.keys.compute import compute_keys
    from cached_dist.keys.key import KEY_FORMAT

    monkeypatch.chdir(tmp_path)
    files = {"m0.o": "module 0", "m1.o": "module 1", "odd.o": "odd", "s0.bc": "shard 0",
             "s1.bc": "shard 1", "s2.bc": "shard 2", "prof.profdata": "profile",
             "sym.txt": "symbols"}  # fmt: skip
    for name, text in files.items():
        write(tmp_path, name, text)
    common = ["clang", "-c", "-O2", "odd.o", "-fprofile-use=prof.profdata",
              "-fsymbol-list=sym.txt"]  # fmt: skip
    roles = [("m0.o", "s0.bc", ["m1.o"]), ("m1.o", "s1.bc", []), ("odd.o", "s2.bc", ["m0.o"])]
    jobs = [(m, s, imp, f"out{i}.o") for i, (m, s, imp) in enumerate(roles)]
    doc = {"common": {"linker_output": "app", "args": common, "inputs": ["prof.profdata"]},
           "jobs": [{"args": [m, f"-fthinlto-index={s}", "-o", out], "inputs": [m, s, *imp],
                     "outputs": [out]} for m, s, imp, out in jobs]}  # fmt: skip
    jf = jobfile.parse(doc, str(tmp_path / "app.dist-file.json"))

    class Shards:
        def begin(self, jobs: object, digests: object) -> list[object]:
            return []

        def __call__(self, job: Any, digests: object) -> str:
            return "raw:" + _digest(files[job.shard])

    monkeypatch.setattr(toolchain, "identity", lambda *a, **k: "tool")
    keyed = compute_keys(jf, toolchain.NoMemo(), Shards())  # type: ignore[arg-type]
    d = {name: _digest(text) for name, text in files.items()}
    head = [f"cached-dist key {KEY_FORMAT}", "tool", "clang", "-", "argv", "-c", "-O2"]
    shared = ["-fprofile-use=<common0>", "-fsymbol-list=sym.txt"]
    tail = ["-fthinlto-index=<shard>", "-o", "<output0>", "files"]
    expected = [
        _expected_key(*head, "odd.o", *shared, "<module>", *tail, "odd.o", d["odd.o"],
                      "sym.txt", d["sym.txt"], "cwd", str(tmp_path), "module", d["m0.o"],
                      "imports", d["m1.o"], "extra", "common", d["prof.profdata"], "shard",
                      "raw:" + d["s0.bc"]),
        _expected_key(*head, "odd.o", *shared, "<module>", *tail, "odd.o", d["odd.o"],
                      "sym.txt", d["sym.txt"], "cwd", str(tmp_path), "module", d["m1.o"],
                      "imports", "extra", "common", d["prof.profdata"], "shard",
                      "raw:" + d["s1.bc"]),
        # "odd.o" is this job's module: named by its role, and not among the other files
        _expected_key(*head, "<module>", *shared, "<module>", *tail, "sym.txt", d["sym.txt"],
                      "cwd", str(tmp_path), "module", d["odd.o"], "imports", d["m0.o"],
                      "extra", "common", d["prof.profdata"], "shard", "raw:" + d["s2.bc"]),
    ]  # fmt: skip
    assert [k.key for k in keyed] == expected


# (how the job differs from LLD's usual one, whether lld_arguments may take the short way)
SHAPES = [
    ("as LLD writes it", True),
    ("a shared argument names one of its paths", True),
    ("the module is named -o", False),
    ("the shard is named -o", False),
    ("an import is named -o", False),
    ("a common input is named -o", False),
    ("a second output is named -o", False),
    ("an import is named like the -fthinlto-index argument", False),
    ("the output is also an import", False),
    ("the output is also the module", False),
    ("the shard is the module", False),
    ("the output looks like a flag", False),
    ("the module looks like a flag", False),
    ("the module looks like a response file", False),
    ("the shared arguments end in -mllvm", False),
    ("the shared arguments end in -Xclang", False),
    ("no shared arguments", False),
    ("another argument", False),
    ("the arguments in another order", False),
]


@pytest.mark.parametrize(("shape", "short"), SHAPES, ids=[s for s, _ in SHAPES])
def test_lld_arguments_take_the_short_way_to_the_same_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str, short: bool
) -> None:
    """The key of a job whose own arguments are LLD's skips the role lookups of each
    (key.lld_arguments); it must be the key the lookups give, and the short way must be
    refused wherever a path of the job could make them give something else."""
    monkeypatch.chdir(tmp_path)
    module, shard, imp, out = "m.o", "m.1.77.native.o.thinlto.bc", "i.o", "m.1.77.native.o"
    common = ["clang", "-c", "-O2", "-fprofile-use=prof.profdata"]
    common_inputs = ["prof.profdata"]
    imports = [imp, "j.o"]
    outputs = [out]
    index = f"-fthinlto-index={shard}"
    if shape == "a shared argument names one of its paths":
        common.append(imp)
    elif shape == "the module is named -o":
        module = "-o"
    elif shape == "the shard is named -o":
        shard = "-o"
        index = "-fthinlto-index=-o"
    elif shape == "an import is named -o":
        imports.append("-o")
    elif shape == "a common input is named -o":
        common_inputs.append("-o")
    elif shape == "a second output is named -o":
        outputs.append("-o")
    elif shape == "an import is named like the -fthinlto-index argument":
        imports.append(index)
    elif shape == "the output is also an import":
        out = imp
        outputs = [out]
    elif shape == "the output is also the module":
        out = module
        outputs = [out]
    elif shape == "the shard is the module":
        shard = module
        index = f"-fthinlto-index={shard}"
    elif shape == "the output looks like a flag":
        out = "-MD"
        outputs = [out]
    elif shape == "the module looks like a flag":
        module = "-MD"
    elif shape == "the module looks like a response file":
        module = "@m.o"
    elif shape == "the shared arguments end in -mllvm":
        common.append("-mllvm")
    elif shape == "the shared arguments end in -Xclang":
        common.append("-Xclang")
    args = [module, index, "-o", out]
    if shape == "no shared arguments":
        args = [*common, *args]
        common = []
    elif shape == "another argument":
        args.append("-g")
    elif shape == "the arguments in another order":
        args = [index, module, "-o", out]
    for name in {module, shard, *imports, *common_inputs}:
        write(tmp_path, name, f"content of {name}")
    doc = {"common": {"linker_output": "app", "args": common, "inputs": common_inputs},
           "jobs": [{"args": args, "inputs": [module, shard, *imports],
                     "outputs": outputs}]}  # fmt: skip
    jf = jobfile.parse(doc, str(tmp_path / "app.dist-file.json"))
    job = jf.jobs[0]

    def the_key() -> str:
        try:
            return key.job_key(jf, job, Digests(), "tool")
        except key.NotCacheableError as e:
            return f"not cacheable: {e}"

    taken: list[bool] = []
    real = key.lld_arguments

    def counted(jf: JobFile, job: Any) -> bool:
        taken.append(real(jf, job))
        return taken[-1]

    monkeypatch.setattr(key, "lld_arguments", counted)
    fast = the_key()
    monkeypatch.setattr(key, "lld_arguments", lambda *a: False)
    assert fast == the_key()
    # Shared arguments that end in a flag taking the job's first argument as its value, or
    # none at all: the recipe never asks.
    assert taken == ([short] if common and common[-1] not in ("-mllvm", "-Xclang") else [])
