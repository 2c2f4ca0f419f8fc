"""JSON text to Python objects through the interpreter's own C scanner, without ``import json``
(and, for the REAPI tier's hits, which make entries of what they fetch, back: ``dumps``).

A full hit parses a job file and a manifest per job, and ``import json`` (with the ``re``,
``enum`` and more it brings) costs a few milliseconds of a full hit whose own work is ~10 ms:
more than the hit's keys. ``_json.make_scanner`` is the very scanner ``json.loads`` runs, so
the result is the same; for anything it refuses, and for text ``json.loads`` would treat
specially (a byte-order mark), ``json`` itself is asked, so errors read exactly as its own.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    import _json

    make_scanner: Any = _json.make_scanner  # typeshed wants a scanner as its own context
    make_encoder: Any = _json.make_encoder
except ImportError:  # pragma: no cover - an interpreter without json's accelerator
    make_scanner = make_encoder = None

_SPACE = " \t\n\r"


class _Context:
    """What ``make_scanner`` reads from a decoder: json.loads' defaults."""

    strict = True
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    def __init__(self, object_hook: Callable[[dict[str, Any]], Any] | None) -> None:
        self.object_hook = object_hook

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


_plain = make_scanner(_Context(None)) if make_scanner is not None else None


def loads(text: str, object_hook: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """``json.loads(text, object_hook=object_hook)``; raises what it raises (ValueError)."""
    scan = _plain if object_hook is None else None
    if scan is None and make_scanner is not None:
        scan = make_scanner(_Context(object_hook))
    if scan is not None and not text.startswith("\ufeff"):
        start = len(text) - len(text.lstrip(_SPACE))
        try:
            value, end = scan(text, start)
        except (StopIteration, ValueError, RecursionError, SystemError):
            # json says what is wrong, in its own words. (SystemError: the scanner takes
            # json.decoder's error class from sys.modules, and without it raises nothing.)
            pass
        else:
            if not text[end:].strip(_SPACE):
                return value
    import json

    return json.loads(text, object_hook=object_hook)


def detect_encoding(raw: bytes) -> str:
    """``json.detect_encoding``: UTF-8 unless a byte-order mark or NUL bytes say otherwise."""
    if 0 not in raw[:4] and not raw.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        return "utf-8"
    import json

    return json.detect_encoding(raw)


def _unknown(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: object) -> str:
    """``json.dumps(value, separators=(",", ":"))``, by the C encoder json.dumps itself runs
    (with the same arguments), so the text is the same."""
    if make_encoder is None:  # pragma: no cover
        import json

        return json.dumps(value, separators=(",", ":"))
    encode = make_encoder({}, _unknown, _json.encode_basestring_ascii, None, ":", ",", False,
                          False, True)  # fmt: skip
    return "".join(encode(value, 0))
