"""What a backend compile prints is replayed on its hits; an "exit 0 with error" is not stored."""

from pathlib import Path

import pytest

from cached_dist.link.diagnostics import error_line, why_not_stored

from .toolchain import CLANG, build, compilations, counting_compiler, requires_toolchain


def tagged(stderr: str) -> list[str]:
    """The jobs' own lines (``cached-dist: [MODULE] ...``), in a stable order."""
    return sorted(line for line in stderr.splitlines() if line.startswith("cached-dist: ["))


@requires_toolchain
@pytest.mark.e2e
def test_backend_remarks_are_printed_on_the_hit_as_on_the_compile(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p", "regular")
    wrapper, counter = counting_compiler(tmp_path)
    args = [f"--cache-dir={tmp_path / 'cache'}"]
    remarks = ["-Wl,--thinlto-remote-compiler-arg=-Rpass=inline"]
    first = project.link("first", distributor_args=args, remote_compiler=wrapper, extra=remarks)
    assert first.returncode == 0, first.stderr
    printed = tagged(first.stderr)
    assert any("inlined into" in line and "[-Rpass=inline]" in line for line in printed)
    second = project.link("second", distributor_args=args, remote_compiler=wrapper, extra=remarks)
    assert second.returncode == 0, second.stderr
    assert compilations(counter) == 5 and "5 hits, 0 compiled" in second.stderr
    assert tagged(second.stderr) == printed


@requires_toolchain
@pytest.mark.e2e
def test_compile_that_prints_an_error_but_exits_0_is_not_cached(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    liar = tmp_path / "liar-clang"
    log = tmp_path / "runs"
    liar.write_text(
        f"#!/bin/sh\necho run >> '{log}'\n"
        f"case \"$*\" in *eval.o*) echo 'error: Error loading imported file x.o' >&2;; esac\n"
        f"exec '{CLANG}' \"$@\"\n"
    )
    liar.chmod(0o755)
    args = [f"--cache-dir={tmp_path / 'cache'}"]
    for out in ("first", "second"):
        done = project.link(out, distributor_args=args, remote_compiler=liar)
        assert done.returncode == 0, done.stderr
        assert "cached-dist: [eval.o] error: Error loading imported file x.o" in done.stderr
        assert (
            "cached-dist: warning: not caching eval.1." in done.stderr
            and "the compiler printed an error although it exited 0 "
            "(error: Error loading imported file x.o)"
            in done.stderr
        )
    assert "4 hits, 1 compiled" in done.stderr  # only eval's job ran again
    assert len(log.read_text().splitlines()) == 6


def test_error_diagnostics_are_recognized() -> None:
    assert error_line("a.c:1:2: warning: w\nfoo.c:3:4: error: bad\n") == "foo.c:3:4: error: bad"
    assert error_line("Error running ThinLTO backend: Error loading imported file 'x'")
    assert error_line("fatal error: out of memory") and error_line("LLVM ERROR: broken")
    assert error_line("remark: 'error' inlined into 'main'") is None
    assert error_line("warning: -Wno-error: unused") is None
    assert why_not_stored("warning: a\n") is None
    assert "characters of diagnostics" in (why_not_stored("w" * 300_000) or "")
