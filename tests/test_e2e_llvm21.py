"""End to end on a real LLVM 21 (clang and LLD 21.1 from the ziglang wheel).

LLD 21 names a regular archive's members ``libcalc.a(ops.o at 84)`` in the job file and
never writes them: cached-dist keys them from the archive's bytes and writes them out only
for the jobs that run, removing them afterwards, also after a crash of the link.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .llvm21 import Llvm21, requires_llvm21, script
from .test_hot_path import HEAVY, imported
from .toolchain import Project, cached_dist_exe, run, stats

pytestmark = [requires_llvm21, pytest.mark.e2e]


def leftovers(directory: Path) -> list[str]:
    """Extracted members (``... at N)``) and markers still in ``directory``."""
    return sorted(p.name for p in directory.iterdir()
                  if p.name.endswith(")") or p.name.startswith(".cached-dist"))  # fmt: skip


def link(tc: Llvm21, project: Project, out: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run(tc.link_command(project, out, list(args)), project.dir, env=tc.env)


@pytest.mark.parametrize("archive", ["regular", "thin"])
def test_archive_links_relinks_with_zero_compilations_and_leaves_nothing(
    tmp_path: Path, archive: str
) -> None:
    tc = Llvm21(tmp_path / "tc")
    project = tc.build("calc", tmp_path / "p", archive)  # type: ignore[arg-type]
    cache = tmp_path / "cache"
    done = link(tc, project, "first", f"--cache-dir={cache}", "--verbose")
    assert done.returncode == 0, done.stderr
    if archive == "regular":  # the job file really names members that do not exist
        assert "miss " in done.stderr and "libcalc.a(ops.o at " in done.stderr
    assert project.run_program("first") == project.expected_output
    assert tc.compilations() == 5
    assert leftovers(project.dir) == []
    env = {**tc.env, "PYTHONPROFILEIMPORTTIME": "1"}
    done = run(tc.link_command(project, "second", [f"--cache-dir={cache}"]), project.dir, env=env)
    assert done.returncode == 0, done.stderr
    assert tc.compilations() == 5, done.stderr  # every job a hit
    assert "5 jobs: 5 hits, 0 compiled" in done.stderr
    assert sorted(m for m in HEAVY if m in imported(done.stderr)) == []  # still a cheap hit
    plain = link(tc, project, "plain", "--disable")
    assert plain.returncode == 0, plain.stderr
    first, second = (project.dir / "first").read_bytes(), (project.dir / "second").read_bytes()
    assert first == second == (project.dir / "plain").read_bytes()
    s = stats(cache)
    assert s["shards_decoded"] == 5 and s.get("shards_not_canonical", 0) == 0
    assert leftovers(project.dir) == []
    # --verify-hits recompiles every hit: those compiles read the members too.
    done = link(tc, project, "third", f"--cache-dir={cache}", "--verify-hits=1")
    assert done.returncode == 0, done.stderr
    assert "5 hits, 0 compiled, 5 verified (0 mismatches)" in done.stderr
    assert tc.compilations() == 15  # first, plain (--disable) and the verification
    assert leftovers(project.dir) == []


def test_a_wrapped_distributor_gets_the_members_written_out(tmp_path: Path) -> None:
    """LLVM's own distributors fail on LLD 21's regular archives; wrapped, a plain serial
    one succeeds, because the members exist while it runs."""
    tc = Llvm21(tmp_path / "tc")
    project = tc.build("calc", tmp_path / "p", "regular")
    serial = Path(__file__).parent / "serial_distributor.py"
    done = link(tc, project, "app", f"--cache-dir={tmp_path / 'cache'}", "--no-fallback", "--",
                sys.executable, str(serial))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert tc.compilations() == 5 and "fallback" not in done.stderr
    assert project.run_program() == project.expected_output
    assert leftovers(project.dir) == []


def offset_of(member: str, verbose: str) -> int:
    return int(verbose.split(f"({member} at ", 1)[1].split(")", 1)[0])


def test_regular_archive_hits_after_the_archive_is_rebuilt(tmp_path: Path) -> None:
    """Per-link names do not reach the key: relinking after re-archiving the same objects in
    another order (other offsets) hits all, through canonical shards."""
    tc = Llvm21(tmp_path / "tc")
    project = tc.build("calc", tmp_path / "p", "regular")
    cache = tmp_path / "cache"
    first = link(tc, project, "first", f"--cache-dir={cache}", "--verbose")
    assert first.returncode == 0, first.stderr
    ar = project.dir / "libcalc.a"
    extract = run(["/usr/lib/llvm-22/bin/llvm-ar", "x", ar.name], project.dir)
    assert extract.returncode == 0, extract.stderr
    ar.unlink()
    rebuilt = run(["/usr/lib/llvm-22/bin/llvm-ar", "rcs", ar.name, "strutil.o", "ops.o"],
                  project.dir)  # fmt: skip
    assert rebuilt.returncode == 0
    done = link(tc, project, "second", f"--cache-dir={cache}", "--verbose")
    assert done.returncode == 0, done.stderr
    assert offset_of("ops.o", first.stderr) != offset_of("ops.o", done.stderr)
    assert tc.compilations() == 5 and "5 hits, 0 compiled" in done.stderr
    assert project.run_program("second") == project.expected_output


def test_member_not_at_the_named_offset_is_one_clear_error(tmp_path: Path) -> None:
    tc = Llvm21(tmp_path / "tc")
    project = tc.build("calc", tmp_path / "p", "regular")
    keep = tmp_path / "keep"
    keep.mkdir()
    capture = script(tmp_path / "capture", f"cp \"$1\" *.thinlto.bc '{keep}'; exit 1")
    run(tc.link_command(project, "app", [], distributor=str(capture)), project.dir, env=tc.env)
    for shard in keep.glob("*.thinlto.bc"):  # LLD removed its own copies when the link failed
        shard.rename(project.dir / shard.name)
    (tmp_path / "job.json").write_bytes(next(keep.glob("*.json")).read_bytes())
    text = (tmp_path / "job.json").read_text()
    ops = text.split("libcalc.a(ops.o at ", 1)[1].split(")", 1)[0]
    bad = tmp_path / "bad.json"
    bad.write_text(text.replace(f"(ops.o at {ops})", f"(ops.o at {int(ops) + 2})"))
    done = run([cached_dist_exe(), f"--cache-dir={tmp_path / 'cache'}", bad], project.dir)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"cached-dist: error: archive member not found: ops.o at offset {int(ops) + 2} in "
        f"archive libcalc.a (no member header there; the job file names "
        f"libcalc.a(ops.o at {int(ops) + 2}))"
    )


def _wait_for(predicate: object, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def kill_link_while_compiling(tc: Llvm21, project: Project, where: Path) -> None:
    """Starts a --disable link whose backend compiles hang, SIGKILLs cached-dist in the
    middle (members extracted), and checks it left a marker behind."""
    where.mkdir()
    pids = where / "pids"
    # A backend compiler that records cached-dist (its parent, or its guard's: the runners'
    # cached-dist-guard, whose name the kernel cuts to 15 characters) and its process group,
    # then hangs.
    hang = script(where / "hang", "p=$PPID\n"
                  "case $(cat /proc/$p/comm) in cached-dist-gua*) p=$(cut -d' ' -f4 /proc/$p/stat);; esac\n"
                  f"echo \"$p $(cut -d' ' -f5 /proc/$$/stat)\" >> '{pids}'\nexec sleep 60")  # fmt: skip
    cmd = [a.replace(str(tc.clang), str(hang))
           for a in tc.link_command(project, "killed", ["--disable"])]  # fmt: skip
    linker = subprocess.Popen(cmd, cwd=project.dir, env=tc.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        _wait_for(lambda: pids.exists() and pids.read_text().strip())
        distributor = int(pids.read_text().split()[0])
        assert any(n.endswith(")") for n in os.listdir(project.dir))  # members are out
        os.kill(distributor, signal.SIGKILL)
        linker.wait(60)
        assert linker.returncode != 0
    finally:
        for line in pids.read_text().splitlines() if pids.exists() else []:
            with contextlib.suppress(ProcessLookupError):  # compilers lead groups of their own
                os.killpg(int(line.split()[1]), signal.SIGKILL)
        if linker.poll() is None:
            os.killpg(linker.pid, signal.SIGKILL)
            linker.wait()
    assert [n for n in leftovers(project.dir) if n.startswith(".cached-dist-members.")]
    assert [n for n in leftovers(project.dir) if n.endswith(")")]


def test_sigkill_of_the_link_then_the_next_link_cleans_up(tmp_path: Path) -> None:
    tc = Llvm21(tmp_path / "tc")
    project = tc.build("calc", tmp_path / "p", "regular")
    cache = tmp_path / "cache"
    assert link(tc, project, "first", f"--cache-dir={cache}").returncode == 0
    kill_link_while_compiling(tc, project, tmp_path / "kill1")
    # A full hit does not need the stale copies (the archive is read) and removes them.
    done = link(tc, project, "second", f"--cache-dir={cache}")
    assert done.returncode == 0, done.stderr
    assert "5 jobs: 5 hits, 0 compiled" in done.stderr
    assert leftovers(project.dir) == []
    # A link that compiles replaces them with its own, and removes those too.
    kill_link_while_compiling(tc, project, tmp_path / "kill2")
    done = link(tc, project, "third", f"--cache-dir={tmp_path / 'other-cache'}")
    assert done.returncode == 0, done.stderr
    assert "5 jobs: 0 hits, 5 compiled" in done.stderr
    assert project.run_program("third") == project.expected_output
    assert leftovers(project.dir) == []


def test_concurrent_links_share_the_extracted_members(tmp_path: Path) -> None:
    """Two links in one directory need the same members at once: each finds them, neither
    removes them while the other compiles, and none is left when both are done."""
    tc = Llvm21(tmp_path / "tc")
    project = tc.build("calc", tmp_path / "p", "regular")
    slow = script(tmp_path / "slow-clang", f"sleep 1\nexec '{tc.clang}' \"$@\"")
    links = []
    for name in ("one", "two"):
        cmd = tc.link_command(project, name, [f"--cache-dir={tmp_path / name}", "-j2"])
        cmd = [a.replace(str(tc.clang), str(slow)) for a in cmd]
        links.append(subprocess.Popen(cmd, cwd=project.dir, env=tc.env, text=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))  # fmt: skip
    for p in links:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "5 jobs: 0 hits, 5 compiled" in err
    assert tc.compilations() == 10
    assert project.run_program("one") == project.run_program("two") == project.expected_output
    assert leftovers(project.dir) == []
