"""Results stream between concurrent links: a waiting link gets each job as soon as the
link compiling it has finished that job, not after that link's whole batch."""

import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from .toolchain import CLANG, build, requires_toolchain, stats

pytestmark = [requires_toolchain, pytest.mark.e2e]

SLOW = 8.0
FAST = 1.0


def slow_compiler(where: Path, slow_module: str) -> tuple[Path, Path]:
    """A remote compiler that takes SLOW extra seconds for one module, FAST for the others,
    and logs each start and end."""
    log = where / "compiles.log"
    script = where / "slow-clang"
    script.write_text(
        "#!/bin/sh\n"
        f"echo \"start $(date +%s.%N) $*\" >> '{log}'\n"
        f'case "$*" in *" {slow_module} "*) sleep {SLOW};; *) sleep {FAST};; esac\n'
        f"'{CLANG}' \"$@\"; status=$?\n"
        f"echo \"end $(date +%s.%N) $*\" >> '{log}'\n"
        "exit $status\n"
    )
    script.chmod(0o755)
    return script, log


def timed_lines(proc: subprocess.Popen[str], into: list[tuple[float, str]]) -> threading.Thread:
    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            into.append((time.time(), line.rstrip("\n")))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_waiting_link_gets_each_result_as_it_is_stored(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    compiler, log = slow_compiler(tmp_path, "main.o")
    cache = tmp_path / "cache"
    args = [f"--cache-dir={cache}", "--jobs=2", "--verbose"]
    first = subprocess.Popen(
        project.link_command("first", remote_compiler=compiler, distributor_args=args),
        cwd=project.dir, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not log.exists() and time.monotonic() < deadline:  # the first link is compiling
        time.sleep(0.02)
    second_lines: list[tuple[float, str]] = []
    second = subprocess.Popen(
        project.link_command("second", remote_compiler=compiler, distributor_args=args),
        cwd=project.dir, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    reader = timed_lines(second, second_lines)
    first_err = first.communicate(timeout=120)[1]
    second.wait(timeout=120)
    reader.join(timeout=10)
    assert first.returncode == 0, first_err
    assert second.returncode == 0, second_lines
    ends = [line.split() for line in log.read_text().splitlines() if line.startswith("end ")]
    assert len(ends) == 5  # every job compiled once, by the first link
    slow_end = min(float(e[1]) for e in ends if "main.o" in e)
    hits = [(t, line) for t, line in second_lines if line.startswith("cached-dist: hit ")]
    assert len(hits) == 5, second_lines
    early = [line for t, line in hits if t < slow_end - SLOW / 4]
    assert len(early) >= 1, (hits, slow_end)  # served while the first link still compiled
    assert not any("main.o" in line for line in early)
    summary = [line for _, line in second_lines if " jobs: " in line]
    assert re.search(
        r"5 jobs: 5 hits \(5 after waiting [\d.]+ s for other links\), 0 compiled, ", summary[0]
    ), summary
    assert re.search(
        r"hit  \w+ ops.o: after waiting [\d.]+ s for another link, [\d.]+ ms",
        "\n".join(line for _, line in hits),
    )
    assert (project.dir / "first").read_bytes() == (project.dir / "second").read_bytes()
    assert stats(cache)["misses"] == 5
