"""The native shard decoder (C extension) against the pure-Python reference.

Differential: the same digest and exactness on every shard the tests can produce (synthetic
layouts, real C and C++ links with regular and thin archives, a generated program). Fuzz:
thousands of damaged real shards in a child process (a crash or hang cannot take pytest with
it), see tests/shard_fuzz.py; ``make sanitize`` runs the same under ASan/UBSan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cached_dist.bitcode import native
from cached_dist.bitcode.shard import canonical_shard
from tests import shard_fuzz, shardgen
from tests.test_shard import G_FOO, G_GV, G_MAIN, base_shard, digest_of, make_shard

from .toolchain import build, requires_toolchain

ROOT = Path(__file__).parent.parent
needs_native = pytest.mark.skipif(not native.NATIVE, reason="the C extension is not built")


def test_extension_is_built_in_ci() -> None:
    """CI installs with a C compiler (scripts/setup): there the extension must be present."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        assert native.NATIVE, "cached_dist.bitcode._shard was not built by the install"
    elif not native.NATIVE:
        pytest.skip("the C extension is not built (CI is not set)")


def _synthetic() -> list[bytes]:
    ids = {G_MAIN: 1, G_FOO: 2, G_GV: 3}
    prefix = [(11, [G_FOO >> 1]), (12, [7, 8])]
    return [
        base_shard(),
        base_shard(swap=True),
        base_shard(member="libx.a(t2.o at 106).2.77.o"),
        make_shard([(0, "a.o")], {}, []),  # no values at all
        make_shard(
            [(0, "a.o"), (1, "b\xe9'\"\\.o")],
            ids,
            [
                *prefix,
                (4, [1, 0, 9, 1, 0, 0, 2, 1, 1, 3, 2, 2, 3]),
                (9, [42]),
                (8, [3, 1, 0, 2]),
                (24, [5]),
                (6, [2, 1, 7, 2, 1, 3]),
            ],
        ),
        make_shard([(0, "a.o")], ids, [(5, [1, 0, 96, 6, 64, 0, 0, 0, 0, 2, 8])]),
        make_shard([(0, "a.o"), (1, "a.o")], ids, []),  # one path twice: raw
        make_shard([(0, "a.o")], ids, [(5, [1, 0, 96, 6, 64, 0, 0, 0, 0, 2])]),  # odd calls
        make_shard([(0, "a.o")], ids, [(5, [1, 9, 96, 6, 64, 0, 0, 0, 0])]),  # no module 9
        make_shard([(0, "a.o")], ids, [(99, [1])]),  # unknown record
        make_shard([(0, "a.o")], ids, [], version=11),
        make_shard([(0, "a.o")], ids, [(11, [1])]),  # prefix without a function
        make_shard([(0, "a.o")], ids, [(9, [1])]),  # original name without a summary
        b"BC\xc0\xde",
        b"not bitcode at all",
        b"",
    ]


@needs_native
@pytest.mark.parametrize("index", range(len(_synthetic())))
def test_synthetic_shards_agree(index: int) -> None:
    data = _synthetic()[index]
    want = canonical_shard(data, digest_of)
    digest, exact, reason = native.canonical_digest(data, digest_of)
    assert (digest, exact) == (want.digest, want.exact)
    assert bool(reason) == (not exact)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shardgen.have_toolchain():
        pytest.skip(shardgen.TOOLCHAIN_MISSING_REASON)
    directory = tmp_path_factory.mktemp("shard-corpus")
    shard_fuzz.capture(directory)
    return directory


@needs_native
@requires_toolchain
def test_real_shards_agree(corpus: Path) -> None:
    shards = shard_fuzz.load_corpus(corpus)
    assert len(shards) > 40
    kinds = {e["shard"].rsplit("-", 1)[0] for e in json.loads((corpus / "corpus.json").read_text())}
    assert kinds == {"c", "c-thin", "cxx", "gen", "gen-thin"}
    asked: list[str] = []
    for data, lookup, table in shards:
        want = canonical_shard(data, lookup)
        assert want.exact, want.reason
        assert native.canonical_digest(data, lookup) == (want.digest, True, "")

        def counted(path: str, lookup: shard_fuzz.Lookup = lookup) -> str | None:
            asked.append(path)
            return lookup(path)

        # The digests of the job's own paths taken from ``known``: the same digest, and the
        # Python function is not called for any of them.
        got = native.canonical_digest(data, counted, frozenset(table), table)
        assert got == (want.digest, True, "")
    assert asked == []


@needs_native
def test_own_paths_without_a_usable_digest_in_known_ask_module_digest() -> None:
    """A path of ``own`` missing from ``known``, or mapped to something not a str, is asked
    of ``module_digest`` as any other path; misuse of the pair is a TypeError."""
    data = base_shard()
    want = native.canonical_digest(data, digest_of)
    asked: list[str] = []

    def counted(path: str) -> str | None:
        asked.append(path)
        return digest_of(path)

    native.canonical_digest(data, counted)
    paths, asked[:] = frozenset(asked), []  # the paths the shard names
    assert paths
    unusable: list[dict[str, Any]] = [{}, dict.fromkeys(paths, 7), dict.fromkeys(paths)]
    for known in unusable:
        assert native.canonical_digest(data, counted, paths, known) == want
        assert sorted(asked) == sorted(paths)
        asked.clear()
    right = {p: d for p in paths if (d := digest_of(p)) is not None}
    assert right  # a path outside ``own`` is asked, whatever ``known`` holds for it
    assert native.canonical_digest(data, counted, frozenset(), right) == want
    assert sorted(asked) == sorted(paths)
    from cached_dist.bitcode import _shard  # type: ignore[attr-defined]

    misuses: list[tuple[object, object]] = [(paths, None), (None, {}), (list(paths), {})]
    for own, wrong in misuses:
        with pytest.raises(TypeError):
            _shard.canonical_body(data, digest_of, own, wrong)


@needs_native
@requires_toolchain
def test_damaged_shards_agree_and_never_crash(corpus: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.shard_fuzz", "run", str(corpus), "--mutations", "3000"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    counts = json.loads(done.stdout)
    assert counts["mutations"] == 3000
    # Both outcomes are exercised, and handing back to the reference stays rare.
    assert counts["same_canonical"] > 100 and counts["same_raw"] > 1000, counts
    assert counts["handed_back"] < 300, counts


_HIDE_EXTENSION = "import sys; sys.modules['cached_dist.bitcode._shard'] = None\n"


def test_without_the_extension_stats_says_so(tmp_path: Path) -> None:
    from store import Store

    Store(tmp_path / "cache").close()
    code = _HIDE_EXTENSION + (
        "from cached_dist.cli import run\n"
        f"sys.argv = ['cached-dist', 'stats', '--cache-dir={tmp_path / 'cache'}']\n"
        "sys.exit(run())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "shard decoder" in done.stdout and "pure Python" in done.stdout, done.stdout


@requires_toolchain
def test_without_the_extension_a_link_still_hits_and_says_so_once(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p", "regular")
    distributor = tmp_path / "no-native-dist"
    distributor.write_text(f"#!{sys.executable}\n" + _HIDE_EXTENSION
                           + "from cached_dist.cli import run\nsys.exit(run())\n")  # fmt: skip
    distributor.chmod(0o755)
    cache = tmp_path / "cache"
    args = [f"--cache-dir={cache}", "--verbose"]
    first = project.link("first", distributor=str(distributor), distributor_args=args)
    assert first.returncode == 0, first.stderr
    second = project.link("second", distributor=str(distributor), distributor_args=args)
    assert second.returncode == 0, second.stderr
    assert second.stderr.count("native shard decoder is not built") == 1, second.stderr
    quiet = project.link("third", distributor=str(distributor),
                         distributor_args=[f"--cache-dir={cache}"])  # fmt: skip
    assert quiet.returncode == 0 and "native" not in quiet.stderr, quiet.stderr
    assert (project.dir / "first").read_bytes() == (project.dir / "second").read_bytes()
