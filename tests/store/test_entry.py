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
    assert _value().startswith(b"CDR3")


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
    assert _reason(b"CDR4" + _value()[4:]) == "format"
    # A later writer's header field, or a scheme, this reader cannot honour.
    body = b"".join(OUTPUTS.values())
    later = {"key": KEY, "outputs": _listed(), "meta": META, "compression": "none"}
    assert _reason(_framed({**later, "dictionary": "d1"}, body)) == "format"
    assert _reason(_framed({**later, "compression": "brotli"}, body)) == "format"
    assert _reason(_framed({**later, "mac": "hmac-sha512"}, body + bytes(32))) == "format"
    # A version-2 value (before issue 43) reads as it did; one with a version-3 field is a miss.
    v2 = {"key": KEY, "outputs": _listed(), "meta": META}
    outputs, meta = entry.decode(b"CDR2" + _framed(v2, body)[4:], KEY)
    assert {role: data for role, (_, data) in outputs.items()} == OUTPUTS and meta == META
    assert _reason(b"CDR2" + _framed(later, body)[4:]) == "format"


@pytest.mark.parametrize("case", [
    "not bytes", "empty", "magic only", "other magic", "cut frame", "cut header",
    "header too long", "header digest", "not json", "not an object", "no key", "key not str",
    "no outputs", "empty outputs", "meta not object", "not a triple", "bad digest",
    "negative size", "duplicate role", "cut output", "trailing bytes", "flipped output",
    "no compression",
])  # fmt: skip
def test_damaged_values_are_refused(case: str) -> None:
    value = _value()
    body = b"".join(OUTPUTS.values())
    whole = {"key": KEY, "outputs": _listed(), "meta": META, "compression": "none"}
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
        "no key": _framed({"outputs": listed, "meta": META, "compression": "none"}, body),
        "no compression": _framed({"key": KEY, "outputs": listed, "meta": META}, body),
        "key not str": _framed({**whole, "key": 0xAA11}, body),
        "no outputs": _framed({"key": KEY, "meta": META, "compression": "none"}, body),
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


SIGNING, OTHER_SIGNING = b"team secret " * 3, b"another team's secret"


@pytest.mark.parametrize("level", [1, 3, 19])
def test_a_compressed_value_round_trips_and_is_smaller(level: int) -> None:
    outputs = {"output0": b"\x7fELF" + bytes(range(256)) * 200, "output1": b"side" * 100}
    value = entry.encode(KEY, outputs, META, level=level)
    header = json.loads(value[entry.FRAME : entry.FRAME + int.from_bytes(value[4:8], "big")])
    assert header["compression"] == "zstd"
    assert len(value) * 5 < sum(map(len, outputs.values()))
    decoded, meta = entry.decode(value, KEY)
    assert {r: d for r, (_, d) in decoded.items()} == outputs and meta == META
    plain = entry.encode(KEY, outputs, META)
    plain_header = plain[entry.FRAME : entry.FRAME + int.from_bytes(plain[4:8], "big")]
    assert json.loads(plain_header)["compression"] == "none"


def _compressed_framed(listed: list[list[object]], frame: bytes) -> bytes:
    return _framed({"key": KEY, "outputs": listed, "meta": META, "compression": "zstd"}, frame)


@pytest.mark.parametrize("case", [
    "not a frame", "raw bytes", "cut frame", "trailing frame bytes", "two frames",
    "frame of another size", "frame larger than declared", "other content",
])  # fmt: skip
def test_damaged_compressed_values_are_refused_before_any_output_is_used(case: str) -> None:
    from store import zstd

    body = b"".join(OUTPUTS.values())
    frame = zstd.compress(body)
    listed = _listed()
    bad = {
        "not a frame": _compressed_framed(listed, b"garbage" * 10),
        "raw bytes": _compressed_framed(listed, body),
        "cut frame": _compressed_framed(listed, frame[:-2]),
        "trailing frame bytes": _compressed_framed(listed, frame + b"\0"),
        "two frames": _compressed_framed(listed, frame + frame),
        "frame of another size": _compressed_framed(listed, zstd.compress(body + b"x")),
        # A frame declaring 1 GiB is refused from its header, never decompressed.
        "frame larger than declared": _compressed_framed(listed, zstd.compress(bytes(1 << 30))),
        "other content": _compressed_framed(listed, zstd.compress(body[::-1])),
    }[case]  # fmt: skip
    assert _reason(bad) == "damaged"


def test_every_flipped_byte_of_a_compressed_value_is_caught() -> None:
    value = entry.encode(KEY, OUTPUTS, META, level=3)
    for i in range(len(value)):
        bad = bytearray(value)
        bad[i] ^= 0x01
        with pytest.raises(entry.Refused):
            entry.decode(bytes(bad), KEY)


@pytest.mark.parametrize("level", [0, 1])
def test_a_signed_value_verifies_only_under_its_key_and_the_signing_key(level: int) -> None:
    signed = entry.encode(KEY, OUTPUTS, META, level=level, signing_key=SIGNING)
    outputs, _ = entry.decode(signed, KEY, SIGNING)
    assert {r: d for r, (_, d) in outputs.items()} == OUTPUTS
    # Readers without a key still use it (its digests are checked as ever).
    assert entry.decode(signed, KEY)[0] == outputs
    # Unsigned, signed with another key, or tag damaged: rejected by a reader with the key.
    assert _reason_signed(entry.encode(KEY, OUTPUTS, META, level=level)) == "rejected"
    other = entry.encode(KEY, OUTPUTS, META, level=level, signing_key=OTHER_SIGNING)
    assert _reason_signed(other) == "rejected"
    assert _reason_signed(signed[:-1] + bytes([signed[-1] ^ 1])) == "rejected"
    assert _reason_signed(signed[:-32]) in ("rejected", "damaged")
    # A version-2 value carries no MAC: rejected too.
    v2 = {"key": KEY, "outputs": _listed(), "meta": META}
    assert _reason_signed(b"CDR2" + _framed(v2, b"".join(OUTPUTS.values()))[4:]) == "rejected"
    # Another key's value, validly signed by the same team, under this key: never used.
    theirs = entry.encode(OTHER, OUTPUTS, META, level=level, signing_key=SIGNING)
    assert _reason_signed(theirs) == "key"
    # Its header rewritten to name this key (digest recomputed): the MAC no longer verifies.
    head = int.from_bytes(theirs[4:8], "big")
    header = theirs[entry.FRAME : entry.FRAME + head].replace(b'"bb22"', b'"aa11"')
    forged = _framed(json.loads(header), theirs[entry.FRAME + head :])
    assert _reason_signed(forged) == "rejected"


def test_every_flipped_byte_of_a_signed_value_is_caught() -> None:
    value = entry.encode(KEY, OUTPUTS, META, level=1, signing_key=SIGNING)
    for i in range(len(value)):
        bad = bytearray(value)
        bad[i] ^= 0x01
        with pytest.raises(entry.Refused):
            entry.decode(bytes(bad), KEY, SIGNING)


def _reason_signed(value: bytes) -> str:
    with pytest.raises(entry.Refused) as refused:
        entry.decode(value, KEY, SIGNING)
    return refused.value.reason
