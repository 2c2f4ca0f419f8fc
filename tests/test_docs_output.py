"""What the docs quote of the program's output is what the program prints.

Every ```` ```text output:NAME ```` block in docs/ holds example lines of scenario NAME, which
this test runs for real (clang-22, ld.lld-22, a real redis-server for the remote tier). Each
example must have the shape of a line the scenario printed (numbers, keys and module names
aside), and each summary line the scenario printed must have the shape of an example of its
block, so neither can drift from the other. The stats table of docs/reference.md must list
exactly the keys of ``cached-dist stats --json``, and its rows exactly the rows of
``cached-dist stats``.
"""

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .serial_distributor import __file__ as SERIAL
from .servers import start_redis
from .toolchain import build, cached_dist_exe, requires_toolchain, run

DOCS = Path(__file__).parent.parent / "docs"
BLOCK = re.compile(r"^ *```text output:(\S+)\n(.*?)^ *```$", re.MULTILINE | re.DOTALL)
SUMMARY = re.compile(r"^cached-dist: \d+ jobs: ")


def shape(line: str) -> str:
    """A line with what varies between runs taken out: keys, module names, numbers, and the
    unit of a link's time (ms below a second: a loaded machine may take seconds)."""
    line = re.sub(r"\b[0-9a-f]{32}\b", "KEY", line.strip())
    line = re.sub(r"\b[\w-]+\.o\b", "MODULE", line)
    line = re.sub(r"\b\d+ ms$|\b\d+\.\d\d s$", "TIME", line)
    return re.sub(r"\d+(\.\d+)?", "N", line)


def blocks() -> Iterator[tuple[str, str, list[str]]]:
    """(file, scenario, example lines) of every output block in docs/."""
    for path in sorted(DOCS.glob("**/*.md")):
        for name, body in BLOCK.findall(path.read_text()):
            yield path.name, name, [ln.strip() for ln in body.splitlines() if ln.strip()]


def test_shape() -> None:
    assert shape("cached-dist: hit  3c8e5a0f7d1b2c4e6a8f0b1d3e5c7a9f main.o: local cache, 0.4 ms") \
        == shape("cached-dist: hit  00112233445566778899aabbccddeeff eval.o: local cache, 12.25 ms")  # fmt: skip
    assert shape("5 jobs: 5 hits, 0 compiled, 38 ms") == shape("5 jobs: 5 hits, 0 compiled, 1.20 s")
    assert shape("5 jobs: 5 hits, 0 compiled, 38 ms") != shape("5 jobs: 5 hits, 0 compiled")


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Each scenario's stderr lines, from real links of the calc program (5 jobs)."""
    top = tmp_path_factory.mktemp("docs-output")
    project = build("calc", top / "p")
    cache = top / "cache"
    out: dict[str, list[str]] = {}

    def link(name: str, *args: str, opt: str = "-O2", expect: str = "0") -> list[str]:
        done = project.link(f"app-{name}", opt=opt, distributor_args=list(args))
        assert str(done.returncode) == expect, done.stderr
        assert project.run_program(f"app-{name}") == project.expected_output
        return done.stderr.splitlines()

    cold = link("cold", f"--cache-dir={cache}", "--verbose")
    out["cold"] = out["verbose-cold"] = cold
    hit = link("hit", f"--cache-dir={cache}", "--verbose")
    out["full-hit"] = out["verbose-hit"] = hit
    verified = link("verified", f"--cache-dir={cache}", "--verbose", "--verify-hits=1")
    out["verified"] = out["verbose-verified"] = verified
    inner = link("inner", f"--cache-dir={top / 'c2'}", "--verbose", "--", sys.executable, SERIAL)
    out["verbose-inner"] = inner
    fallback = link("fallback", f"--cache-dir={cache}", "--verbose", "--", "false", opt="-O3")
    out["fallback"] = out["verbose-fallback"] = fallback
    redis = start_redis(top / "redis")
    try:
        remote = f"--remote-storage={redis.url}"
        link("upload", f"--cache-dir={top / 'machine-a'}", remote)
        out["remote"] = out["verbose-remote"] = link(
            "remote", f"--cache-dir={top / 'machine-b'}", remote, "--verbose"
        )
    finally:
        redis.stop()
    return out


@requires_toolchain
@pytest.mark.e2e
def test_every_quoted_output_line_is_one_the_program_prints(
    printed: dict[str, list[str]],
) -> None:
    found = list(blocks())
    assert {name for _, name, _ in found} == set(printed), "a block without a scenario"
    for file, name, examples in found:
        real = {shape(line) for line in printed[name]}
        for example in examples:
            assert shape(example) in real, f"{file} {name}: {example!r} not in {printed[name]}"
        documented = {shape(e) for e in examples}
        for line in printed[name]:
            if SUMMARY.match(line) and any(SUMMARY.match(e) for e in examples):
                assert shape(line) in documented, f"{file} {name}: undocumented form {line!r}"


def _stats_table() -> list[tuple[list[str], list[str]]]:
    """(keys, rows) of each line of reference.md's stats table."""
    text = (DOCS / "reference.md").read_text()
    section = text[text.index("### `cached-dist stats`") :]
    table = []
    for line in section.splitlines()[1:]:
        if line.startswith("### ") or line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            keys = re.findall(r"`(\w+)`", cells[0])
            rows = [] if cells[1] == "-" else [r.strip() for r in cells[1].split(",")]
            table.append((keys, rows))
    return table


@requires_toolchain
@pytest.mark.e2e
def test_the_stats_table_lists_every_key_and_row(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    cache = tmp_path / "cache"
    assert project.link(distributor_args=[f"--cache-dir={cache}"]).returncode == 0
    as_json = run([cached_dist_exe(), "stats", "--json", f"--cache-dir={cache}"], tmp_path)
    as_text = run([cached_dist_exe(), "stats", f"--cache-dir={cache}"], tmp_path)
    assert as_json.returncode == 0 and as_text.returncode == 0, as_json.stderr + as_text.stderr
    table = _stats_table()
    assert sorted(k for keys, _ in table for k in keys) == sorted(json.loads(as_json.stdout))
    real_rows = [line[:20].strip() for line in as_text.stdout.splitlines()]  # "%-20s %s"
    assert sorted(real_rows) == sorted(r for _, rows in table for r in rows)
