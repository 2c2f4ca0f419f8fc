"""The native placer (store/_link.c) against copy_out's Python code: it links or copies an
output only where everything is as expected, hands every other case back with nothing left
behind, and a placing through it ends as one without it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import xxhash

from store import Store, placing
from store.blobs import TOUCH_AFTER, Blobs
from store.fsutil import Modes
from tests.sanitized import sanitized_build
from tests.store.helpers import content, write

_built = sanitized_build("CACHED_DIST_SANITIZED_LINK", "_link")
if _built is not None:  # scripts/sanitize: this file runs against its ASan/UBSan build
    placing.__dict__["native_link_blobs"] = _built.link_blobs  # what placing.place calls
    placing.__dict__["native_copy_blobs"] = _built.copy_blobs

NATIVE: dict[str, Any] = {"link": placing.__dict__["native_link_blobs"],
                          "copy": placing.__dict__["native_copy_blobs"]}  # fmt: skip
needs_native = pytest.mark.skipif(None in NATIVE.values(), reason="the C extension is not built")
MODES = ["link", "copy"]


def test_ci_builds_the_native_placer() -> None:
    """CI installs with a C compiler (scripts/setup): there the placer must be present."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        assert None not in NATIVE.values()
    elif None in NATIVE.values():
        pytest.skip("the C extension is not built (CI is not set)")


def _blob(blobs: Blobs, tmp: Path, data: bytes) -> str:
    digest, _, _ = blobs.ingest(write(tmp / "src", data))
    return digest


def _place_one(mode: str, blobs: Blobs, plan: Any,
               hexdigest: Callable[[bytes], Any] | None = None,
               touch_before: float = 0.0) -> float | None:  # fmt: skip
    (took,) = NATIVE[mode](blobs.dir, [plan], hexdigest or xxhash.xxh3_128_hexdigest,
                           touch_before)  # fmt: skip
    assert took is None or isinstance(took, float)
    return took


def _plan(mode: str, digest: str, size: object, dest: Path | str, where: Path) -> Any:
    """A plan as placing.place gives it: a copy's names its temp file in ``where``."""
    if mode == "link":
        return (digest, size, str(dest), None)
    return (digest, size, str(dest), str(where / f".{os.path.basename(dest)}.1.tmp"))


def _temps(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name.endswith(".tmp"))


@needs_native
@pytest.mark.parametrize("mode", MODES)
def test_an_intact_blob_is_placed_and_timed(tmp_path: Path, mode: str) -> None:
    """A link is the blob's inode; a copy a file of its own, through its temp file (here in
    another directory, as a stage is), none left."""
    blobs = Blobs(str(tmp_path / "c"), Modes(False))
    data = content("a", 50000)
    digest = _blob(blobs, tmp_path, data)
    (tmp_path / "out").mkdir()
    (tmp_path / "stage").mkdir()
    dest = tmp_path / "out" / "o.o"
    dest.write_bytes(b"an earlier output" if mode == "copy" else b"")
    if mode == "link":
        dest.unlink()
    took = _place_one(mode, blobs, _plan(mode, digest, len(data), dest, tmp_path / "stage"))
    assert isinstance(took, float) and 0 <= took < 5
    assert dest.read_bytes() == data
    linked = dest.stat().st_ino == os.stat(blobs.path(digest)).st_ino
    assert linked == (mode == "link")
    assert _temps(tmp_path / "stage") == [] and _temps(tmp_path / "out") == []


def _damaged(path: str) -> None:
    with open(path, "r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 1]))


CASES = ["missing blob", "other size", "other content", "destination exists", "no such directory",
         "upper-case digest", "short digest", "digest with a slash", "NUL in destination",
         "not a tuple", "short tuple", "size not an int", "negative size", "hash raises",
         "hash gives bytes", "temp exists", "no temp directory", "NUL in temp"]  # fmt: skip


TEMP_CASES = ("temp exists", "no temp directory", "NUL in temp")  # a link has no temp file


@needs_native
@pytest.mark.parametrize(("mode", "case"), [(m, c) for m in MODES for c in CASES
                                            if m == "copy" or c not in TEMP_CASES])  # fmt: skip
def test_anything_unexpected_is_handed_back_untouched(tmp_path: Path, mode: str, case: str) -> None:
    """None, nothing written at the destination, no temp file left, the blob as it was: the
    caller's Python path then decides (drops a damaged blob, replaces an existing output,
    reports an error). A copy replaces an existing output itself, as copy_out does."""
    blobs = Blobs(str(tmp_path / "c"), Modes(False))
    data = content("b", 3000)
    digest = _blob(blobs, tmp_path, data)
    path = blobs.path(digest)
    dest = tmp_path / "out.o"
    plan = list(_plan(mode, digest, len(data), dest, tmp_path))
    hexdigest: Callable[[bytes], Any] | None = None
    if case == "missing blob":
        os.unlink(path)
    elif case == "other size":
        plan[1] = len(data) + 1
    elif case == "other content":
        _damaged(path)
    elif case == "destination exists":
        dest.write_bytes(b"an earlier output")
    elif case == "no such directory":
        plan[2] = str(tmp_path / "nowhere" / "out.o")
    elif case == "upper-case digest":
        plan[0] = digest.upper()
    elif case == "short digest":
        plan[0] = digest[:-1]
    elif case == "digest with a slash":
        plan[0] = "../" + digest[3:]
    elif case == "NUL in destination":
        plan[2] = str(dest) + "\0x"
    elif case == "short tuple":
        plan = plan[:2] if mode == "link" else plan[:3]
    elif case == "size not an int":
        plan[1] = str(len(data))
    elif case == "negative size":
        plan[1] = -1
    elif case == "hash raises":

        def hexdigest(raw: bytes) -> str:
            raise RuntimeError("no hash today")
    elif case == "hash gives bytes":

        def hexdigest(raw: bytes) -> bytes:
            return xxhash.xxh3_128_hexdigest(raw).encode()
    elif case == "temp exists":
        Path(plan[3]).write_bytes(b"someone's")
    elif case == "no temp directory":
        plan[3] = str(tmp_path / "nowhere" / "t.tmp")
    elif case == "NUL in temp":
        plan[3] += "\0x"
    before = os.stat(path) if os.path.exists(path) else None
    temps_before = _temps(tmp_path)
    took = _place_one(mode, blobs, plan if case == "not a tuple" else tuple(plan), hexdigest)
    if mode == "copy" and case == "destination exists":
        assert took is not None and dest.read_bytes() == data  # replaced, as copy_out does
        return
    assert took is None
    if case == "destination exists":
        assert dest.read_bytes() == b"an earlier output"
    else:
        assert not dest.exists()
    assert _temps(tmp_path) == temps_before
    if before is not None:
        after = os.stat(path)
        assert (after.st_nlink, after.st_mtime_ns) == (before.st_nlink, before.st_mtime_ns)


@needs_native
@pytest.mark.parametrize("mode", MODES)
def test_a_stale_blob_is_touched_a_fresh_one_is_not(tmp_path: Path, mode: str) -> None:
    """The LRU clock as copy_out keeps it: refreshed only when older than TOUCH_AFTER."""
    blobs = Blobs(str(tmp_path / "c"), Modes(False))
    data = content("c", 2000)
    digest = _blob(blobs, tmp_path, data)
    path = blobs.path(digest)
    old = time.time() - 2 * TOUCH_AFTER
    os.utime(path, (old, old))
    assert _place_one(mode, blobs, _plan(mode, digest, len(data), tmp_path / "one.o", tmp_path),
                      touch_before=old - 1)  # fmt: skip
    assert os.stat(path).st_mtime == pytest.approx(old, abs=1e-3)
    assert _place_one(mode, blobs, _plan(mode, digest, len(data), tmp_path / "two.o", tmp_path),
                      touch_before=time.time() - TOUCH_AFTER)  # fmt: skip
    assert os.stat(path).st_mtime > time.time() - 5


@needs_native
@pytest.mark.parametrize("hard_link", [True, False])
def test_a_placing_ends_as_it_does_without_the_placer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_link: bool
) -> None:
    """A batch of intact, damaged and missing blobs and an existing output, through
    Store.materialize_many with and without the native placer: the same outcomes, the same
    outputs, the damaged and missing entries dropped either way, no temp file left."""
    results = []
    for use_native in (True, False):
        if not use_native:
            monkeypatch.setattr(placing, "native_link_blobs", None)
            monkeypatch.setattr(placing, "native_copy_blobs", None)
        root = tmp_path / ("native" if use_native else "python")
        s = Store(root / "c", hard_link=hard_link)
        keys = [f"{i:04x}" for i in range(8)]
        for i, key in enumerate(keys):
            assert s.put(key, {"obj": write(root / f"src-{key}", content(key, 100 + i))},
                         duration=1.0, toolchain="t", key_version=1)  # fmt: skip
        manifests = [m for k in keys if (m := s.get(k)) is not None]
        assert len(manifests) == len(keys)
        damaged, missing = (m.outputs["obj"][0] for m in manifests[1:3])
        _damaged(str(Path(s.root) / "blobs" / damaged[:2] / damaged[2:]))
        os.unlink(Path(s.root) / "blobs" / missing[:2] / missing[2:])
        out = root / "out"
        out.mkdir()
        (out / f"{keys[3]}.o").write_bytes(b"an earlier output")
        took = s.materialize_many([(m, {"obj": str(out / f"{k}.o")})
                                   for k, m in zip(keys, manifests, strict=True)])  # fmt: skip
        placed = [t is not None for t in took]
        outputs = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
        linked = [(out / f"{k}.o").stat().st_nlink > 1 for k, ok in zip(keys, placed, strict=True)
                  if ok]  # fmt: skip
        gone = [s.get(k) is None for k in keys]
        results.append((placed, outputs, linked, gone))
    assert results[0] == results[1]
    placed, outputs, linked, gone = results[0]
    assert placed == [True, False, False, True, True, True, True, True]
    assert linked == [hard_link] * 6 and gone == [
        False,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
    ]
    assert outputs[f"{keys[3]}.o"] == content(keys[3], 103)
