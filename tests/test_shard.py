"""Tests for the canonical form of DTLTO summary index shards."""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from cached_dist.bitcode.shard import CanonicalShard, canonical_shard, raw_digest
from tests import shardgen
from tests.test_bitstream import BitWriter

# -- synthetic shards (layout as LLD 22 writes it) -------------------------------------

Guid = int


def make_shard(
    modules: Sequence[tuple[int, str]],
    values: dict[int, Guid],
    records: Sequence[tuple[int, list[int]]],
    version: int = 12,
    flags: int = 1121,
) -> bytes:
    """Build a combined-index shard: MODULE_STRTAB, then the summary block."""
    w = BitWriter()
    w.enter(8, 3)
    w.unabbrev(1, [2])
    w.enter(19, 3)
    for modid, path in modules:
        w.unabbrev(1, [modid, *path.encode()])
        w.unabbrev(2, [ord(path[0]), 2, 3, 4, 5])  # stands in for a content hash
    w.end()
    w.enter(20, 4)
    w.unabbrev(10, [version])
    w.unabbrev(20, [flags])
    for vid, guid in values.items():
        w.unabbrev(16, [vid, guid >> 32, guid & 0xFFFFFFFF])
    for code, ops in records:
        w.unabbrev(code, ops)
    w.end()
    w.end()
    return w.to_bytes()


G_MAIN, G_FOO, G_GV = 0x1111_2222_3333_4444, 0x5555_6666_7777_8888, 0x9999_AAAA_BBBB_CCCC
DIGESTS = {"a.o": "aa", "libx.a(t2.o at 106).2.1490.o": "bb", "libx.a(t2.o at 106).2.77.o": "bb"}


def digest_of(path: str) -> str | None:
    return DIGESTS.get(path)


def base_shard(member: str = "libx.a(t2.o at 106).2.1490.o", swap: bool = False) -> bytes:
    """main (in a.o) calls foo and reads gv (both in the member); value ids permuted by swap."""
    ids = {G_MAIN: 1, G_FOO: 2, G_GV: 3} if not swap else {G_MAIN: 3, G_FOO: 1, G_GV: 2}
    recs = [
        (5, [ids[G_MAIN], 0, 96, 6, 64, 0, 1, 1, 0, ids[G_GV], ids[G_FOO], 8]),
        (5, [ids[G_FOO], 1, 96, 4, 70, 0, 1, 1, 0, ids[G_GV]]),
        (6, [ids[G_GV], 1, 96, 1]),
    ]
    if swap:
        recs.reverse()
    mods = [(0, "a.o"), (1, member)] if not swap else [(1, "a.o"), (0, member)]
    if swap:
        recs = [(c, [o[0], 1 - o[1], *o[2:]]) for c, o in recs]
    return make_shard(mods, {v: g for g, v in ids.items()}, recs)


def test_valueids_modids_order_and_member_names_do_not_matter() -> None:
    a = canonical_shard(base_shard(), digest_of)
    b = canonical_shard(base_shard("libx.a(t2.o at 106).2.77.o", swap=True), digest_of)
    assert a.exact and b.exact, (a, b)
    assert a == b
    assert base_shard() != base_shard("libx.a(t2.o at 106).2.77.o", swap=True)


def test_unknown_paths_stay_in_the_form() -> None:
    a = canonical_shard(base_shard(), lambda p: None)
    b = canonical_shard(base_shard("libx.a(t2.o at 106).2.77.o"), lambda p: None)
    assert a.exact and b.exact
    assert a.digest != b.digest


def test_module_content_changes_digest() -> None:
    a = canonical_shard(base_shard(), digest_of)
    b = canonical_shard(base_shard(), lambda p: "cc" if p == "a.o" else digest_of(p))
    assert a.digest != b.digest


@pytest.mark.parametrize(
    "change",
    [
        ("flags", lambda r: [(5, [1, 0, 97, *r[0][1][3:]]), *r[1:]]),  # e.g. live bit
        ("callee", lambda r: [(5, [*r[0][1][:10], 3, 8]), *r[1:]]),  # calls gv, not foo
        ("hotness", lambda r: [(5, [*r[0][1][:11], 9]), *r[1:]]),
        ("drop", lambda r: r[:2]),  # gv no longer imported
        ("varflags", lambda r: [*r[:2], (6, [3, 1, 96, 3])]),
    ],
    ids=lambda c: str(c[0]) if isinstance(c, tuple) else "",
)
def test_semantic_changes_change_digest(change: tuple[str, object]) -> None:
    recs: list[tuple[int, list[int]]] = [
        (5, [1, 0, 96, 6, 64, 0, 1, 1, 0, 3, 2, 8]),
        (5, [2, 1, 96, 4, 70, 0, 1, 1, 0, 3]),
        (6, [3, 1, 96, 1]),
    ]
    mods = [(0, "a.o"), (1, "libx.a(t2.o at 106).2.1490.o")]
    vals = {1: G_MAIN, 2: G_FOO, 3: G_GV}
    fn = change[1]
    assert callable(fn)
    before = canonical_shard(make_shard(mods, vals, recs), digest_of)
    after = canonical_shard(make_shard(mods, vals, fn(recs)), digest_of)
    assert before.exact and after.exact
    assert before.digest != after.digest


def test_alias_and_type_test_grouping() -> None:
    mods = [(0, "a.o")]
    vals = {1: G_MAIN, 2: G_FOO}
    fa = (5, [1, 0, 96, 6, 64, 0, 0, 0, 0])
    fb = (5, [2, 0, 96, 6, 64, 0, 0, 0, 0])
    alias = (8, [2, 0, 96, 1])
    tt = (11, [12345])
    one = canonical_shard(make_shard(mods, vals, [tt, fa, fb, alias]), digest_of)
    other = canonical_shard(make_shard(mods, vals, [fa, tt, fb, alias]), digest_of)
    same = canonical_shard(make_shard(mods, vals, [alias, fb, tt, fa]), digest_of)
    assert one.exact and other.exact
    assert one.digest != other.digest  # the type test belongs to another function
    assert one == same


@pytest.mark.parametrize(
    ("shard", "reason"),
    [
        (make_shard([(0, "a.o")], {1: G_MAIN}, [], version=11), "unsupported summary version"),
        (make_shard([(0, "a.o")], {1: G_MAIN}, [(30, [1, 2])]), "unsupported summary record"),
        (make_shard([(0, "a.o")], {1: G_MAIN}, [(5, [7, 0, 96, 1, 0, 0, 0, 0, 0])]), "value id"),
        (make_shard([(0, "a.o")], {1: G_MAIN}, [(5, [1, 4, 96, 1, 0, 0, 0, 0, 0])]), "module id"),
        (make_shard([(0, "a.o")], {1: G_MAIN}, [(5, [1, 0, 96, 1, 0, 0, 5, 0, 0])]), "ref"),
        (make_shard([(0, "a.o")], {1: G_MAIN}, [(8, [1, 0, 96])]), "COMBINED_ALIAS"),
        (make_shard([(0, "a.o")], {1: G_MAIN}, [(11, [1])]), "type-test"),
        (b"BC\xc0\xde\x00\x00", "malformed"),
    ],
)
def test_unknown_content_falls_back_to_raw(shard: bytes, reason: str) -> None:
    result = canonical_shard(shard, digest_of)
    assert not result.exact
    assert reason in result.reason
    assert result.digest == raw_digest(shard)


def test_identical_module_contents_fall_back() -> None:
    shard = make_shard([(0, "a.o"), (1, "copy.o")], {1: G_MAIN}, [])
    result = canonical_shard(shard, lambda p: "same")
    assert not result.exact and "share" in result.reason


# -- real DTLTO links --------------------------------------------------------------------

needs_clang = pytest.mark.skipif(
    not shardgen.have_toolchain(), reason=shardgen.TOOLCHAIN_MISSING_REASON
)

_MEMBER = re.compile(r"\((.+?) at \d+\)")


def job_key(module: str) -> str:
    """'libx.a(t2.o at 106).2.1490.o' -> 't2.o'; '/x/y/main.o' -> 'main.o'."""
    m = _MEMBER.search(module)
    return m[1] if m else Path(module).name


def canon(cap: shardgen.LinkCapture) -> dict[str, CanonicalShard]:
    return {job_key(j.module): canonical_shard(j.shard, j.module_digest()) for j in cap.jobs}


def raw(cap: shardgen.LinkCapture) -> dict[str, bytes]:
    return {job_key(j.module): j.shard for j in cap.jobs}


C_SOURCES = ["main.c", "t2.c", "t3.c", "t4.c"]
LIB = ["t2.o", "t3.o", "t4.o"]


def _build_c(d: Path, sources: dict[str, str]) -> None:
    shardgen.write_sources(d, sources)
    shardgen.compile_thin(d, C_SOURCES)
    shardgen.archive(d, "libx.a", LIB)


@pytest.fixture(scope="module")
def c_links(tmp_path_factory: pytest.TempPathFactory) -> dict[str, shardgen.LinkCapture]:
    """Several DTLTO links of the C program with a regular static archive."""
    if not shardgen.have_toolchain():
        pytest.skip(shardgen.TOOLCHAIN_MISSING_REASON)
    root = tmp_path_factory.mktemp("shard")
    one, two, changed = root / "one", root / "elsewhere" / "two", root / "changed"
    _build_c(one, shardgen.C_PROGRAM)
    shutil.copytree(one, two)
    mod = dict(shardgen.C_PROGRAM)
    mod["t3.c"] = mod["t3.c"].replace("x * 7", "x * 9")
    _build_c(changed, mod)
    shardgen.archive(one, "libthin.a", LIB, thin=True)
    inputs = ["main.o", "libx.a"]
    cap = shardgen.dtlto_capture
    return {
        "base": cap(one, inputs, root / "cap-base"),
        "again": cap(one, inputs, root / "cap-again"),
        "moved": cap(two, inputs, root / "cap-moved"),
        "absolute": cap(
            one, [str(one / i) for i in inputs], root / "cap-abs", output=str(one / "app")
        ),
        "noimport": cap(one, inputs, root / "cap-noimp", ["-Wl,-mllvm,-import-instr-limit=0"]),
        "keep-unused": cap(one, inputs, root / "cap-keep", ["-Wl,--undefined=unused"]),
        "changed": cap(changed, inputs, root / "cap-changed"),
        "thin": cap(one, ["main.o", "libthin.a"], root / "cap-thin"),
    }


@needs_clang
def test_real_shards_are_fully_canonicalized(
    c_links: dict[str, shardgen.LinkCapture],
) -> None:
    for name, cap in c_links.items():
        for key, result in canon(cap).items():
            assert result.exact, (name, key, result.reason)


@needs_clang
def test_same_link_same_form_across_pids_dirs_and_absolute_paths(
    c_links: dict[str, shardgen.LinkCapture],
) -> None:
    base = canon(c_links["base"])
    assert set(base) == {"main.o", "t2.o", "t3.o", "t4.o"}
    for other in ("again", "moved", "absolute"):
        assert canon(c_links[other]) == base, other
    # The raw bytes really do differ: member names carry the linker's pid.
    assert raw(c_links["again"])["main.o"] != raw(c_links["base"])["main.o"]
    assert raw(c_links["absolute"])["main.o"] != raw(c_links["base"])["main.o"]


@needs_clang
def test_thin_archive_members_keep_their_paths(
    c_links: dict[str, shardgen.LinkCapture],
) -> None:
    thin = c_links["thin"]
    assert sorted(j.module for j in thin.jobs) == ["main.o", "t2.o", "t3.o", "t4.o"]
    assert canon(thin) == canon(c_links["base"])


@needs_clang
def test_import_decision_changes_form(c_links: dict[str, shardgen.LinkCapture]) -> None:
    base, noimp = canon(c_links["base"]), canon(c_links["noimport"])
    assert base["main.o"] != noimp["main.o"]


@needs_clang
def test_dead_stripping_changes_form(c_links: dict[str, shardgen.LinkCapture]) -> None:
    base, keep = canon(c_links["base"]), canon(c_links["keep-unused"])
    assert base["t2.o"] != keep["t2.o"]
    assert base["t3.o"] == keep["t3.o"]


@needs_clang
def test_changed_module_changes_form(c_links: dict[str, shardgen.LinkCapture]) -> None:
    base, changed = canon(c_links["base"]), canon(c_links["changed"])
    # main imports bar from t3; t4 imports the alias of bar.
    assert base["main.o"] != changed["main.o"]
    assert base["t3.o"] != changed["t3.o"]
    assert base["t2.o"] == changed["t2.o"]


@needs_clang
def test_cxx_regular_archive_two_links(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("shard-cxx")
    d = root / "src"
    shardgen.write_sources(d, shardgen.CXX_PROGRAM)
    srcs = [s for s in shardgen.CXX_PROGRAM if s.endswith(".cpp")]
    shardgen.compile_thin(d, srcs)
    shardgen.archive(d, "libshapes.a", ["shape.o", "square.o", "circle.o"])
    links = [
        shardgen.dtlto_capture(d, ["main.o", "libshapes.a"], root / f"cap{i}", cxx=True)
        for i in range(2)
    ]
    first, second = canon(links[0]), canon(links[1])
    assert all(r.exact for r in first.values()), first
    assert first == second
    assert raw(links[0]) != raw(links[1])
