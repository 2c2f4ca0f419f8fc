"""What a user sees: the summary line, --verbose lines, and the progress line."""

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from .serial_distributor import __file__ as SERIAL
from .toolchain import CLANG, build, compilations, counting_compiler, requires_toolchain, run

pytestmark = [requires_toolchain, pytest.mark.e2e]


def test_verbose_says_where_each_object_came_from(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, _ = counting_compiler(tmp_path)
    args = [f"--cache-dir={tmp_path / 'cache'}", "--verbose"]
    first = project.link("first", remote_compiler=wrapper, distributor_args=args)
    assert first.returncode == 0, first.stderr
    compiled = re.findall(r"miss \w+ (\S+): compiled here, [\d.]+ s", first.stderr)
    assert sorted(compiled) == ["eval.o", "lexer.o", "main.o", "ops.o", "strutil.o"]
    assert "(can only hit byte-identical shards)" not in first.stderr
    second = project.link("second", remote_compiler=wrapper, distributor_args=args)
    hits = re.findall(r"hit  \w+ (\S+): local cache, [\d.]+ ms", second.stderr)
    assert len(hits) == 5, second.stderr
    assert re.search(r"5 jobs: 5 hits, 0 compiled, (\d+ ms|\d+\.\d\d s)$", second.stderr.strip())


def test_verbose_names_the_inner_distributor_and_the_fallback(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    wrapper, _ = counting_compiler(tmp_path)
    by_inner = project.link(
        "a", remote_compiler=wrapper,
        distributor_args=["--disable", "--verbose"],
    )  # fmt: skip
    assert by_inner.returncode == 0
    args = [f"--cache-dir={tmp_path / 'cache'}", "--verbose"]
    inner = project.link("b", remote_compiler=wrapper,
                         distributor_args=[*args, "--", sys.executable, SERIAL])  # fmt: skip
    assert len(re.findall(r"compiled by the inner distributor, [\d.]+ s", inner.stderr)) == 5
    failing = project.link("c", remote_compiler=wrapper, opt="-O3",
                           distributor_args=[*args, "--", "false"])  # fmt: skip
    assert failing.returncode == 0, failing.stderr
    fallback = re.findall(r"compiled here after the runner failed \(fallback\), [\d.]+ s",
                          failing.stderr)  # fmt: skip
    assert len(fallback) == 5
    assert re.search(
        r"5 jobs: 0 hits, 0 compiled, 5 fallback, (\d+ ms|\d+\.\d\d s)", failing.stderr
    )


def _slow_link(tmp_path: Path, extra: list[str]) -> list[str]:
    project = build("calc", tmp_path / "p")
    wrapper, _ = counting_compiler(tmp_path, sleep=0.8)
    return project.link_command(remote_compiler=wrapper, distributor_args=[
        f"--cache-dir={tmp_path / 'cache'}", "--jobs=1", *extra])  # fmt: skip


def test_progress_rewrites_one_line_on_a_terminal(tmp_path: Path) -> None:
    cmd = _slow_link(tmp_path, [])
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(cmd, cwd=tmp_path / "p", stderr=terminal, stdout=subprocess.DEVNULL)
    os.close(terminal)
    chunks = []
    while True:
        ready, _, _ = select.select([controller], [], [], 60)
        assert ready, "no output for a minute"
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert proc.wait(timeout=60) == 0
    text = b"".join(chunks).decode()
    assert re.search(r"\r\x1b\[Kcached-dist: [1-4]/5 jobs done \(0 hits, [1-4] compiled\)", text)
    assert "\r\x1b[Kcached-dist: 5 jobs: 0 hits, 5 compiled" in text  # the line is replaced
    assert text.count("\n") == 1  # progress never scrolls


def test_no_progress_on_a_pipe_unless_asked(tmp_path: Path) -> None:
    quiet = run(_slow_link(tmp_path / "a", []), tmp_path / "a" / "p")
    assert quiet.returncode == 0 and "jobs done" not in quiet.stderr and "\r" not in quiet.stderr
    asked = run(_slow_link(tmp_path / "b", ["--progress"]), tmp_path / "b" / "p")
    assert asked.returncode == 0
    assert re.search(r"^cached-dist: [1-4]/5 jobs done \(0 hits, [1-4] compiled\), \d+ s$",
                     asked.stderr, re.MULTILINE), asked.stderr  # fmt: skip
    assert "\r" not in asked.stderr
    silent = run(_slow_link(tmp_path / "c", ["--progress", "--quiet"]), tmp_path / "c" / "p")
    assert silent.returncode == 0 and silent.stderr == ""


def test_a_second_tree_hits_only_with_a_file_prefix_map(tmp_path: Path) -> None:
    """-g records the build directory in the bitcode; -ffile-prefix-map removes it."""
    cache = tmp_path / "cache"
    wrapper, counter = counting_compiler(tmp_path)  # one compiler: the same toolchain identity
    compiled = {}
    for flags in ([], ["-ffile-prefix-map={tree}=/src"]):
        counts = []
        for tree in ("one", "two"):
            where = tmp_path / ("mapped" if flags else "plain") / tree
            cflags = ["-g", *(f.format(tree=where) for f in flags)]
            project = build("calc", where, cflags=cflags)
            before = compilations(counter)
            done = project.link(remote_compiler=wrapper, distributor_args=[f"--cache-dir={cache}"])
            assert done.returncode == 0, done.stderr
            assert project.run_program() == project.expected_output
            counts.append(compilations(counter) - before)
        compiled["mapped" if flags else "plain"] = counts
    assert compiled == {"plain": [5, 5], "mapped": [5, 0]}


def test_verify_hits_compiles_beside_nothing_of_the_link(tmp_path: Path) -> None:
    """--verify-hits recompiles each hit into a private temporary directory: never beside the
    link's outputs, which a configure probe (``-o /dev/null``) puts in /dev."""
    import tempfile

    project = build("calc", tmp_path / "p")
    seen = tmp_path / "outputs.log"
    wrapper = tmp_path / "recording-clang"
    wrapper.write_text(  # each compile's -o value, one a line
        f'#!/bin/sh\nfor a; do [ "$prev" = -o ] && echo "$a" >> \'{seen}\'; prev=$a; done\n'
        f"exec '{CLANG}' \"$@\"\n"
    )
    wrapper.chmod(0o755)
    args = [f"--cache-dir={tmp_path / 'cache'}"]
    assert project.link("first", remote_compiler=wrapper, distributor_args=args).returncode == 0
    cold = seen.read_text().splitlines()
    assert len(cold) == 5 and all((project.dir / o).parent == project.dir for o in cold), cold
    seen.unlink()
    done = project.link("second", remote_compiler=wrapper,
                        distributor_args=[*args, "--verify-hits=1"])  # fmt: skip
    assert done.returncode == 0 and "5 verified (0 mismatches)" in done.stderr, done.stderr
    shadows = [Path(o) for o in seen.read_text().splitlines()]
    assert len(shadows) == 5, shadows
    private = Path(tempfile.gettempdir()).resolve()
    for shadow in shadows:
        assert shadow.parent.parent.parent == private, shadow  # TMP/cached-dist-verify-*/N/
        assert shadow.parent.parent.name.startswith("cached-dist-verify-"), shadow
        assert not shadow.parent.exists()  # removed once compared
    assert project.run_program("second") == project.expected_output
