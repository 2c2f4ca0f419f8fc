"""--compiler-check: content (default), mtime, string:VALUE, or a command seeing through wrappers."""

import os
from pathlib import Path

import pytest

from cached_dist.errors import UsageError
from cached_dist.keys import toolchain
from cached_dist.options import resolve

from .llvm21 import Llvm21, requires_llvm21, script
from .test_key import DictMemo as Memo
from .toolchain import CLANG, run


def test_option_values_and_errors(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    assert resolve([], [], env).compiler_check == "content"
    for value in ("mtime", "string:clang 21.1.0", "%compiler% --version"):
        assert resolve([f"--compiler-check={value}"], [], env).compiler_check == value
    env["CACHED_DIST_COMPILER_CHECK"] = "mtime"
    assert resolve([], [], env).compiler_check == "mtime"
    for bad in ("", "string:", "'unbalanced"):
        with pytest.raises(UsageError, match="option --compiler-check: "):
            resolve([f"--compiler-check={bad}"], [], env)


def test_string_mtime_and_content(tmp_path: Path) -> None:
    a = script(tmp_path / "a", "exit 0")
    b = script(tmp_path / "b", "exit 1")
    memo = Memo()
    assert toolchain.identity(str(a), memo, "string:v1") == toolchain.identity(
        str(b), memo, "string:v1"
    )
    assert toolchain.identity(str(a), memo, "string:v1") != toolchain.identity(
        str(a), memo, "string:v2"
    )
    before = toolchain.identity(str(a), memo, "mtime")
    assert toolchain.identity(str(a), memo, "mtime") == before
    os.utime(a, ns=(1, 1))
    assert toolchain.identity(str(a), memo, "mtime") != before
    content = toolchain.identity(str(a), memo)
    os.utime(a, ns=(2, 2))
    assert toolchain.identity(str(a), memo) == content  # same bytes, same identity


def test_command_is_memoized_until_the_wrapped_compiler_changes(tmp_path: Path) -> None:
    count = tmp_path / "runs"
    check = script(tmp_path / "check", f"echo run >> '{count}'\nexec \"$1\" --version")
    real = tmp_path / "real-clang"
    real.symlink_to(CLANG)
    wrapper = script(tmp_path / "wrapper", f"exec '{real}' \"$@\"")
    memo = Memo()
    command = f"{check} %compiler%"
    first = toolchain.identity(str(wrapper), memo, command)
    assert toolchain.identity(str(wrapper), memo, command) == first
    assert count.read_text().count("run") == 1  # the second time came from the memo
    other = script(tmp_path / "other-clang", "echo 'clang version 99'")
    real.unlink()
    real.symlink_to(other)  # the wrapper is unchanged; what it runs is not
    assert toolchain.identity(str(wrapper), memo, command) != first
    assert count.read_text().count("run") == 2


def test_failing_command_raises(tmp_path: Path) -> None:
    with pytest.raises(toolchain.CompilerCheckError, match="exited with status 1"):
        toolchain.identity(str(CLANG), Memo(), "/bin/false %compiler%")
    with pytest.raises(toolchain.CompilerCheckError, match="cannot run"):
        toolchain.identity(str(CLANG), Memo(), f"{tmp_path / 'missing'} %compiler%")


@requires_llvm21
@pytest.mark.e2e
def test_changing_the_compiler_behind_a_wrapper(tmp_path: Path) -> None:
    """The guide's advice (a command) misses after the compiler behind a wrapper changes;
    the default, which hashes the wrapper script itself, keeps hitting (its stated limit)."""
    tc = Llvm21(tmp_path / "tc")
    project = tc.build("calc", tmp_path / "p")
    real = tmp_path / "real-clang"
    real.symlink_to(tc.clang)  # clang 21 first
    wrapper = script(tmp_path / "wrapper", f"exec '{real}' \"$@\"")
    recommended = "--compiler-check=%compiler% --version"

    def link(out: str, *args: str) -> str:
        cmd = [
            a.replace(str(tc.clang), str(wrapper))
            for a in tc.link_command(project, out, list(args))
        ]
        done = run(cmd, project.dir, env=tc.env)
        assert done.returncode == 0, done.stderr
        return done.stderr

    by_default, by_command = f"--cache-dir={tmp_path / 'c1'}", f"--cache-dir={tmp_path / 'c2'}"
    assert "0 hits, 5 compiled" in link("d1", by_default)
    assert "0 hits, 5 compiled" in link("r1", by_command, recommended)
    assert "5 hits, 0 compiled" in link("r2", by_command, recommended)
    real.unlink()
    real.symlink_to(CLANG)  # now clang 22, behind the same wrapper
    assert "0 hits, 5 compiled" in link("r3", by_command, recommended)
    assert "5 hits, 0 compiled" in link("d2", by_default)  # the default's limit
    assert project.run_program("r3") == project.expected_output
