"""Renaming the modules a shard names (for compiling it in a worker's sandbox)."""

from __future__ import annotations

import pytest

from cached_dist.bitcode.bitstream import iter_entries
from cached_dist.bitcode.reroot import RerootError, rename_modules
from cached_dist.bitcode.shard import canonical_shard
from tests.test_shard import base_shard


def strtab_paths(shard: bytes) -> list[str]:
    return [bytes(e.ops[1:]).decode() for e in iter_entries(shard)
            if e.kind == 3 and e.block_id == 19 and e.code == 1]  # fmt: skip


def test_renamed_paths_and_every_other_record_kept() -> None:
    member = "/build/libx.a(t2.o at 106).2.1490.o"
    shard = base_shard(member)
    renamed = rename_modules(shard, {member: "../../build/libx.a(t2.o at 106).2.1490.o"})
    assert strtab_paths(shard) == ["a.o", member]
    assert strtab_paths(renamed) == ["a.o", "../../build/libx.a(t2.o at 106).2.1490.o"]

    def others(data: bytes) -> list[object]:
        # the MODULE_BLOCK's length (ENTER's code) changes with the paths' lengths
        return [(e.kind, e.block_id, e.code if e.kind != 1 else 0, e.ops, e.blob)
                for e in iter_entries(data) if e.block_id != 19]  # fmt: skip

    assert others(renamed) == others(shard)  # and the length words add up (else it raises)
    digests = {"a.o": "aa", member: "bb", "../../build/libx.a(t2.o at 106).2.1490.o": "bb"}
    before = canonical_shard(shard, digests.get)
    after = canonical_shard(renamed, digests.get)
    assert before.exact and after == before


def test_a_longer_name_and_a_callable() -> None:
    shard = base_shard()
    renamed = rename_modules(shard, lambda p: "/a/much/longer/directory/name/" + p)
    assert all(p.startswith("/a/much/longer/") for p in strtab_paths(renamed))
    assert rename_modules(renamed, lambda p: p.removeprefix("/a/much/longer/directory/name/"))


@pytest.mark.parametrize(
    "data",
    [b"", b"not bitcode at all!", b"BC\xc0\xde" + b"\x00" * 7, b"BC\xc0\xde\x35\x14\x00\x00"],
)
def test_what_it_cannot_rewrite_is_refused(data: bytes) -> None:
    with pytest.raises(RerootError):
        rename_modules(data, {})
