"""The identity of the backend compiler: the executable and the LLVM libraries it loads.

Debian's clang is a 130 KB launcher; the compiler proper lives in libclang-cpp and libLLVM.
Hashing only the executable could serve stale objects after an upgrade that changes only a
library, so the identity covers those libraries too. Hashing ~200 MB costs time, so the
result is memoized in the store by the files' (path, device, inode, size, mtime).
"""

from __future__ import annotations

import json
import os
import stat

import xxhash

# Shared libraries that belong to the toolchain, by name; others (libc, libstdc++) do not.
_TOOLCHAIN_LIBS = ("libLLVM", "libclang", "liblld", "libMLIR", "libPolly")
_SYSTEM_PREFIXES = ("/", "/usr", "/usr/local")


TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from typing import Protocol

    class Memo(Protocol):
        def memo_get(self, namespace: str, key: str) -> str | None: ...
        def memo_put(self, namespace: str, key: str, value: str) -> None: ...


class NoMemo:
    def memo_get(self, namespace: str, key: str) -> str | None:
        return None

    def memo_put(self, namespace: str, key: str, value: str) -> None:
        pass


def resolve_program(name: str) -> str:
    """Like execvp's search: a name without '/' is looked up on PATH."""
    if "/" in name:
        return name
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(2, "program not found on PATH", name)


def _stat_key(path: str) -> str:
    """Names the file's version; OSError unless it is a regular file (never open a FIFO)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path} is not a regular file")
    return f"{path}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def toolchain_libraries(executable: str) -> list[str]:
    """The toolchain's own shared libraries that ``executable`` loads (via ldd)."""
    import subprocess

    try:
        done = subprocess.run(["ldd", executable], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    prefix = os.path.dirname(os.path.dirname(executable))
    libs = []
    for line in done.stdout.splitlines():
        name, arrow, rest = line.strip().partition(" => ")
        if not arrow or not rest.startswith("/"):
            continue
        path = os.path.realpath(rest.split(" (")[0])
        in_prefix = prefix not in _SYSTEM_PREFIXES and path.startswith(prefix + "/")
        if name.startswith(_TOOLCHAIN_LIBS) or in_prefix:
            libs.append(path)
    return sorted(set(libs))


def _hash_file(h: xxhash.xxh3_128, path: str) -> None:
    """Feeds a whole file to ``h``; mapped rather than read (~40% faster for 200 MB)."""
    import mmap

    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            h.update(m)


def identity(compiler: str, memo: Memo) -> str:
    """A digest naming the exact compiler that will run; raises OSError if it is missing."""
    executable = os.path.realpath(resolve_program(compiler))
    exe_key = _stat_key(executable)
    libs_text = memo.memo_get("toolchain-libs", exe_key)
    if libs_text is None:
        libs_text = json.dumps(toolchain_libraries(executable))
        memo.memo_put("toolchain-libs", exe_key, libs_text)
    files = [executable, *json.loads(libs_text)]
    full_key = "|".join(_stat_key(f) for f in files)
    found = memo.memo_get("toolchain", full_key)
    if found is None:
        h = xxhash.xxh3_128()
        for path in files:
            h.update(path.rsplit("/", 1)[-1].encode() + b"\0")
            _hash_file(h, path)
        found = h.hexdigest()
        memo.memo_put("toolchain", full_key, found)
    return found
