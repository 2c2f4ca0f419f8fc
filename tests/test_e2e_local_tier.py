"""End to end: the fast local tier, LLD's own --thinlto-cache-dir in front of cached-dist.

LLD serves what its cache holds and hands cached-dist only the rest; across edits, a dropped
LLD cache and a reverted edit, every binary must be byte-identical to an uncached link of the
same inputs (docs/guide.md, "A fast local tier").
"""

from pathlib import Path

import pytest

from .toolchain import (
    CLANG,
    LLVM_BIN,
    build,
    compilations,
    counting_compiler,
    requires_toolchain,
    run,
)

pytestmark = [requires_toolchain, pytest.mark.e2e]


def test_lld_cache_in_front_of_cached_dist_links_like_no_cache_across_edits(
    tmp_path: Path,
) -> None:
    project = build("calc", tmp_path / "p", "regular")
    wrapper, counter = counting_compiler(tmp_path)
    cache, lld_cache = tmp_path / "cache", tmp_path / "lld-cache"

    def tiered(out: str) -> bytes:
        done = project.link(out, remote_compiler=wrapper,
                            distributor_args=[f"--cache-dir={cache}"],
                            extra=[f"-Wl,--thinlto-cache-dir={lld_cache}"])  # fmt: skip
        assert done.returncode == 0, done.stderr
        return (project.dir / out).read_bytes()

    def uncached(out: str) -> bytes:
        done = project.link(out, distributor_args=["--disable"])
        assert done.returncode == 0, done.stderr
        return (project.dir / out).read_bytes()

    def edit_ops(old: str, new: str) -> None:
        source = project.dir / "ops.c"
        source.write_text(source.read_text().replace(old, new))
        commands: list[list[str | Path]] = [
            [CLANG, "-flto=thin", "-O2", "-c", "ops.c", "-o", "ops.o"],
            [LLVM_BIN / "llvm-ar", "rcs", "libcalc.a", "ops.o", "strutil.o"],
        ]
        for cmd in commands:
            done = run(cmd, project.dir)
            assert done.returncode == 0, done.stderr

    original = uncached("u1")
    assert tiered("t1") == original
    cold = compilations(counter)
    assert cold > 0
    assert any(lld_cache.iterdir())  # LLD cached what cached-dist produced
    assert tiered("t2") == original  # LLD's cache serves every job
    assert compilations(counter) == cold

    edit_ops("case '+': return a + b;", "case '+': return a + b + 1;")
    edited = uncached("u3")
    assert edited != original
    assert tiered("t3") == edited
    after_edit = compilations(counter)
    assert cold < after_edit < 2 * cold  # only the jobs the edit touched were compiled

    for entry in lld_cache.iterdir():  # LLD's cache lost: cached-dist serves everything
        entry.unlink()
    assert tiered("t4") == edited
    assert compilations(counter) == after_edit

    edit_ops("case '+': return a + b + 1;", "case '+': return a + b;")  # back to the original
    assert tiered("t5") == original
    assert compilations(counter) == after_edit
    assert (project.dir / "t5").read_bytes() == uncached("u5")
