"""The storage protocol on the disk store: entries leave and enter it as verified values."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from store import Store, entry
from store.remote import check_url, redact
from tests.store.helpers import write


def _filled(tmp_path: Path) -> tuple[Store, dict[str, bytes]]:
    s = Store(tmp_path / "a")
    data = {"obj": os.urandom(30_000), "idx": b"index bytes"}
    sources = {role: write(tmp_path / role, d) for role, d in data.items()}
    assert s.put("aa11", sources, duration=3.5, toolchain="clang 22", key_version=7)
    return s, data


def test_an_entry_moves_between_stores_as_one_value(tmp_path: Path) -> None:
    a, data = _filled(tmp_path)
    value, missing = a.get_many(["aa11", "bb22"])
    assert value is not None and missing is None
    decoded = entry.decode(value, "aa11")
    assert {role: d for role, (_, d) in decoded[0].items()} == data
    assert decoded[1]["duration"] == 3.5 and decoded[1]["key_version"] == 7

    b = Store(tmp_path / "b")
    b.put_many([("aa11", value), ("cc33", b"not an entry"), ("dd44", value[:-1])])
    m = b.get("aa11")
    assert m is not None and b.get("cc33") is None and b.get("dd44") is None
    assert m.meta["toolchain"] == "clang 22" and m.meta["duration"] == 3.5
    assert b.materialize(m, {"obj": str(tmp_path / "out.o")})
    assert (tmp_path / "out.o").read_bytes() == data["obj"]
    (again,) = b.get_many(["aa11"])  # back out: the same outputs, a new "created"
    assert again is not None and entry.decode(again, "aa11")[0] == decoded[0]


def test_a_damaged_blob_is_not_exported(tmp_path: Path) -> None:
    a, _ = _filled(tmp_path)
    m = a.get("aa11")
    assert m is not None
    digest, _ = m.outputs["obj"]
    path = tmp_path / "a" / "blobs" / digest[:2] / digest[2:]
    damaged = bytearray(path.read_bytes())
    damaged[100] ^= 0xFF
    path.write_bytes(bytes(damaged))
    assert a.get_many(["aa11"]) == [None]


def test_every_flipped_output_byte_of_a_value_is_caught(tmp_path: Path) -> None:
    a, _ = _filled(tmp_path)
    (value,) = a.get_many(["aa11"])
    assert value is not None
    outputs_start = entry.FRAME + int.from_bytes(value[4:8], "big")
    for i in [*range(outputs_start), *range(outputs_start, len(value), 97)]:
        bad = bytearray(value)
        bad[i] ^= 0x01
        with pytest.raises(entry.Refused):
            entry.decode(bytes(bad), "aa11")


def test_urls_are_redacted() -> None:
    assert redact("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert redact("https://user:pw@h/p") == "https://user:***@h/p"
    assert redact("http://h/p") == "http://h/p"
    assert check_url("rediss://h:1") == "rediss://h:1"
