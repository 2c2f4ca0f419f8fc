"""Links killed at random moments, several at once on one cache: nothing stalls or outlives them.

Each trial starts 2-4 real DTLTO links of one program on one cache, then SIGKILLs or
SIGTERMs one of them at a random moment: its whole process group (clang, ld.lld,
cached-dist) or cached-dist alone. Afterwards no compiler of the trial is left running, no
link waited long for a claim another left behind, every killed link relinks, every binary is
byte-identical to an uncached link's and runs, and ``cached-dist verify`` finds the cache
intact. CI runs 20 trials; ``make soak`` runs 300 (CACHED_DIST_KILL_TRIALS).

The compilers are a wrapper that records its pid and process group, then sleeps before it
execs clang, so kills land mid-compile as well as while placing hits and storing results.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .toolchain import CLANG, Project, build, cached_dist_exe, requires_toolchain, run

pytestmark = [requires_toolchain, pytest.mark.e2e]

TRIALS = int(os.environ.get("CACHED_DIST_KILL_TRIALS", "20"))
SEED = int(os.environ.get("CACHED_DIST_KILL_SEED", "39"))
SERIAL = Path(__file__).parent / "serial_distributor.py"
#: Seconds after a kill by which no compiler of the link may be left. The guard ends them in
#: ~40 ms on an idle machine (issue 39 asks for under 0.5 s); the bound is generous so that a
#: loaded machine never fails it by chance, and still far below the 30 s the slow compiler
#: below would otherwise live (without the guard this test fails every time).
GONE_WITHIN = 10.0
#: Our temporary files beside outputs (store/fsutil.temp_name): .OUTPUT.PID.RANDOM.tmp
OUR_TEMP = re.compile(r"^\..+\.[0-9]+\.[0-9a-f]{12}\.tmp$")


def slow_compiler(where: Path, log: Path, pause: float) -> Path:
    """Records "PID PGID" of each compile, waits ``pause`` s, then becomes clang."""
    script = where / "slow-clang"
    script.write_text(
        "#!/bin/sh\n"
        f"echo \"$$ $(cut -d' ' -f5 /proc/$$/stat)\" >> '{log}'\n"
        f"sleep {pause}\n"
        f"exec '{CLANG}' \"$@\"\n"
    )
    script.chmod(0o755)
    return script


def _groups(log: Path) -> set[int]:
    if not log.exists():
        return set()
    return {int(line.split()[1]) for line in log.read_text().splitlines() if len(line.split()) == 2}


def _running_in(groups: set[int]) -> list[int]:
    """Processes (not zombies) in any of ``groups``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in groups:
            found.append(int(entry))
    return found


def _wait_gone(groups: set[int], bound: float) -> list[int]:
    deadline = time.monotonic() + bound
    while (left := _running_in(groups)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return left


def _cached_dist_of(session: int) -> int | None:
    """The cached-dist process LLD started in the link whose session is ``session``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            parent = Path(f"/proc/{fields[1]}/comm").read_text().strip()
        except OSError:
            continue
        if (
            int(fields[3]) == session
            and parent == "ld.lld"
            and len(argv) > 1
            and (argv[1].endswith(b"/cached-dist"))
        ):
            return int(entry)
    return None


def _start(project: Project, out: str, args: list[str], compiler: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        project.link_command(out, distributor_args=args, remote_compiler=compiler),
        cwd=project.dir, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def _kill(link: subprocess.Popen[str], sig: int, alone: bool) -> None:
    """``sig`` to the link's process group, or to its cached-dist alone (once LLD has started
    it: the group if the link ends first)."""
    target = None
    while alone and link.poll() is None and (target := _cached_dist_of(link.pid)) is None:
        time.sleep(0.005)
    try:
        if target is not None:
            os.kill(target, sig)
        else:
            os.killpg(link.pid, sig)
    except ProcessLookupError:
        pass  # it had ended already


def _our_temps(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if OUR_TEMP.match(p.name)]


@pytest.mark.parametrize("runner", ["local", "wrapped"])
@pytest.mark.parametrize("alone", [False, True], ids=["group", "cached-dist alone"])
def test_no_compiler_outlives_a_sigkilled_link(tmp_path: Path, runner: str, alone: bool) -> None:
    project = build("calc", tmp_path / "p")
    log = tmp_path / "compiles"
    compiler = slow_compiler(tmp_path, log, pause=30)  # still sleeping when the kill lands
    args = [f"--cache-dir={tmp_path / 'cache'}", "--jobs=2"]
    if runner == "wrapped":  # the inner distributor's compilers are its children
        args += ["--", sys.executable, str(SERIAL)]
    link = _start(project, "app", args, compiler)
    deadline = time.monotonic() + 120
    while len(_groups(log)) < (1 if runner == "wrapped" else 2):
        assert time.monotonic() < deadline and link.poll() is None, "no compile started"
        time.sleep(0.02)
    if alone:
        while _cached_dist_of(link.pid) is None:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    _kill(link, signal.SIGKILL, alone)
    killed = time.monotonic()
    left = _wait_gone(_groups(log), GONE_WITHIN)
    took = time.monotonic() - killed
    if left:  # say what survived before failing
        os.killpg(link.pid, signal.SIGKILL)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"compilers {left} alive {took:.2f} s after the kill"
    print(
        f"{runner}, {'cached-dist alone' if alone else 'group'}: no compiler {took:.3f} s "
        "after the SIGKILL"
    )  # issue 39 asks for 0.5 s; the bound above is for load
    link.communicate(timeout=60)


def test_kill_trials(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    project = build("calc", tmp_path / "p")
    log = tmp_path / "compiles"
    compiler = slow_compiler(tmp_path, log, pause=0.3)
    reference = project.link("reference", distributor_args=["--disable"])
    assert reference.returncode == 0, reference.stderr
    expected = (project.dir / "reference").read_bytes()
    cache = tmp_path / "cache"
    args = [f"--cache-dir={cache}", "--jobs=2", "--verbose"]
    exe = cached_dist_exe()
    outcomes: dict[str, int] = {}
    links_run, longest = 0, 0.0  # links started (relinks too); the longest claim wait seen
    for trial in range(TRIALS):
        if rng.random() < 0.5:  # often from cold, so kills land mid-compile too
            run([exe, "clear", f"--cache-dir={cache}"], tmp_path)
        log.unlink(missing_ok=True)
        outs = [f"app{trial}.{i}" for i in range(rng.randint(2, 4))]
        links = {out: _start(project, out, args, compiler) for out in outs}
        victim = rng.choice(outs)
        sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
        alone = rng.random() < 0.5
        time.sleep(rng.uniform(0.0, 1.5))
        _kill(links[victim], sig, alone)
        how = f"trial {trial}: {sig.name} of {'cached-dist' if alone else 'the link'} {victim}"
        for out, link in links.items():
            _, err = link.communicate(timeout=300)
            links_run += 1
            if out != victim:
                assert link.returncode == 0, f"{how}: {out} failed: {err}"
            for waited in re.findall(r"waited ([0-9.]+) s for", err):
                assert float(waited) < 10.0, f"{how}: {out} waited {waited} s: {err}"
                longest = max(longest, float(waited))
        left = _wait_gone(_groups(log), 5.0)
        assert not left, f"{how}: compilers {left} outlived their links"
        code = links[victim].returncode
        outcome = f"{sig.name} {'alone' if alone else 'group'} {'ok' if code == 0 else 'killed'}"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if code != 0:  # the build tool runs it again
            again = project.link(victim, distributor_args=args, remote_compiler=compiler)
            links_run += 1
            assert again.returncode == 0, f"{how}: relink failed: {again.stderr}"
            for waited in re.findall(r"waited ([0-9.]+) s for", again.stderr):
                assert float(waited) < 10.0, f"{how}: relink waited {waited} s"
                longest = max(longest, float(waited))
        for out in outs:
            assert (project.dir / out).read_bytes() == expected, f"{how}: {out} differs"
        assert project.run_program(victim) == project.expected_output
        assert _our_temps(project.dir) == [], f"{how}: temporary files left"
        for out in outs:
            (project.dir / out).unlink()
        if trial % 5 == 4 or trial == TRIALS - 1:
            done = run([exe, "verify", f"--cache-dir={cache}"], tmp_path)
            assert done.returncode == 0 and " 0 corrupt" in done.stdout, (
                f"{how}: {done.stdout}{done.stderr}"
            )
    print(f"kill trials: {TRIALS} ({links_run} links, every binary right), the longest wait for "
          f"other links' claims {longest:.1f} s, {dict(sorted(outcomes.items()))}")  # fmt: skip
