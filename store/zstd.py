"""zstd through the ``zstandard`` binding, loaded the way a cache hit can afford.

``import zstandard`` runs the package's ``__init__``, which imports ``platform`` and
``typing`` to choose a backend: ~15 ms here, more than everything else a full hit of a small
program does. The C backend alone (``zstandard/backend_c``, the module that package
re-exports on CPython) loads in ~1 ms, so it is loaded directly, from the package's own
directory, as that package would; anything unexpected (another interpreter, a build without
the C backend) falls back to the plain import. Loaded on first use only: a link that neither
reads nor writes a compressed value never loads it.

Both directions check sizes before allocating: a value declares its uncompressed size, and a
frame that declares another one (or none) is refused before it is decompressed, so damaged or
hostile bytes cannot make a reader allocate more than the outputs it expects.
"""

from __future__ import annotations

import os
import sys
from _thread import _local, allocate_lock

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

#: zstd's frame magic (little-endian 0xFD2FB528): what every compressed blob begins with.
MAGIC = b"\x28\xb5\x2f\xfd"
#: The level a store and a remote tier compress at unless told otherwise: zstd's level 1
#: (ccache's default): object files compress ~3x at several hundred MB/s.
DEFAULT_LEVEL = 1
_backend: ModuleType | None = None
#: Compressors and decompressors, one set per thread: a ``ZstdCompressor`` holds one zstd
#: context and releases the GIL while it works, so two threads sharing one (the local
#: runner's completions, say) corrupt it and crash the process.
_mine = _local()
_loading = allocate_lock()


class Error(ValueError):
    """Bytes that are not one zstd frame of the expected size."""


def _load() -> ModuleType:
    global _backend
    if _backend is None:
        with _loading:  # two threads' first frames at once: one load
            if _backend is None:
                backend = _load_c_backend()
                if backend is None:
                    import zstandard

                    backend = zstandard
                _backend = backend
    return _backend


def preload() -> None:
    """Loads the backend now (a warm server, before its links need it)."""
    _load()


def _load_c_backend() -> ModuleType | None:
    name = "zstandard.backend_c"
    found = sys.modules.get(name)
    if found is not None:
        return found
    try:
        import _imp

        suffix = _imp.extension_suffixes()[0]
        for entry in sys.path:
            path = os.path.join(entry or ".", "zstandard", "backend_c" + suffix)
            if os.path.isfile(path):
                break
        else:
            return None
        spec = _Spec(name, path)
        module: ModuleType = _imp.create_dynamic(spec)  # type: ignore[arg-type]
        _imp.exec_dynamic(module)
    except Exception:
        return None
    return module if hasattr(module, "ZstdDecompressor") else None


class _Spec:
    """What ``_imp.create_dynamic`` reads of a module spec: its name and file."""

    __slots__ = ("name", "origin")

    def __init__(self, name: str, origin: str) -> None:
        self.name = name
        self.origin = origin


def compress(data: bytes | memoryview, level: int = DEFAULT_LEVEL) -> bytes:
    """One zstd frame of ``data`` at ``level`` (1-22), naming its size in the frame header."""
    compressors: dict[int, Any] | None = getattr(_mine, "compressors", None)
    if compressors is None:
        compressors = _mine.compressors = {}
    compressor = compressors.get(level)
    if compressor is None:
        compressor = compressors[level] = _load().ZstdCompressor(
            level=level, write_content_size=True
        )
    frame: bytes = compressor.compress(data)
    return frame


def decompress(frame: bytes | memoryview, size: int) -> bytes:
    """The ``size`` bytes one zstd frame holds; :class:`Error` for anything else (another
    size declared, none, damage, trailing bytes)."""
    backend = _load()
    try:
        if backend.frame_content_size(frame) != size:
            raise Error("a frame of another size")
        decompressor = getattr(_mine, "decompressor", None)
        if decompressor is None:
            decompressor = _mine.decompressor = backend.ZstdDecompressor()
        data: bytes = decompressor.decompress(frame, max_output_size=size, allow_extra_data=False)
    except backend.ZstdError as e:
        raise Error(str(e)) from None
    if len(data) != size:
        raise Error("a frame of another size")
    return data


def declared_size(head: bytes | memoryview) -> int | None:
    """The uncompressed size a frame's header (its first 18 bytes suffice) declares; None if
    it is not a frame header or declares none."""
    backend = _load()
    try:
        size: int = backend.frame_content_size(head)
    except backend.ZstdError:
        return None
    return size if size >= 0 else None
