"""Bad job files are refused before anything on disk is touched: one line, exit 2, no change.

Each case runs the installed console script on a small job file whose compiler would write
every output (python3), so a check that let the case through would visibly change the disk.
"""

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cached_dist.keys.digests import Digests, read_regular
from store import LAYOUT, Store

from .test_cli import assert_one_line_error
from .toolchain import cached_dist_exe

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
    assert set(os.listdir(tmp_path / "cache")) - {"b.native.o"} <= set(LAYOUT)


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
