"""The shared memo's values on a remote tier (cached_dist/link/tiers.py): what a link takes
from a remote as a shard's remembered digest, and what it ignores or rejects."""

import pytest

from cached_dist.link.tiers import _memo_key, _memo_text, _memo_value

KEY = _memo_key("shard", "ab" * 16)
GOOD = ["canon:" + "0123456789abcdef" * 2, "raw:" + "f" * 32]


@pytest.mark.parametrize("text", GOOD)
@pytest.mark.parametrize("signing_key", [None, b"k" * 32])
def test_a_memo_written_here_reads_back(text: str, signing_key: bytes | None) -> None:
    assert _memo_text(_memo_value(KEY, text, signing_key), KEY, signing_key) == text


@pytest.mark.parametrize("text", [
    "canon:" + "A" * 32,  # upper-case hex is not what a digest is written as
    "canon:" + "a" * 31, "raw:" + "a" * 33, "raw:" + "g" * 32, "other:" + "a" * 32,
    "canon" + "a" * 32, "canon:" + "a" * 32 + "\n", "raw::" + "a" * 31, "", "canon:",
    "raw:" + "a" * 31 + "\u00e9",
])  # fmt: skip
def test_a_memo_of_any_other_text_is_a_miss(text: str) -> None:
    """Garbage under a memo key (a writer's bug, a hostile member) is ignored, not used."""
    assert _memo_text(_memo_value(KEY, text, None), KEY, None) is False


def test_values_that_are_no_memo_are_misses_and_unsigned_ones_rejected_when_signing() -> None:
    assert _memo_text(None, KEY, None) is False
    assert _memo_text(b"\x00\x01 garbage", KEY, None) is False
    assert _memo_text(b"\xff" * 40, KEY, b"k") is False
    unsigned = _memo_value(KEY, GOOD[0], None)
    assert _memo_text(unsigned, KEY, b"k" * 32) is True  # rejected: not signed
    signed = _memo_value(KEY, GOOD[0], b"k" * 32)
    assert _memo_text(signed, KEY, b"other" * 8) is True  # signed with another key
    assert _memo_text(signed, _memo_key("shard", "cd" * 16), b"k" * 32) is True  # another key's
