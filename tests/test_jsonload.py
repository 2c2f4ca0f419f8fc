"""store.jsonload against json itself: the same values, the same errors, the same encodings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import jsonload

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def outcome(load: object, text: str, hook: object = None) -> tuple[str, object]:
    try:
        return "ok", load(text, object_hook=hook)  # type: ignore[operator]
    except (ValueError, RecursionError) as e:
        return type(e).__name__, str(e)


@settings(max_examples=300, deadline=None)
@given(value=values, indent=st.sampled_from([None, 1]), pad=st.sampled_from(["", " ", "\n\t "]))
def test_valid_json_loads_alike(value: object, indent: int | None, pad: str) -> None:
    text = pad + json.dumps(value, indent=indent) + pad
    assert outcome(jsonload.loads, text) == outcome(json.loads, text)


def tagged(table: dict[str, object]) -> object:
    return ("object", sorted(table))


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet='{}[]":,0123456789.eE+- tnrufalsNIity\\\n\ufeff', max_size=40))
def test_damaged_json_fails_alike(text: str) -> None:
    assert repr(outcome(jsonload.loads, text)) == repr(outcome(json.loads, text))  # nan
    assert repr(outcome(jsonload.loads, text, tagged)) == repr(outcome(json.loads, text, tagged))


@pytest.mark.parametrize(
    "text", ['{"a": NaN, "b": -Infinity}', "[1e400]", "\ufeff{}", "[" * 100000]
)
def test_corner_cases_load_alike(text: str) -> None:
    assert repr(outcome(jsonload.loads, text)) == repr(outcome(json.loads, text))


@pytest.mark.parametrize("raw", [b'{"a": 1}', b"\xef\xbb\xbf{}", b"\xff\xfe{\x00}\x00",
                                 b"\xfe\xff\x00{\x00}", b"\x00\x00\x00{", b"{\x00\x00\x00",
                                 b"{\x00}\x00", b"", b"1"])  # fmt: skip
def test_encodings_detected_alike(raw: bytes) -> None:
    assert jsonload.detect_encoding(raw) == json.detect_encoding(raw)


def test_loading_does_not_import_json_but_errors_read_as_its_own() -> None:
    code = ("import sys; from store import jsonload\n"
            "assert jsonload.loads(' {\"a\": [1, 2.5, null]} ') == {'a': [1, 2.5, None]}\n"
            "print(sorted(m for m in ('json', 're', 'enum') if m in sys.modules))\n"
            "try:\n    jsonload.loads('{\"a\": [1,, 2]}')\n"
            "except ValueError as e:\n    print(type(e).__name__, e)\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    first, error = done.stdout.splitlines()
    assert first == "[]"
    assert error == "JSONDecodeError " + str(outcome(json.loads, '{"a": [1,, 2]}')[1])


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_dumps_is_json_dumps(value: object) -> None:
    assert jsonload.dumps(value) == json.dumps(value, separators=(",", ":"))


def test_dumps_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError, match="Object of type bytes is not JSON serializable"):
        jsonload.dumps({"a": b"x"})
