"""Entry values (store/entry.py): each names the key it answers, and is refused under another."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xxhash

from store import Store, entry
from tests.store.helpers import write

KEY, OTHER = "aa11", "bb22"
OUTPUTS = {"output0": b"\x7fELF object bytes" * 50, "output1": b"side output"}
META = {"duration": 1.5, "toolchain": "clang 22", "key_version": 7}


def _value(key: str = KEY) -> bytes:
    return entry.encode(key, OUTPUTS, META)


def _framed(header: object, body: bytes) -> bytes:
    """A value framed as encode() frames one, around any header: its digest matches."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    return entry.PREFIX + len(raw).to_bytes(4, "big") + xxhash.xxh3_128_digest(raw) + raw + body


def _listed() -> list[list[object]]:
    return [[r, xxhash.xxh3_128_hexdigest(d), len(d)] for r, d in OUTPUTS.items()]


def _reason(value: object, key: str = KEY) -> str:
    with pytest.raises(entry.Refused) as refused:
        entry.decode(value, key)  # type: ignore[arg-type]
    return refused.value.reason


def test_a_value_round_trips_under_its_key() -> None:
    outputs, meta = entry.decode(_value(), KEY)
    assert {role: data for role, (_, data) in outputs.items()} == OUTPUTS
    assert all(d == xxhash.xxh3_128_hexdigest(OUTPUTS[r]) for r, (d, _) in outputs.items())
    assert meta == META
    assert _value().startswith(b"CDR2")


def test_a_whole_value_of_another_key_is_refused_as_such() -> None:
    assert _reason(_value(OTHER), KEY) == "key"
    assert _reason(_value(KEY), OTHER) == "key"
    assert _reason(_value(KEY), KEY.upper()) == "key"  # keys are compared exactly


def test_the_header_names_the_key_under_its_digest() -> None:
    value = _value()
    header = value[entry.FRAME : entry.FRAME + int.from_bytes(value[4:8], "big")]
    assert json.loads(header)["key"] == KEY
    # The key rewritten in place (same length), digest left alone: damage, not another key.
    forged = value.replace(b'"key":"aa11"', b'"key":"bb22"')
    assert forged != value and _reason(forged, OTHER) == "damaged"


def test_old_and_later_formats_read_as_misses_not_damage() -> None:
    # What cached-dist wrote before values named their key (the CDR1 layout, byte for byte).
    header = json.dumps({"outputs": _listed(), "meta": META}, separators=(",", ":")).encode()
    old = b"CDR1" + len(header).to_bytes(4, "big") + header + b"".join(OUTPUTS.values())
    assert _reason(old) == "format"
    assert _reason(b"CDR3" + _value()[4:]) == "format"
    # A later writer's header field (compression, mac: issue 43) this reader cannot honour.
    later = {"key": KEY, "outputs": _listed(), "meta": META, "compression": "zstd"}
    assert _reason(_framed(later, b"".join(OUTPUTS.values()))) == "format"


@pytest.mark.parametrize("case", [
    "not bytes", "empty", "magic only", "other magic", "cut frame", "cut header",
    "header too long", "header digest", "not json", "not an object", "no key", "key not str",
    "no outputs", "empty outputs", "meta not object", "not a triple", "bad digest",
    "negative size", "duplicate role", "cut output", "trailing bytes", "flipped output",
])  # fmt: skip
def test_damaged_values_are_refused(case: str) -> None:
    value = _value()
    body = b"".join(OUTPUTS.values())
    whole = {"key": KEY, "outputs": _listed(), "meta": META}
    listed = _listed()
    bad: object = {
        "not bytes": "CDR2",
        "empty": b"",
        "magic only": b"CDR2",
        "other magic": b"XDR2" + value[4:],
        "cut frame": value[: entry.FRAME - 1],
        "cut header": value[: entry.FRAME + 10],
        "header too long": value[:4] + (1 << 21).to_bytes(4, "big") + value[8:],
        "header digest": value[:8] + bytes(16) + value[24:],
        "not json": entry.PREFIX + (2).to_bytes(4, "big") + xxhash.xxh3_128_digest(b"{x")
        + b"{x",
        "not an object": _framed([KEY], body),
        "no key": _framed({"outputs": listed, "meta": META}, body),
        "key not str": _framed({**whole, "key": 0xAA11}, body),
        "no outputs": _framed({"key": KEY, "meta": META}, body),
        "empty outputs": _framed({**whole, "outputs": []}, b""),
        "meta not object": _framed({**whole, "meta": []}, body),
        "not a triple": _framed({**whole, "outputs": [listed[0][:2]]}, body),
        "bad digest": _framed({**whole, "outputs": [["output0", "z" * 32, 1]]}, b"x"),
        "negative size": _framed({**whole, "outputs": [[*listed[0][:2], -1]]}, body),
        "duplicate role": _framed({**whole, "outputs": [listed[0], listed[0]]},
                                  OUTPUTS["output0"] * 2),
        "cut output": value[:-1],
        "trailing bytes": value + b"\0",
        "flipped output": value[:-3] + bytes([value[-3] ^ 1]) + value[-2:],
    }[case]  # fmt: skip
    assert _reason(bad) == "damaged"


def test_encode_checks_outputs_against_the_manifest() -> None:
    expected = {r: (xxhash.xxh3_128_hexdigest(d), len(d)) for r, d in OUTPUTS.items()}
    assert entry.decode(entry.encode(KEY, OUTPUTS, META, expected), KEY)
    with pytest.raises(ValueError, match="does not match"):
        entry.encode(KEY, OUTPUTS, META, {**expected, "output1": ("0" * 32, 11)})


def test_a_store_imports_no_value_under_another_key(tmp_path: Path) -> None:
    """Store.put_many (promotion of remote hits, imports) skips a value whose key differs."""
    a = Store(tmp_path / "a")
    assert a.put(KEY, {"obj": write(tmp_path / "obj", b"object of aa11")}, duration=1.0,
                 toolchain="t", key_version=1)  # fmt: skip
    (value,) = a.get_many([KEY])
    assert value is not None and entry.decode(value, KEY)
    b = Store(tmp_path / "b")
    b.put_many([(OTHER, value), ("cc33", _value()), (KEY, value)])
    assert b.get(OTHER) is None and b.get("cc33") is None
    m = b.get(KEY)
    assert m is not None and b.stats()["stores"] == 1 and b.stats()["entries"] == 1
    assert b.materialize(m, {"obj": str(tmp_path / "out")})
    assert (tmp_path / "out").read_bytes() == b"object of aa11"
