"""Packs: a link's manifests in one row file, read by the next link of the same target."""

from __future__ import annotations

import marshal
import os
from pathlib import Path

import pytest

from store import Store
from store.manifest import Manifest
from store.pack import FORMAT
from store.rows import Rows, _framed
from tests.store.helpers import Warnings
from tests.store.test_rows import DB_MODULES, in_fresh_process, put

KEYS = ["ab01", "cd02", "ef03"]


def stored(tmp_path: Path, keys: list[str] = KEYS) -> tuple[Path, dict[str, Manifest]]:
    """A store holding ``keys`` (each output its key's bytes x 100) and their manifests."""
    root = tmp_path / "c"
    s = Store(root)
    for key in keys:
        assert put(s, tmp_path, key, key.encode() * 100)
    found = s.lookup(keys)
    s.close()
    assert sorted(found) == sorted(keys)
    return root, found


def pack_path(root: Path, name: str = "t") -> Path:
    return Path(Rows(str(root), Store(root)._modes).path(f"p:{FORMAT}:{name}"))


def packed(root: Path, name: str = "t") -> list[str]:
    """The keys pack ``name`` holds."""
    data = Rows(str(root), Store(root)._modes).get_bytes(f"p:{FORMAT}:{name}")
    assert data is not None
    return sorted(marshal.loads(data))


def kept(root: Path, keys: list[str], name: str = "t") -> Store:
    """A link of target ``name``: looks ``keys`` up, places nothing, keeps what it found."""
    s = Store(root)
    found = s.lookup(keys, name)
    s.keep_pack(name, [found[k] for k in keys if k in found])
    return s


def test_a_pack_answers_every_key_it_holds_from_one_file(tmp_path: Path) -> None:
    root, manifests = stored(tmp_path)
    kept(root, KEYS)
    rows = Rows(str(root), Store(root)._modes)
    for key in KEYS:  # the entries' own row files go: only the pack can answer now
        os.unlink(rows.path(f"a:{key}"))
    out = tmp_path / "out"
    code = (
        "import sys, store\n"
        f"s = store.Store({str(root)!r})\n"
        f"found = s.lookup({KEYS!r}, 't')\n"
        f"placed = s.materialize_many([(found['cd02'], {{'obj': {str(out)!r}}})])\n"
        f"print(sorted(found), placed[0] is not None, "
        f"[m for m in {DB_MODULES!r} if m in sys.modules])\n"
    )
    assert in_fresh_process(code) == f"{sorted(KEYS)} True []"
    assert out.read_bytes() == b"cd02" * 100
    assert not any(os.path.exists(rows.path(f"a:{key}")) for key in KEYS)  # no backfill
    assert Store(root).lookup(KEYS, "t") == manifests  # the very manifests the rows held
    assert Store(root).lookup(KEYS, "other") == manifests  # another target: the database


def test_a_pack_is_written_again_only_when_the_link_differs(tmp_path: Path) -> None:
    root, manifests = stored(tmp_path, [*KEYS, "ab04"])
    kept(root, KEYS)
    path = pack_path(root)
    first = path.stat()
    kept(root, KEYS)  # the same keys, all from the pack: left as it is
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    kept(root, [*KEYS, "ab04"])  # one key more (from its row): written with it
    rewritten = path.stat()
    assert rewritten.st_ino != first.st_ino
    s = Store(root)
    for key in [*KEYS, "ab04"]:
        os.unlink(Rows(str(root), s._modes).path(f"a:{key}"))
    assert Store(root).lookup([*KEYS, "ab04"], "t") == manifests
    kept(root, KEYS[:2])  # one key fewer: the pack no longer holds what was not asked
    assert path.stat().st_ino != rewritten.st_ino
    assert packed(root) == KEYS[:2]


def test_only_what_a_link_placed_goes_into_its_pack(tmp_path: Path) -> None:
    root, _ = stored(tmp_path)
    s = Store(root)
    found = s.lookup(KEYS, "t")
    placed = s.materialize_many([(found[k], {"obj": str(tmp_path / k)}) for k in KEYS[:2]])
    assert all(t is not None for t in placed)
    s.keep_pack("t", [found[k] for k in KEYS[:2]])
    assert packed(root) == KEYS[:2]


@pytest.mark.parametrize("damage", [
    "garbage", "truncated", "empty", "not marshal", "not a dict", "bad entries",
    "another key's",
])  # fmt: skip
def test_a_damaged_or_strange_pack_answers_nothing_wrong(tmp_path: Path, damage: str) -> None:
    """Its keys come from their rows instead; nothing is reported (a pack is a copy)."""
    root, manifests = stored(tmp_path)
    kept(root, KEYS)
    path = pack_path(root)
    data = path.read_bytes()
    digest = manifests["cd02"].outputs["obj"][0]
    # The right framing (the row's digest and key) around contents that are wrong:
    bad: dict[str, object] = {
        "ab01": ("ab01", (("obj", "z" * 32, 300),), {}),  # not a digest
        "cd02": ("cd02", (("obj", digest, -1),), {}),  # a negative size
        "ef03": ("ef03", (), {}),  # no output
    }
    # Each key's entry the (whole, valid) manifest of the next key, naming that key.
    raw = marshal.loads(Rows(str(root), Store(root)._modes).get_bytes(f"p:{FORMAT}:t") or b"")
    swapped = {key: raw[KEYS[(i + 1) % len(KEYS)]] for i, key in enumerate(KEYS)}
    path.write_bytes({
        "garbage": os.urandom(len(data)),
        "truncated": data[: len(data) // 2],
        "empty": b"",
        "not marshal": _framed(f"p:{FORMAT}:t", b"\xff not marshal"),
        "not a dict": _framed(f"p:{FORMAT}:t", marshal.dumps([1, 2, 3])),
        "bad entries": _framed(f"p:{FORMAT}:t", marshal.dumps(bad)),
        "another key's": _framed(f"p:{FORMAT}:t", marshal.dumps(swapped)),
    }[damage])  # fmt: skip
    w = Warnings()
    s = Store(root, warn=w)
    found = s.lookup(KEYS, "t")
    assert found == manifests
    assert s.materialize(found["ab01"], {"obj": str(tmp_path / "out")})
    assert (tmp_path / "out").read_bytes() == b"ab01" * 100
    s.keep_pack("t", [found[k] for k in KEYS])  # answered by rows: the pack is written again
    assert w.text() == ""
    for key in KEYS:
        os.unlink(Rows(str(root), s._modes).path(f"a:{key}"))
    assert Store(root).lookup(KEYS, "t") == manifests


def test_a_pack_entry_whose_blob_is_gone_drops_its_entry_only_while_the_row_agrees(
    tmp_path: Path,
) -> None:
    root, manifests = stored(tmp_path)
    kept(root, KEYS)
    old = manifests["ab01"].outputs["obj"][0]
    os.unlink(root / "blobs" / old[:2] / old[2:])
    # The entry is stored again meanwhile, with other bytes (a compiler that is not
    # deterministic): its row now names another blob, while the pack names the lost one.
    s = Store(root)
    s.drop("ab01")
    assert put(s, tmp_path, "ab01", b"again" * 10)
    stale = Store(root)
    found = stale.lookup(KEYS, "t")
    assert found["ab01"] == manifests["ab01"]  # the pack's word
    assert not stale.materialize(found["ab01"], {"obj": str(tmp_path / "out")})
    fresh = Store(root).get("ab01")  # the newer entry stays, and is served
    assert fresh is not None and Store(root).materialize(fresh, {"obj": str(tmp_path / "out")})
    assert (tmp_path / "out").read_bytes() == b"again" * 10
    stale.keep_pack("t", [found[k] for k in KEYS[1:]])  # the link placed the other two
    assert Store(root).lookup(KEYS, "t")["ab01"] == fresh  # from its row again

    # Where the row says what the pack says, the entry is dead and dropped, as from a row.
    kept(root, KEYS)
    lost = fresh.outputs["obj"][0]
    os.unlink(root / "blobs" / lost[:2] / lost[2:])
    again = Store(root)
    found = again.lookup(KEYS, "t")
    assert not again.materialize(found["ab01"], {"obj": str(tmp_path / "out2")})
    assert Store(root).get("ab01") is None and Store(root).lookup(["ab01"]) == {}


def test_packs_go_with_maintenance_passes_and_clear(tmp_path: Path) -> None:
    root, manifests = stored(tmp_path)
    kept(root, KEYS)
    path = pack_path(root)
    assert path.exists()
    assert Store(root).trim() == 0  # an eviction pass reconciles the row files
    assert not path.exists()
    assert Store(root).lookup(KEYS, "t") == manifests
    kept(root, KEYS)
    assert path.exists()
    Store(root).verify()
    assert not path.exists()
    kept(root, KEYS)
    Store(root).clear()
    assert not path.exists() and Store(root).lookup(KEYS, "t") == {}


def test_a_pack_with_metadata_marshal_cannot_carry_is_not_written(tmp_path: Path) -> None:
    root, _ = stored(tmp_path)
    s = Store(root)
    found = s.lookup(KEYS, "t")
    odd = Manifest("ab01", found["ab01"].outputs, {"x": object()})
    s.keep_pack("t", [odd, found["cd02"]])
    assert not pack_path(root).exists()
