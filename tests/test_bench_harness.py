"""The real-code-base benchmark's plumbing on a tiny synthetic make project.

The real benchmark (`python -m benchmarks run`) takes many minutes; this runs every scenario
and configuration once on four small modules, so a broken harness shows up in CI.
"""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import main as bench_main
from benchmarks.harness import report
from benchmarks.harness.codebases import Build, CodeBase, Edit, capture, run
from benchmarks.harness.configs import CONFIGS, LLVM_BIN, build_ldflags
from benchmarks.harness.runner import SCENARIOS, Bench

pytestmark = pytest.mark.skipif(
    not (LLVM_BIN / "clang").exists(), reason="/usr/lib/llvm-22/bin/clang is missing"
)

MAKEFILE = """\
CC = clang
# Links at -O3, as a cmake Release build does: the -O3 scenario must still change the level.
CFLAGS = -O3 -flto=thin
OBJS = util.o shapes.o text.o
tiny: main.o libtiny.a
\t$(CC) $(CFLAGS) $(LDFLAGS) -o tiny main.o libtiny.a
libtiny.a: $(OBJS)
\tllvm-ar rcu libtiny.a $(OBJS)
%.o: %.c util.h
\t$(CC) $(CFLAGS) -c $< -o $@
"""
SOURCES = {
    "util.h": "int twice(int x);\nint area(int w, int h);\nint letters(const char *s);\n",
    "util.c": '#include "util.h"\nint twice(int x) {\n  return 2 * x;\n}\n',
    "shapes.c": '#include "util.h"\nint area(int w, int h) {\n  return twice(w) * h / 2;\n}\n',
    "text.c": '#include "util.h"\nint letters(const char *s) {\n'
    "  int n = 0;\n  while (*s++) n = twice(n) / 2 + 1;\n  return n;\n}\n",
    "main.c": '#include <stdio.h>\n#include "util.h"\nint main(void) {\n'
    '  printf("%d %d\\n", area(3, 4), letters("tiny"));\n  return 0;\n}\n',
}


class Tiny(CodeBase):
    """Four modules, a regular static archive and a Makefile: a real build system in small."""

    name = "tiny"
    package = "none"
    language = "C"
    build_system = "make"
    program = "tiny (main.o + libtiny.a)"
    leaf = Edit("main.c", "int main(void)")
    hub = Edit("util.c", "int twice(int x)")

    def build(self, top: Path, cache: Path) -> Build:
        top.mkdir(parents=True)
        (top / "Makefile").write_text(MAKEFILE)
        for name, text in SOURCES.items():
            (top / name).write_text(text)
        build = Build(root=top, cwd=top, link=(), top=top)
        self.rebuild(build, cache)
        (top / "tiny").unlink()
        dry = run(["make", "-n", "tiny", f"LDFLAGS={build_ldflags(cache)}"], top)
        (line,) = [s for s in dry.splitlines() if " -o tiny " in s]
        self.rebuild(build, cache)
        return Build(root=top, cwd=top, link=capture(shlex.split(line), "tiny"), top=top)

    def rebuild(self, build: Build, cache: Path) -> None:
        run(["make", "tiny", f"LDFLAGS={build_ldflags(cache)}"], build.cwd)

    def smoke(self, binary: Path, build: Build) -> list[str]:
        return ["sh", "-c", f'test "$({binary})" = "12 4"']


def test_every_scenario_and_configuration(tmp_path: Path) -> None:
    messages: list[str] = []
    bench = Bench(Tiny(), tmp_path / "work", rounds=1, cold_rounds=1, concurrency=[2],
                  progress=messages.append)  # fmt: skip
    bench.run()
    result = bench.as_json()
    assert list(result["scenarios"]) == list(SCENARIOS)[:-1]  # no concurrent-4 asked for
    assert any("(d) cached-dist + bare distributor" in m for m in messages)
    for name, scenario in result["scenarios"].items():
        jobs = scenario["configs"]["b"]["jobs"][0]
        assert jobs == 4 * scenario["parallel_links"], name
        for key, outcome in scenario["configs"].items():
            assert outcome["smoke_ok"], (name, key)
            assert outcome["identical_to_b"] in (True, None), (name, key)
            assert outcome["median_s"] > 0
    scenarios = result["scenarios"]
    for key in "abcde":  # the cold link compiles everything, whoever caches
        assert scenarios["cold"]["configs"][key]["compilations"] == [4]
    for key in "cde":  # an identical relink and a touched rebuild compile nothing
        for name in ("relink", "touch", "copy"):
            assert scenarios[name]["configs"][key]["compilations"] == [0], (name, key)
    for key in "de":  # an edit in main.c recompiles main.c's job only
        assert scenarios["edit-leaf"]["configs"][key]["compilations"] == [1]
        assert scenarios["O3"]["configs"][key]["compilations"] == [4]
        assert scenarios["concurrent-2"]["configs"][key]["jobs"] == [8]
        assert scenarios["concurrent-2"]["configs"][key]["compilations"][0] >= 4
    assert scenarios["edit-hub"]["configs"]["b"]["compilations"] == [4]
    assert "cached-dist: 4 jobs:" in scenarios["relink"]["configs"]["e"]["cached_dist_summary"][0]

    result |= {"date": "today", "machine": {"usable_cpus": 2}, "tools": {}, "command": "x",
               "version": "0"}  # fmt: skip
    text = report.markdown([result], "chart.png")
    assert "| relink |" in text and "(e)/(c)" in text
    report.chart([result], tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 1000
    docs = tmp_path / "benchmarks.md"
    docs.write_text(
        f"# B\n\n## Real code bases\n\n{report.BEGIN}\nSTALE-FIGURES\n{report.END}\n\n## Other\n"
    )
    report.update_docs(text, docs)
    assert "STALE-FIGURES" not in docs.read_text() and docs.read_text().endswith("## Other\n")
    json.dumps(result)  # the raw results are JSON as they are
    assert len(CONFIGS) == 5


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench_main(["--help"])
    out = capsys.readouterr().out
    assert "run" in out and "report" in out
    done = subprocess.run([sys.executable, "-m", "benchmarks", "run", "--help"],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent)  # fmt: skip
    assert done.returncode == 0 and "--quick" in done.stdout and "--only" in done.stdout


def test_uncached_configurations_link_in_the_first_rounds_only(tmp_path: Path) -> None:
    """The big code base's budget: (a) and (b) compile everything on every link, so warm
    scenarios run them once; the cached configurations still run every round."""
    bench = Bench(Tiny(), tmp_path / "work", rounds=2, cold_rounds=1, concurrency=[],
                  progress=lambda _: None, scenarios=["relink", "edit-leaf"],
                  uncached_rounds=1)  # fmt: skip
    bench.run()
    result = bench.as_json()
    assert list(result["scenarios"]) == ["relink", "edit-leaf"]
    for name, scenario in result["scenarios"].items():
        configs = scenario["configs"]
        for key in "ab":
            assert len(configs[key]["times_s"]) == 1, (name, key)
        for key in "cde":
            assert len(configs[key]["times_s"]) == 2, (name, key)
            assert configs[key]["jobs"] == [4, 4], (name, key)
            assert configs[key]["identical_to_b"] is True, (name, key)
    assert result["scenarios"]["edit-leaf"]["configs"]["e"]["compilations"] == [1, 1]
    text = report.table(result | {"version": "0"})
    assert "(1 run) · 4/4" in text
