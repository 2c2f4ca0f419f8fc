"""The native placer's compressed path (store/_link.c built with libzstd): a compressed blob
(``blobs/ab/cdef....zst``) is placed by copy_blobs itself, as the exact bytes its digest
names, and every frame Blobs._decompress_out would refuse (truncated, damaged, of another
size, of no size, two frames, garbage, a plain blob in its place...) is handed back untouched,
for the Python path to drop as damaged. Mutated frames, thousands under scripts/sanitize's
ASan/UBSan build (CACHED_DIST_FRAME_MUTATIONS), are never placed as anything but those bytes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import Store, placing, zstd
from store.blobs import TOUCH_AFTER, ZST, Blobs, Outcome
from store.fsutil import Modes
from tests.sanitized import sanitized_build
from tests.store.helpers import write

_built = sanitized_build("CACHED_DIST_SANITIZED_LINK", "_link")
if _built is not None:  # scripts/sanitize: this file runs against its ASan/UBSan build
    placing.__dict__["native_link_blobs"] = _built.link_blobs  # what placing.place calls
    placing.__dict__["native_copy_blobs"] = _built.copy_blobs
    _HAS_ZSTD = bool(_built.HAS_ZSTD)
else:
    try:
        from store._link import HAS_ZSTD as _HAS_ZSTD
    except ImportError:
        _HAS_ZSTD = False

COPY: Any = placing.__dict__["native_copy_blobs"]
needs_zstd = pytest.mark.skipif(COPY is None or not _HAS_ZSTD,
                                reason="the native placer is not built with libzstd")  # fmt: skip
MUTATIONS = int(os.environ.get("CACHED_DIST_FRAME_MUTATIONS", "300"))

#: Object-like bytes that compress (code, tables, zero padding), some that do not, and one of
#: several zstd blocks (over 128 KiB).
OBJECT = (b"\x7fELF\x02\x01\x01" + bytes(57) + bytes(range(256)) * 40 + b"\x90" * 4000) * 4
NOISE = b"".join(xxhash.xxh3_128(i.to_bytes(4, "little")).digest() for i in range(1250))
LARGE = b"".join(OBJECT[i % 5000 :] + bytes([i]) for i in range(6))


def test_ci_builds_the_placer_with_zstd() -> None:
    """CI installs libzstd-dev (scripts/setup): there the placer must place compressed blobs."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        assert COPY is not None and _HAS_ZSTD
    elif COPY is None or not _HAS_ZSTD:
        pytest.skip("the placer is not built with libzstd (CI is not set)")


def _compressed(blobs: Blobs, tmp: Path, data: bytes) -> str:
    """Stores ``data`` compressed (as a compressing store does); its digest."""
    digest, size, _ = blobs.ingest(write(tmp / "src", data))
    assert size == len(data) and os.path.exists(blobs.path(digest) + ZST)
    assert not os.path.exists(blobs.path(digest))
    return digest


def _place(blobs: Blobs, plans: list[tuple[str, int, str, str]]) -> list[float | None]:
    placed: list[float | None] = COPY(blobs.dir, plans, xxhash.xxh3_128_hexdigest, 0.0)
    return placed


def _plan(digest: str, size: int, dest: Path, where: Path) -> tuple[str, int, str, str]:
    return (digest, size, str(dest), str(where / f".{dest.name}.1.tmp"))


def _temps(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name.endswith(".tmp"))


def _replace(path: str, data: bytes) -> None:
    """Puts ``data`` in a (read-only) blob file's place."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    with open(path, "wb") as f:
        f.write(data)


@needs_zstd
@pytest.mark.parametrize("data", [OBJECT, NOISE, LARGE, b"", b"x"],
                         ids=["object", "noise", "several blocks", "empty", "one byte"])  # fmt: skip
def test_a_compressed_blob_is_placed_natively_as_its_exact_bytes(tmp_path: Path,
                                                                  data: bytes) -> None:  # fmt: skip
    """A file of its own with the uncompressed bytes (never a clone of the frame), through
    its temp file in the stage, none left; the frame as it was, no plain blob made."""
    blobs = Blobs(str(tmp_path / "c"), Modes(False), level=1)
    digest = _compressed(blobs, tmp_path, data)
    frame_path = blobs.path(digest) + ZST
    before = os.stat(frame_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "stage").mkdir()
    dest = tmp_path / "out" / "o.o"
    dest.write_bytes(b"an earlier output")
    (took,) = _place(blobs, [_plan(digest, len(data), dest, tmp_path / "stage")])
    assert isinstance(took, float) and 0 <= took < 5
    assert dest.read_bytes() == data
    assert dest.stat().st_ino != before.st_ino
    assert _temps(tmp_path / "stage") == [] and _temps(tmp_path / "out") == []
    after = os.stat(frame_path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns)  # fmt: skip
    assert not os.path.exists(blobs.path(digest))


@needs_zstd
def test_one_call_places_plain_and_compressed_blobs_around_damaged_ones(tmp_path: Path) -> None:
    """The call's one decompression context serves every frame, also after one it refused."""
    plain = Blobs(str(tmp_path / "c"), Modes(False))
    packed = Blobs(str(tmp_path / "c"), Modes(False), level=1)
    datas = [OBJECT, NOISE, OBJECT[::-1], LARGE, OBJECT + b"!", OBJECT[1:]]
    digests = [_compressed(packed, tmp_path, d) for d in datas[:4]]
    digests.append(plain.ingest(write(tmp_path / "p", datas[4]))[0])
    digests.append(_compressed(packed, tmp_path, datas[5]))
    frame = Path(packed.path(digests[0]) + ZST)  # damaged inside: refused by zstd or the hash
    held = bytearray(frame.read_bytes())
    held[len(held) // 2] ^= 0x55
    _replace(str(frame), bytes(held))
    frame = Path(packed.path(digests[2]) + ZST)
    _replace(str(frame), frame.read_bytes()[:-3])  # truncated
    dests = [tmp_path / f"{i}.o" for i in range(len(datas))]
    plans = [_plan(d, len(x), o, tmp_path) for d, x, o in zip(digests, datas, dests, strict=True)]
    took = _place(packed, plans)
    assert [t is not None for t in took] == [False, True, False, True, True, True]
    assert [o.read_bytes() if o.exists() else None for o in dests] == [
        None, datas[1], None, datas[3], datas[4], datas[5]]  # fmt: skip
    assert _temps(tmp_path) == []


@needs_zstd
def test_a_stale_compressed_blob_is_touched_a_fresh_one_is_not(tmp_path: Path) -> None:
    """The LRU clock as _decompress_out keeps it: the frame's, refreshed when older than
    TOUCH_AFTER."""
    blobs = Blobs(str(tmp_path / "c"), Modes(False), level=1)
    digest = _compressed(blobs, tmp_path, OBJECT)
    path = blobs.path(digest) + ZST
    old = time.time() - 2 * TOUCH_AFTER
    os.utime(path, (old, old))
    plan = _plan(digest, len(OBJECT), tmp_path / "one.o", tmp_path)
    assert COPY(blobs.dir, [plan], xxhash.xxh3_128_hexdigest, old - 1) != [None]
    assert os.stat(path).st_mtime == pytest.approx(old, abs=1e-3)
    plan = _plan(digest, len(OBJECT), tmp_path / "two.o", tmp_path)
    assert COPY(blobs.dir, [plan], xxhash.xxh3_128_hexdigest,
                time.time() - TOUCH_AFTER) != [None]  # fmt: skip
    assert os.stat(path).st_mtime > time.time() - 5


def _skippable(payload: bytes) -> bytes:
    """A skippable zstd frame (magic 0x184D2A50): no content, whatever it declares."""
    return b"\x50\x2a\x4d\x18" + len(payload).to_bytes(4, "little") + payload


def _zstandard() -> Any:
    import zstandard

    return zstandard


def _damage(case: str, frame: bytes, data: bytes) -> tuple[bytes | None, bytes | None]:
    """(what the .zst file holds, what the plain name holds): None for no such file."""
    z = _zstandard()
    checked = z.ZstdCompressor(level=1, write_checksum=True).compress(data)
    half = len(frame) // 2
    return {
        "truncated": (frame[:-5], None),
        "header only": (frame[:12], None),
        "a flipped byte": (frame[:half] + bytes([frame[half] ^ 0x10]) + frame[half + 1 :], None),
        "a flipped last byte": (frame[:-1] + bytes([frame[-1] ^ 1]), None),
        "declares another size": (zstd.compress(data + b"x"), None),
        "declares a smaller size": (zstd.compress(data[:-1]), None),
        "declares no size": (z.ZstdCompressor(write_content_size=False).compress(data), None),
        "two frames": (frame + zstd.compress(b""), None),
        "two halves": (zstd.compress(data[:100]) + zstd.compress(data[100:]), None),
        "a byte after the frame": (frame + b"\0", None),
        "a skippable frame first": (_skippable(b"12345678") + frame, None),
        "a skippable frame": (_skippable(frame), None),
        "garbage": (xxhash.xxh3_128(frame).digest() * (len(frame) // 16 + 1), None),
        "the magic then garbage": (frame[:4] + bytes(len(frame) - 4), None),
        "empty": (b"", None),
        "other content of that size": (zstd.compress(data[::-1]), None),
        "a damaged checksum": (checked[:-1] + bytes([checked[-1] ^ 1]), None),
        "the plain bytes as the frame": (data, None),
        "the frame as the plain blob": (None, frame),
        "a damaged plain blob beside a good frame": (frame, data[:-1] + b"?"),
    }[case]


DAMAGE = ["truncated", "header only", "a flipped byte", "a flipped last byte",
          "declares another size", "declares a smaller size", "declares no size", "two frames",
          "two halves", "a byte after the frame", "a skippable frame first", "a skippable frame",
          "garbage", "the magic then garbage", "empty", "other content of that size",
          "a damaged checksum", "the plain bytes as the frame", "the frame as the plain blob",
          "a damaged plain blob beside a good frame"]  # fmt: skip


@needs_zstd
@pytest.mark.parametrize("case", DAMAGE)
def test_a_damaged_frame_is_handed_back_untouched_then_dropped(tmp_path: Path,
                                                               case: str) -> None:  # fmt: skip
    """Handed back: nothing at the destination, no temp file, the files as they were. Then
    placing.place (the native placer, then Python for what it handed back) calls it
    corrupt and removes it, as the Python path alone does."""
    blobs = Blobs(str(tmp_path / "c"), Modes(False), level=1)
    digest = _compressed(blobs, tmp_path, OBJECT)
    zst_path, plain_path = blobs.path(digest) + ZST, blobs.path(digest)
    zst, plain = _damage(case, Path(zst_path).read_bytes(), OBJECT)
    os.unlink(zst_path)
    for path, held in ((zst_path, zst), (plain_path, plain)):
        if held is not None:
            _replace(path, held)
    stats = {p: os.stat(p) for p in (zst_path, plain_path) if os.path.exists(p)}
    dest = tmp_path / "out.o"
    (took,) = _place(blobs, [_plan(digest, len(OBJECT), dest, tmp_path)])
    assert took is None
    assert not dest.exists() and _temps(tmp_path) == []
    for path, seen in stats.items():
        now = os.stat(path)
        assert (now.st_ino, now.st_size, now.st_mtime_ns) == (
            seen.st_ino, seen.st_size, seen.st_mtime_ns)  # fmt: skip
    # What the Python path alone decides for these files: damage.
    assert blobs.read_form(zst_path if plain is None else plain_path, digest,
                           len(OBJECT)) is False  # fmt: skip
    ((outcome, _),) = placing.place(blobs, False, [(digest, len(OBJECT), str(dest), None)])
    assert outcome == Outcome.CORRUPT and not dest.exists()
    assert not os.path.exists(zst_path if plain is None else plain_path)


@needs_zstd
@pytest.mark.parametrize("case", ["a symbolic link", "a directory", "a FIFO"])
def test_anything_but_a_file_in_the_frames_place_is_handed_back(tmp_path: Path,
                                                                case: str) -> None:  # fmt: skip
    """Never followed or waited on (a FIFO would block a read)."""
    blobs = Blobs(str(tmp_path / "c"), Modes(False), level=1)
    digest = _compressed(blobs, tmp_path, OBJECT)
    path = blobs.path(digest) + ZST
    good = tmp_path / "good.zst"
    good.write_bytes(Path(path).read_bytes())
    os.unlink(path)
    if case == "a symbolic link":
        os.symlink(good, path)
    elif case == "a directory":
        os.mkdir(path)
    else:
        os.mkfifo(path)
    dest = tmp_path / "out.o"
    assert _place(blobs, [_plan(digest, len(OBJECT), dest, tmp_path)]) == [None]
    assert not dest.exists() and _temps(tmp_path) == []


@needs_zstd
def test_a_placing_of_compressed_blobs_ends_as_without_the_placer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Intact, damaged and missing compressed blobs and an existing output, through
    Store.materialize_many with and without the native placer: the same outcomes and
    outputs, the damaged and missing entries dropped either way. With it, Python
    decompresses only what it handed back (the damaged blob)."""
    results = []
    decompressed: list[str] = []
    real = Blobs._decompress_out

    def counted(self: Blobs, digest: str, *args: Any) -> str:
        decompressed.append(digest)
        return real(self, digest, *args)

    monkeypatch.setattr(Blobs, "_decompress_out", counted)
    for use_native in (True, False):
        decompressed.clear()
        if not use_native:
            monkeypatch.setattr(placing, "native_link_blobs", None)
            monkeypatch.setattr(placing, "native_copy_blobs", None)
        root = tmp_path / ("native" if use_native else "python")
        s = Store(root / "c", compression_level=1)
        keys = [f"{i:04x}" for i in range(8)]
        for i, key in enumerate(keys):
            data = OBJECT[i * 100 :] + key.encode()
            assert s.put(key, {"obj": write(root / f"src-{key}", data)}, duration=1.0,
                         toolchain="t", key_version=1)  # fmt: skip
        manifests = [m for k in keys if (m := s.get(k)) is not None]
        assert len(manifests) == len(keys)
        damaged, missing = (m.outputs["obj"][0] for m in manifests[1:3])
        frame = Path(s.root) / "blobs" / damaged[:2] / (damaged[2:] + ZST)
        _replace(str(frame), frame.read_bytes()[:-1])
        os.unlink(Path(s.root) / "blobs" / missing[:2] / (missing[2:] + ZST))
        out = root / "out"
        out.mkdir()
        (out / f"{keys[3]}.o").write_bytes(b"an earlier output")
        took = s.materialize_many([(m, {"obj": str(out / f"{k}.o")})
                                   for k, m in zip(keys, manifests, strict=True)])  # fmt: skip
        placed = [t is not None for t in took]
        outputs = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
        gone = [s.get(k) is None for k in keys]
        results.append((placed, outputs, gone))
        # Python's path saw the damaged and the missing one (handed back), or every one.
        assert sorted(decompressed) == sorted(
            [damaged, missing] if use_native else [m.outputs["obj"][0] for m in manifests]
        )
    assert results[0] == results[1]
    placed, outputs, gone = results[0]
    assert placed == [True, False, False, True, True, True, True, True]
    assert gone == [False, True, True, False, False, False, False, False]
    assert outputs[f"{keys[3]}.o"] == OBJECT[300:] + keys[3].encode()


@needs_zstd
def test_a_hit_of_compressed_blobs_loads_no_zstd_binding(tmp_path: Path) -> None:
    """The native placer decompresses: a hit of a compressing store loads neither the
    zstandard package nor its C backend (store/zstd.py), in a process of its own."""
    s = Store(tmp_path / "c", compression_level=1)
    assert s.put("ab", {"o": write(tmp_path / "src", OBJECT)}, duration=1.0, toolchain="t",
                 key_version=1)  # fmt: skip
    s.close()
    assert [p.suffix for p in (tmp_path / "c" / "blobs").rglob("*") if p.is_file()] == [ZST]
    code = (
        "import sys, store\n"
        f"s = store.Store({str(tmp_path / 'c')!r}, compression_level=1)\n"
        "m = s.get('ab')\n"
        f"assert m is not None and s.materialize(m, {{'o': {str(tmp_path / 'out.o')!r}}})\n"
        "print(sorted(n for n in sys.modules if n.startswith(('zstandard', 'store.zstd'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).parents[2])  # fmt: skip
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    assert (tmp_path / "out.o").read_bytes() == OBJECT


_CHECKED = _zstandard().ZstdCompressor(write_checksum=True)
# Mutated frames: each of a few real frames, changed by a few edits (bits flipped, bytes set,
# cut, inserted, the end cut or added to), placed for a plan of its size or one off.
_BASES = {
    "object": (OBJECT, zstd.compress(OBJECT)),
    "noise": (NOISE, zstd.compress(NOISE)),
    "several blocks": (LARGE, zstd.compress(LARGE, 19)),
    "small": (b"abc" * 30, zstd.compress(b"abc" * 30)),
    "checksum": (OBJECT[:3000], _CHECKED.compress(OBJECT[:3000])),
}
_at = st.integers(0, 1 << 20)
_edit = st.one_of(
    st.tuples(st.just("flip"), _at, st.integers(0, 7)),
    st.tuples(st.just("flip"), st.integers(0, 17), st.integers(0, 7)),  # the frame header
    st.tuples(st.just("set"), _at, st.integers(0, 255)),
    st.tuples(st.just("set"), st.integers(0, 17), st.integers(0, 255)),
    st.tuples(st.just("cut"), _at, st.integers(1, 64)),
    st.tuples(st.just("insert"), _at, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("truncate"), _at),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=32)),
)


def _mutated(frame: bytes, edits: list[tuple[Any, ...]]) -> bytes:
    b = bytearray(frame)
    for edit in edits:
        kind = edit[0]
        at = edit[1] % (len(b) + 1) if isinstance(edit[1], int) else 0
        if kind == "flip" and at < len(b):
            b[at] ^= 1 << edit[2]
        elif kind == "set" and at < len(b):
            b[at] = edit[2]
        elif kind == "cut":
            del b[at : at + edit[2]]
        elif kind == "insert":
            b[at:at] = edit[2]
        elif kind == "truncate":
            del b[at:]
        elif kind == "append":
            b += edit[1]
    return bytes(b)


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Blobs, Path]]:
    where = tmp_path_factory.mktemp("fuzz")
    blobs = Blobs(str(where / "c"), Modes(False), level=1)
    for data, _ in _BASES.values():
        _compressed(blobs, where, data)
    (where / "out").mkdir()
    yield blobs, where / "out"


@needs_zstd
@settings(max_examples=MUTATIONS, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(base=st.sampled_from(sorted(_BASES)), edits=st.lists(_edit, min_size=1, max_size=4),
       off=st.sampled_from([0, 0, 0, 0, -1, 1]))  # fmt: skip
def test_a_mutated_frame_is_placed_only_as_its_exact_bytes(
    fuzz_store: tuple[Blobs, Path], base: str, edits: list[tuple[Any, ...]], off: int
) -> None:
    """Placed only as the original bytes, else handed back with nothing written; and placed
    whenever the Python path (store/zstd.py, then the digest) takes the frame. Not the other
    way round: libzstd releases differ in what they refuse of frames that still decode to the
    right bytes (1.5.4, Debian 12's, ignores the reserved bits of a sequences header that the
    zstandard binding's 1.5.7 refuses), and the digest checks those bytes either way."""
    blobs, out = fuzz_store
    data, frame = _BASES[base]
    digest = xxhash.xxh3_128_hexdigest(data)
    damaged = _mutated(frame, edits)
    path = blobs.path(digest) + ZST
    _replace(path, damaged)
    size = max(0, len(data) + off)
    dest = out / "o.o"
    (took,) = _place(blobs, [_plan(digest, size, dest, out)])
    python_takes = blobs.read_form(path, digest, size)
    if took is not None:
        assert dest.read_bytes() == data and size == len(data)
        dest.unlink()
    else:
        assert not dest.exists()
    assert _temps(out) == []
    assert took is not None or not python_takes, (base, edits, off, damaged[:24].hex())


def test_the_fuzz_bases_are_what_they_say() -> None:
    """Real frames: one frame each, of its data's size, nothing after it."""
    for data, frame in _BASES.values():
        assert zstd.decompress(frame, len(data)) == data
    assert zstd.declared_size(_BASES["several blocks"][1]) == len(LARGE) > 128 << 10
    with tempfile.TemporaryDirectory() as tmp:
        blobs = Blobs(tmp, Modes(False), level=1)
        assert blobs.read_form(write(Path(tmp) / "f.zst", _BASES["noise"][1]),
                               xxhash.xxh3_128_hexdigest(NOISE), len(NOISE))  # fmt: skip
