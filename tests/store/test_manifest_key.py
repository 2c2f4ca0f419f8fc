"""A local entry names its key: a row holding another key's manifest is damage, a miss, and
verify drops it; a row of the format before that is a miss, not damage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store import Manifest, Store
from store.manifest import FORMAT
from store.rows import Rows
from tests.store.test_rows import put

A, B = "ab01", "cd02"


def _stored(tmp_path: Path) -> tuple[Path, Manifest, Manifest]:
    root = tmp_path / "c"
    s = Store(root)
    assert put(s, tmp_path, A, b"object of ab01" * 10)
    assert put(s, tmp_path, B, b"object of cd02" * 10)
    a, b = s.get(A), s.get(B)
    s.close()
    assert a is not None and b is not None
    return root, a, b


def _filed_under(manifest: Manifest, key: str) -> str:
    """``manifest``'s row text as it is, to be filed under another ``key``."""
    assert manifest.key != key
    return manifest.encode()


def test_a_manifest_names_its_key() -> None:
    m = Manifest(A, {"obj": ("0" * 32, 3)}, {"duration": 1.0})
    body = json.loads(m.encode())
    assert body["key"] == A and body["v"] == FORMAT == 2
    assert Manifest.decode(A, m.encode()) == m
    assert Manifest.decode(B, m.encode()) is None
    assert not Manifest.other_format(m.encode())


@pytest.mark.parametrize("where", ["row", "row file"])
def test_another_keys_manifest_in_a_row_is_a_counted_miss(tmp_path: Path, where: str) -> None:
    """In the database and its file (a writer's bug), or in the file alone (read first)."""
    root, a, _ = _stored(tmp_path)
    s = Store(root)
    assert s._index is not None
    if where == "row":
        s._index.set_entry(B, _filed_under(a, B))
    else:
        Rows(str(root), s._modes).put(f"a:{B}", _filed_under(a, B))
    assert s.lookup([A, B]) == {A: a}
    assert s.get(B) is None
    assert s.stats()["corruptions"] == 1  # counted once: the row was dropped
    assert Store(root).lookup([A, B]) == {A: a}
    assert s.stats()["entries"] == 1
    assert put(s, tmp_path, B, b"object of cd02" * 10)  # stored again: a hit again
    found = Store(root).get(B)
    assert found is not None and found.key == B and found.outputs != a.outputs


@pytest.mark.parametrize("where", ["row", "row file"])
def test_verify_drops_and_reports_a_row_naming_another_key(tmp_path: Path, where: str) -> None:
    root, a, _ = _stored(tmp_path)
    s = Store(root)
    assert s._index is not None
    if where == "row":
        s._index.set_entry(B, _filed_under(a, B))
    else:  # the database still holds the right manifest; lookups read the file first
        Rows(str(root), s._modes).put(f"a:{B}", _filed_under(a, B))
    s.close()
    report = Store(root).verify()
    assert (report.entries_checked, report.entries_dropped, report.blobs_corrupt) == (2, 1, 0)
    again = Store(root)
    assert again.lookup([A, B]) == {A: a}
    assert again.verify().entries_dropped == 0


def test_an_old_format_row_is_a_miss_not_damage(tmp_path: Path) -> None:
    """A row stored before manifests named their key (FORMAT 1) is dropped and stored anew
    by the next link; it is not counted as a corruption."""
    root, a, _ = _stored(tmp_path)
    old = json.dumps({"v": 1, "outputs": {r: list(ref) for r, ref in a.outputs.items()},
                      "meta": a.meta}, separators=(",", ":"), sort_keys=True)  # fmt: skip
    assert Manifest.other_format(old)
    s = Store(root)
    assert s._index is not None
    s._index.set_entry(A, old)
    assert s.lookup([A]) == {} and s.get(A) is None
    assert s.stats()["corruptions"] == 0 and s.stats()["entries"] == 1
    assert put(s, tmp_path, A, b"object of ab01" * 10)
    found = Store(root).get(A)
    assert found is not None and found.outputs == a.outputs


def test_garbage_is_not_another_format() -> None:
    for text in ("{not json", "[]", '{"v":"1"}', '{"v":2.0}', 3, None):
        assert not Manifest.other_format(text)
