"""Bad job files are refused before anything on disk is touched: one line, exit 2, no change.

Each case runs the installed console script on a small job file whose compiler would write
every output (python3), so a check that let the case through would visibly change the disk.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cached_dist.keys.digests import Digests, read_regular
from store import LAYOUT, Store
from store.layout import TAG

from .test_cli import assert_one_line_error
from .toolchain import LLVM_BIN, build, cached_dist_exe, requires_toolchain

# A "compiler" that writes its last argument, like clang's -o (and fails on a FIFO output).
WRITER = ["python3", "-c", "import sys; open(sys.argv[-1], 'w').write('obj')"]


def snapshot(root: Path, *, dir_times: bool = True) -> dict[str, tuple[str, int, int]]:
    """Every path under ``root`` with its kind, size and mtime (what a change would show);
    without ``dir_times``, directories by name only (their mtime changes with every file made
    in them, which a caller may allow)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            kind = "d" if name in dirnames else "f"
            seen = kind == "f" or dir_times
            found[os.path.relpath(p, root)] = (kind, *((st.st_size, st.st_mtime_ns) if seen
                                                        else (0, 0)))  # fmt: skip
    return found


def write_job_file(d: Path, jobs: list[dict[str, list[str]]], common_inputs: list[str]) -> None:
    for job in jobs:
        job.setdefault("args", ["-o", job["outputs"][0]])
    doc = {"common": {"linker_output": "app", "args": WRITER, "inputs": common_inputs},
           "jobs": jobs}  # fmt: skip
    (d / "job.json").write_text(json.dumps(doc))


def project(d: Path) -> None:
    for name in ("a.o", "b.o", "a.thinlto.bc", "b.thinlto.bc", "lib.o"):
        (d / name).write_bytes(name.encode() * 100)


def job(module: str, *outputs: str, imports: tuple[str, ...] = ()) -> dict[str, list[str]]:
    stem = module.removesuffix(".o")
    return {"inputs": [module, f"{stem}.thinlto.bc", *imports], "outputs": list(outputs)}


def run_cached_dist(d: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(d / "xdg"), "XDG_CONFIG_HOME": str(d / "cfg")}
    return subprocess.run([cached_dist_exe(), f"--cache-dir={d / 'cache'}", *args, "job.json"],
                          cwd=d, capture_output=True, text=True, env=env, timeout=60)  # fmt: skip


def fifo(path: Path) -> str:
    os.mkfifo(path)
    return path.name


def symlink(path: Path, target: str) -> str:
    path.symlink_to(target)
    return path.name


def hard_link(path: Path, target: str) -> str:
    os.link(path.parent / target, path)
    return path.name


def directory(path: Path) -> str:
    path.mkdir()
    return path.name


Setup = Callable[[Path], list[dict[str, list[str]]]]


CASES: dict[str, tuple[Setup, list[str], str]] = {
    "output is the module": (
        lambda d: [job("a.o", "a.o")], [], "output a.o is also an input (job 0, module a.o)"),
    "output is another job's import": (
        lambda d: [job("a.o", "a.native.o", imports=("lib.o",)), job("b.o", "lib.o")], [],
        "output lib.o is also an input (job 1, module b.o)"),
    "output is a common input": (
        lambda d: [job("a.o", "lib.o")], ["lib.o"], "output lib.o is also an input (job 0"),
    "output is an input by another spelling": (
        lambda d: [job("a.o", "./sub/../b.thinlto.bc"), job("b.o", "b.native.o")], [],
        "output ./sub/../b.thinlto.bc is also an input"),
    "output is an input spelled another way in the job file": (
        lambda d: [job("a.o", "a.native.o", imports=("./lib.o",)), job("b.o", "lib.o")],
        [], "output lib.o is also an input (job 1, module b.o)"),
    "output is an input through a symlink": (
        lambda d: [job("a.o", symlink(d / "alias.o", "lib.o"), imports=("lib.o",))], [],
        "output alias.o is also an input, by another name (job 0, module a.o)"),
    "output is a hard link to an input": (
        lambda d: [job("a.o", hard_link(d / "hard.o", "lib.o")),
                   job("b.o", "b.native.o", imports=("lib.o",))], [],
        "output hard.o is also an input, by another name"),
    "FIFO input": (
        lambda d: [job("a.o", "a.native.o", imports=(fifo(d / "pipe"),))], [],
        "input pipe is a FIFO, not a regular file (job 0, module a.o)"),
    "FIFO module": (
        lambda d: [job(fifo(d / "m.o"), "m.native.o")], [],
        "input m.o is a FIFO, not a regular file (job 0, module m.o)"),
    "/dev/zero in common inputs": (
        lambda d: [job("a.o", "a.native.o")], ["/dev/zero"],
        "input /dev/zero is a character device, not a regular file (common.inputs)"),
    "directory input": (
        lambda d: [job("a.o", "a.native.o", imports=(directory(d / "dir.o"),))], [], "input dir.o is a directory, not a regular file (job 0, module a.o)"),
    "duplicate outputs across jobs": (
        lambda d: [job("a.o", "same.o"), job("b.o", "./same.o")], [],
        "output ./same.o is named also by job 0 (job 1, module b.o)"),
    "duplicate output in one job": (
        lambda d: [job("a.o", "x.o", "x.o")], [],
        "output x.o is named twice by this job (job 0, module a.o)"),
    "output is a directory": (
        lambda d: [job("a.o", directory(d / "out.o"))], [],
        "output out.o is a directory, not a regular file (job 0, module a.o)"),
    "output names a directory": (
        lambda d: [job("a.o", "outdir/")], [], "output outdir/ names a directory (job 0"),
    "output is a FIFO": (
        lambda d: [job("a.o", fifo(d / "o.fifo"))], [],
        "output o.fifo is a FIFO, not a regular file (job 0, module a.o)"),
    "output is a device": (
        # Through a symlink: should the check ever regress, the link goes, not /dev/null.
        lambda d: [job("a.o", symlink(d / "null.o", "/dev/null"))], [],
        "output null.o is a character device, not a regular file (job 0"),
    "output inside the cache's files": (
        lambda d: [job("a.o", "cache/blobs/x.o")], [],
        "output cache/blobs/x.o is inside the cache's own files"),
    "-o names an input, not an output": (
        lambda d: [{"args": ["-o", "lib.o"], **job("a.o", "a.native.o", imports=("lib.o",))}],
        [], "the command writes -o lib.o, which is not one of the job's outputs (job 0, "),
    "-oFILE names an input": (
        lambda d: [{"args": ["-olib.o"], **job("a.o", "a.native.o", imports=("lib.o",))}],
        [], "the command writes -olib.o, which is not one of the job's outputs (job 0, "),
    "--output=FILE names an input": (
        lambda d: [{"args": ["--output=lib.o"], **job("a.o", "a.native.o")}],
        [], "the command writes --output=lib.o, which is not one of the job's outputs"),
    "--output FILE names an input": (
        lambda d: [{"args": ["--output", "lib.o"], **job("a.o", "a.native.o")}],
        [], "the command writes --output lib.o, which is not one of the job's outputs"),
    "-mllvm -info-output-file=FILE": (
        lambda d: [{"args": ["-mllvm", "-info-output-file=lib.o", "-o", "a.native.o"],
                    **job("a.o", "a.native.o")}],
        [], "the command writes -mllvm -info-output-file=lib.o, which is not one of the job's"),
    "-mllvm -ir-dump-directory=DIR": (
        lambda d: [{"args": ["-mllvm=-ir-dump-directory=d", "-o", "a.native.o"],
                    **job("a.o", "a.native.o")}],
        [], "the command has -mllvm -ir-dump-directory=d, which makes clang write files of"),
    "--driver-mode=dxc": (
        lambda d: [{"args": ["--driver-mode=dxc", "-Fo", "a.native.o"],
                    **job("a.o", "a.native.o")}],
        [], "the command runs clang in --driver-mode=dxc, whose options the job file checks "
            "do not read (job 0, module a.o)"),
    "output directory missing": (
        lambda d: [job("a.o", "nowhere/a.native.o")], [],
        "output directory does not exist: nowhere"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_bad_job_file_is_refused_and_changes_nothing(tmp_path: Path, case: str) -> None:
    make_jobs, common, message = CASES[case]
    (tmp_path / "cache" / "blobs").mkdir(parents=True)  # so a path inside it can be named
    project(tmp_path)
    write_job_file(tmp_path, make_jobs(tmp_path), common)
    before = snapshot(tmp_path)
    contents = {p: (tmp_path / p).read_bytes() for p, v in before.items()
                if v[0] == "f" and (tmp_path / p).is_file()}  # fmt: skip
    started = time.monotonic()
    done = run_cached_dist(tmp_path)
    assert time.monotonic() - started < 30  # a FIFO or device must never be read
    assert_one_line_error(done, 2, message)
    assert snapshot(tmp_path) == before
    for p, data in contents.items():
        assert (tmp_path / p).read_bytes() == data, p


def test_the_same_job_file_without_the_defect_links(tmp_path: Path) -> None:
    """The checks do not refuse what is fine: shared imports, outputs in the cache's root."""
    project(tmp_path)
    (tmp_path / "cache").mkdir()
    jobs = [job("a.o", "a.native.o", imports=("lib.o",)), job("b.o", "cache/b.native.o",
            imports=("lib.o", "a.o"))]  # fmt: skip
    write_job_file(tmp_path, jobs, ["lib.o"])
    done = run_cached_dist(tmp_path, "--quiet")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.native.o").read_text() == "obj"
    assert (tmp_path / "cache" / "b.native.o").read_text() == "obj"
    assert set(os.listdir(tmp_path / "cache")) - {"b.native.o"} <= {*LAYOUT, TAG}


@pytest.mark.parametrize("target", ["fifo", "/dev/zero"])
def test_job_file_that_is_not_a_regular_file(tmp_path: Path, target: str) -> None:
    name = fifo(tmp_path / "job.json") if target == "fifo" else target
    done = subprocess.run([cached_dist_exe(), name], cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert_one_line_error(done, 2, f"job file is not a regular file: {name}")


def test_reads_are_bounded_by_the_size_examined(tmp_path: Path) -> None:
    f = tmp_path / "grows.o"
    f.write_bytes(b"x" * 1000)
    seen = os.stat(f)
    with open(f, "ab") as out:
        out.write(b"y" * 1000)  # grew between the check and the read
    with pytest.raises(OSError, match="changed while being read"):
        read_regular(str(f), seen)
    assert read_regular(str(f)) == b"x" * 1000 + b"y" * 1000
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(OSError, match="not a regular file"):
        Digests().of(str(pipe))  # returns at once: never opened
    with pytest.raises(OSError, match="not a regular file"):
        Digests().of("/dev/zero")


def test_store_refuses_to_ingest_a_fifo(tmp_path: Path) -> None:
    pipe = tmp_path / "out.o"
    os.mkfifo(pipe)
    warnings: list[str] = []
    store = Store(tmp_path / "cache", warn=warnings.append)
    started = time.monotonic()
    ok = store.put("0" * 32, {"output0": str(pipe)}, duration=1.0, toolchain="t", key_version=2)
    assert not ok and time.monotonic() - started < 10
    assert warnings and "not a regular file" in warnings[0]
    assert store.get("0" * 32) is None


def test_clang_without_dash_o_is_refused(tmp_path: Path) -> None:
    """Found by the fuzzer: clang -c a.o without -o writes its object over a.o."""
    project(tmp_path)
    doc = {"common": {"args": ["/usr/lib/llvm-22/bin/clang", "-c", "-O2"], "inputs": []},
           "jobs": [{"args": ["a.o", "-fthinlto-index=a.thinlto.bc"],
                     "inputs": ["a.o", "a.thinlto.bc"], "outputs": ["a.native.o"]}]}  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(doc))
    before = snapshot(tmp_path)
    done = run_cached_dist(tmp_path)
    assert_one_line_error(done, 2, "the command has no -o: the compiler would name the object "
                          "itself, perhaps after an input (job 0, module a.o)")  # fmt: skip
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("where", ["inputs", "args", "common"])
def test_nul_characters_are_refused(tmp_path: Path, where: str) -> None:
    """Found by the fuzzer: no path or argument can hold NUL (os.stat raises ValueError)."""
    project(tmp_path)
    entry = job("a.o", "a.native.o")
    write_job_file(tmp_path, [entry], [])
    doc = json.loads((tmp_path / "job.json").read_text())
    if where == "inputs":
        doc["jobs"][0]["inputs"].append("lib\0.o")
    elif where == "args":
        doc["jobs"][0]["args"].append("-I\0x")
    else:
        doc["common"]["args"][0] = "pyth\0on3"
    (tmp_path / "job.json").write_text(json.dumps(doc))
    done = run_cached_dist(tmp_path)
    assert_one_line_error(done, 2, "contains a NUL character")


def test_inputs_are_read_without_touching_their_access_time(tmp_path: Path) -> None:
    """LLD has just written each input: reading one must not update its access time (a
    journalled inode write per input), and another user's file is still read."""
    f = tmp_path / "member.o"
    f.write_bytes(b"m" * 3000)
    past = 1_000_000_000
    os.utime(f, (past, past))  # atime <= mtime: a plain read would set atime now
    assert read_regular(str(f)) == b"m" * 3000
    assert os.stat(f).st_atime == past
    if os.geteuid() != 0:
        return
    # O_NOATIME is refused on a file one does not own: the read goes on without it.
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="cached-dist-noatime-"))  # /tmp: others may enter
    try:
        shared.chmod(0o755)
        g = shared / "root-owned.o"
        g.write_bytes(b"r" * 3000)
        g.chmod(0o644)
        code = ("import os\nfrom cached_dist.keys.digests import read_regular\n"
                f"os.setgid(65534); os.setuid(65534)\nprint(len(read_regular({str(g)!r})))\n")  # fmt: skip
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              cwd=Path(__file__).parent.parent)  # fmt: skip
    finally:
        shutil.rmtree(shared)
    assert done.returncode == 0 and done.stdout.strip() == "3000", done.stderr


def test_the_key_reads_inputs_with_the_checks_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stat per input per link: the key reads each input against the stat the checks
    took; an input replaced in between is an error (its job is compiled), never read as new."""
    from cached_dist import jobfile
    from cached_dist.jobfile.checks import check_job_file

    project(tmp_path)
    write_job_file(tmp_path, [job("a.o", "a.native.o", imports=("b.o",))], [])
    monkeypatch.chdir(tmp_path)
    jf = jobfile.load("job.json")
    examined = check_job_file(jf)
    assert {"a.o", "b.o"} <= set(examined)
    expected = Digests().of("a.o")
    stats: list[str] = []
    real_stat = os.stat

    def counted(path: str, *args: object, **kwargs: object) -> os.stat_result:
        stats.append(str(path))
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", counted)
    digests = Digests(examined)
    assert digests.of("a.o") == expected and stats == []
    os.unlink("b.o")
    Path("b.o").write_bytes(b"another b, written after the checks")
    with pytest.raises(OSError, match=r"(replaced|changed) while being read"):
        digests.of("b.o")


# Every spelling of a file a compile writes, with real clang-22 on a real link's job file.
# V is the victim: another job's module, which the command would overwrite (or, for options
# that name their files after the module, the files they would write).

CAPTURE = Path(__file__).parent / "capture_jobfile.py"
CLANG_CL = str(LLVM_BIN / "clang-cl")


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job file of a real link of calc (5 jobs) with every input it names."""
    root = tmp_path_factory.mktemp("spellings")
    project = build("calc", root / "p")
    done = project.link("app", distributor=sys.executable, distributor_args=[
        str(CAPTURE), str(root / "saved"), cached_dist_exe(), f"--cache-dir={root / 'c'}",
        "--quiet"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root / "saved"


def spelled_job(captured: Path, where: Path, compiler: str, spelled: list[str],
                extra_outputs: tuple[str, ...] = ()) -> tuple[list[str], str]:  # fmt: skip
    """A copy of the captured link in ``where`` whose job 0 writes its object as ``spelled``
    says (V: the victim, lexer.o, job 1's module) instead of ``-o OUTPUT``; the command of
    that job, and its declared output."""
    shutil.copytree(captured, where)
    (where / "sub").mkdir()
    (where / "args.rsp").write_text("-o lexer.o")
    (where / "victim.cfg").write_text("-o lexer.o")
    doc = json.loads((where / "job.json").read_text())
    if compiler == "clang-cl":
        doc["common"]["args"][0] = CLANG_CL
    job0 = doc["jobs"][0]
    module, index, dash_o, output = job0["args"]
    assert dash_o == "-o" and job0["outputs"] == [output]
    words = [w.replace("OUT", output).replace("V", "lexer.o") for w in spelled]
    job0["args"] = [module, index, *words]
    job0["outputs"] += list(extra_outputs)
    (where / "job.json").write_text(json.dumps(doc))
    return [*doc["common"]["args"], *job0["args"]], output


WRITES: dict[str, tuple[str, list[str], str]] = {
    "-oFILE": ("clang", ["-oV"], "the command writes -olexer.o, which is not one of"),
    "--output=FILE": ("clang", ["--output=V"], "the command writes --output=lexer.o, "),
    "--output FILE": ("clang", ["--output", "V"], "the command writes --output lexer.o, "),
    "-o=FILE": ("clang", ["-o=V"], "the command writes -o=lexer.o, which is not one of"),
    "a later -oFILE": ("clang", ["-o", "OUT", "-oV"], "the command writes -olexer.o, "),
    "-MJ FILE": ("clang", ["-MJ", "V", "-o", "OUT"], "the command writes -MJ lexer.o, "),
    "-MJFILE": ("clang", ["-MJV", "-o", "OUT"], "the command writes -MJlexer.o, "),
    "--serialize-diagnostics FILE": (
        "clang", ["--serialize-diagnostics", "V", "-o", "OUT"],
        "the command writes --serialize-diagnostics lexer.o, "),
    "-ftime-trace=FILE": ("clang", ["-ftime-trace=V", "-o", "OUT"],
                          "the command writes -ftime-trace=lexer.o, "),
    "-foptimization-record-file=FILE": (
        "clang", ["-foptimization-record-file=V", "-o", "OUT"],
        "the command writes -foptimization-record-file=lexer.o, "),
    "-fproc-stat-report=FILE": ("clang", ["-fproc-stat-report=V", "-o", "OUT"],
                                "the command writes -fproc-stat-report=lexer.o, "),
    "-Xclang -stats-file=FILE": ("clang", ["-Xclang", "-stats-file=V", "-o", "OUT"],
                                 "the command writes -Xclang -stats-file=lexer.o, "),
    "-Xclang -serialize-diagnostic-file -Xclang FILE": (
        "clang", ["-Xclang", "-serialize-diagnostic-file", "-Xclang", "V", "-o", "OUT"],
        "the command writes -Xclang -serialize-diagnostic-file lexer.o, "),
    "-Xarch_x86_64 -MJFILE": ("clang", ["-Xarch_x86_64", "-MJV", "-o", "OUT"],
                              "the command writes -MJlexer.o, "),
    "@FILE": ("clang", ["@args.rsp"], "the command has @args.rsp, which makes clang read "
              "arguments these checks cannot see (job 0, module eval.o)"),
    "--config=FILE": ("clang", ["--config=./victim.cfg"], "the command has "
                      "--config=./victim.cfg, which makes clang read arguments"),
    "-dumpdir PREFIX": ("clang", ["-dumpdir", "pre-", "-ftime-trace", "-o", "OUT"],
                        "the command has -dumpdir pre-, which makes clang write files of its "
                        "own naming where the job does not say (job 0, module eval.o)"),
    "clang-cl /FoFILE": ("clang-cl", ["/FoV"], "the command writes /Folexer.o, which is not"),
    "clang-cl /Fo:FILE": ("clang-cl", ["/Fo:V"], "the command writes /Fo:lexer.o, "),
    "clang-cl /Fo: FILE": ("clang-cl", ["/Fo:", "V"], "the command writes /Fo: lexer.o, "),
    "clang-cl -FoFILE": ("clang-cl", ["-FoV"], "the command writes -Folexer.o, "),
    "clang-cl /o FILE": ("clang-cl", ["/o", "V"], "the command writes /o lexer.o, "),
    "clang-cl /oFILE": ("clang-cl", ["/oV"], "the command writes /olexer.o, "),
    "clang-cl -o FILE": ("clang-cl", ["-o", "V"], "the command writes -o lexer.o, "),
    "clang-cl /clang:-oFILE": ("clang-cl", ["/clang:-oV"],
                               "the command writes /clang:-olexer.o, "),
    "clang-cl /clang:--output=FILE": ("clang-cl", ["/clang:--output=V"],
                                      "the command writes /clang:--output=lexer.o, "),
    "clang-cl /clang:-o /clang:FILE": ("clang-cl", ["/clang:-o", "/clang:V"],
                                       "the command writes /clang:-o lexer.o, "),
    "clang-cl /Fo naming no file": ("clang-cl", ["/FoOUT", "/Fo"], "the command has /Fo, which "
                                    "leaves clang-cl to name the object after the module"),
    "clang-cl /Fo naming a directory": ("clang-cl", ["/Fosub/"], "the command has /Fosub/, "
                                        "which leaves clang-cl to name the object after"),
    "clang-cl /FaFILE": ("clang-cl", ["/FaV", "/FoOUT"], "the command writes /Falexer.o, "),
    "clang-cl /FaDIRECTORY": ("clang-cl", ["/Fasub/", "/FoOUT"], "the command has /Fasub/, "
                              "which makes clang write files of its own naming where"),
    "clang-cl without an output option": (
        "clang-cl", [], "the command has no /Fo: the compiler would name the object itself"),
}  # fmt: skip


def changed(before: dict[str, tuple[str, int, int]], root: Path, allowed: str) -> list[str]:
    """What is new or different under ``root`` since ``before``, but ``allowed``."""
    now = snapshot(root, dir_times=False)
    return sorted(p for p, v in now.items() if p != allowed and before.get(p) != v)


@requires_toolchain
@pytest.mark.parametrize("case", WRITES)
def test_every_spelling_of_a_file_clang_writes_is_checked(
    captured: Path, tmp_path: Path, case: str
) -> None:
    """The command, run as it is, writes a file its job does not declare (the premise: the
    spelling is real); cached-dist refuses the job file before anything is touched."""
    compiler, spelled, message = WRITES[case]
    command, output = spelled_job(captured, tmp_path / "direct", compiler, spelled)
    before = snapshot(tmp_path / "direct", dir_times=False)
    subprocess.run(command, cwd=tmp_path / "direct", capture_output=True, timeout=120)
    assert changed(before, tmp_path / "direct", output), "the spelling writes nothing more"
    spelled_job(captured, tmp_path / "checked", compiler, spelled)
    before = snapshot(tmp_path / "checked")
    done = run_cached_dist(tmp_path / "checked")
    assert_one_line_error(done, 2, message)
    assert snapshot(tmp_path / "checked") == before


@requires_toolchain
@pytest.mark.parametrize(("compiler", "spelled", "extra"), [
    ("clang", ["-oOUT"], ()),
    ("clang", ["--output=OUT"], ()),
    ("clang", ["--output", "OUT"], ()),
    ("clang", ["-o", "OUT", "-MJ", "eval.json"], ("eval.json",)),
    # Names clang gives files beside the object or in the working directory, after the
    # object or the module: what a user asks LLD for to debug a link.
    ("clang", ["-o", "OUT", "-ftime-trace"], ()),
    ("clang", ["-o", "OUT", "-save-temps=obj"], ()),
    ("clang", ["-o", "OUT", "-save-stats"], ()),
    ("clang-cl", ["/FoOUT"], ()),
    ("clang-cl", ["/clang:-oOUT"], ()),
    ("clang-cl", ["/FoOUT", "/FAs"], ()),
])  # fmt: skip
def test_a_declared_write_in_any_spelling_links(
    captured: Path, tmp_path: Path, compiler: str, spelled: list[str], extra: tuple[str, ...]
) -> None:
    """What the job declares may be written in any spelling: the object is the one the
    command gives when run by itself, and a declared side output is written."""
    command, output = spelled_job(captured, tmp_path / "direct", compiler, spelled, extra)
    alone = subprocess.run(command, cwd=tmp_path / "direct", capture_output=True, timeout=120)
    assert alone.returncode == 0, alone.stderr
    spelled_job(captured, tmp_path / "w", compiler, spelled, extra)
    done = run_cached_dist(tmp_path / "w", "--quiet")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "w" / output).read_bytes() == (tmp_path / "direct" / output).read_bytes()
    if compiler == "clang" and len(spelled) <= 2:  # only the object, spelled otherwise
        assert (tmp_path / "w" / output).read_bytes() == (captured / "reference/0.0.o").read_bytes()
    for side in extra:
        assert (tmp_path / "w" / side).stat().st_size > 0


# The scan (cached_dist/jobfile/writes.py) against clang-22's own reading of each command line
# (``clang -###``): the object it writes, and the files cc1 is told to write.
AGREES = [
    "-o x.o", "-ox.o", "-o=x.o", "--output=x.o", "--output x.o", "-o a.o -o b.o",
    "-o a.o --output=b.o", "-ox.o -o y.o", "-object -o x.o", "-object-file-name=f -o x.o",
    "-objcmt-migrate-literals", "-ohos", "-Xclang -oevil.o -o x.o", "-Xclang=-oevil.o -o x.o",
    "--serialize-diagnostics d -o x.o", "-ftime-trace=t.json -o x.o",
    "-foptimization-record-file=r.yaml -o x.o", "-Xclang -stats-file=st -o x.o",
    "-Xclang -serialize-diagnostic-file -Xclang d2 -o x.o", "-Xclang -ftime-trace=t3 -o x.o",
    "-Xclang -opt-record-file -Xclang r2 -o x.o", "-Xclang -stack-usage-file -Xclang su -o x.o",
    "-Xclang -split-dwarf-output -Xclang s.dwo -o x.o", "-MT -oevil -o x.o",
    "-Xlinker -o -Xlinker evil -o x.o", "-Xassembler -oevil -o x.o",
    "CL", "CL /Fox.obj", "CL /Fox", "CL /Fo:x.obj", "CL /Fo: x.obj", "CL -Fox.obj",
    "CL /o x.obj", "CL /ox.obj", "CL -o x.obj", "CL -ox", "CL --output=x.obj",
    "CL /clang:-ox.obj", "CL /clang:--output=x.obj", "CL /clang:-o /clang:x.obj",
    "CL /Fox.obj /o y.obj", "CL /openmp /Fox.obj", "CL /openmpX", "CL /opt/x.obj",
    "CL /Falist /Fox.obj", "CL /FAs /Falist.asm /Fox.obj", "CL -ftime-trace=t.json /Fox.obj",
    "CL -Xclang -stats-file=q /Fox.obj", "CL -object-file-name=foo /Fox.obj", "CL -MD /Fox.obj",
    "CL -MT /Fox.obj",
]  # fmt: skip
# cc1's options for files it writes (other than its object, -o).
CC1_WRITES = ("-dependency-file", "-serialize-diagnostic-file", "-opt-record-file",
              "-split-dwarf-output", "-stack-usage-file")  # fmt: skip
CC1_WRITES_JOINED = ("-ftime-trace=", "-stats-file=")


@requires_toolchain
@pytest.mark.parametrize("line", AGREES)
def test_the_scan_reads_a_command_as_clang_does(captured: Path, line: str) -> None:
    from cached_dist.jobfile.writes import read

    cl = line.startswith("CL")
    extra = shlex.split(line.removeprefix("CL"))
    base = ["-c", "-O2", "eval.o", "-fthinlto-index=eval.1.bc"]
    driver = [CLANG_CL] if cl else [str(LLVM_BIN / "clang")]
    done = subprocess.run([*driver, *base, *extra, "-###"], cwd=captured, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    jobs = [shlex.split(x) for x in done.stderr.splitlines() if x.startswith(' "')]
    assert jobs, done.stderr
    objects, files = [], []
    for job in jobs:
        for k, arg in enumerate(job):
            if arg == "-o":
                objects.append(job[k + 1])
            elif arg in CC1_WRITES:
                files.append(job[k + 1])
            elif arg.startswith(CC1_WRITES_JOINED):
                files.append(arg.partition("=")[2])
    clang_object, clang_files = objects[-1], files + objects[:-1]  # -save-temps, /Fa: cc1 -o
    found = read([*base, *extra], "cl" if cl else "gcc")
    assert found.refused is None
    scanned = found.objects[-1][1] if found.objects else ("eval.obj" if cl else "eval.o")
    assert scanned == clang_object
    assert sorted(clang_files) == sorted(p for _, p in found.files), found.files


@requires_toolchain
@pytest.mark.parametrize("name", [
    "clang", "clang-22", "clang++-22", "clang-cl", "clang-cl-22", "clang-cl-22.1", "cl",
    "cl.exe", "cl22", "mycl", "foo-cl", "x86_64-w64-cl", "x-cl-y", "clang-cl-22-x", "CL",
    "cl++", "dxc", "gcc", "cc", "python3",
])  # fmt: skip
def test_the_driver_mode_follows_the_program_s_name_as_clang_s(
    tmp_path: Path, captured: Path, name: str
) -> None:
    """clang runs in clang-cl mode by the name it is started as: an object it names itself
    ends in .obj then."""
    from cached_dist.jobfile.writes import program_mode

    (tmp_path / name).symlink_to(LLVM_BIN / "clang")
    done = subprocess.run([str(tmp_path / name), "-c", "eval.o", "-fthinlto-index=e.bc", "-###"],
                          cwd=captured, capture_output=True, text=True, timeout=60)  # fmt: skip
    cl = '"-o" "eval.obj"' in done.stderr
    assert cl or '"-o" "eval.o"' in done.stderr, done.stderr
    assert (program_mode(name) == "cl") == cl
