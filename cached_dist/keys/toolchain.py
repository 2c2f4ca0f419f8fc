"""The identity of the backend compiler, as ``--compiler-check`` asks (ccache's model).

- ``content`` (default): the executable and the LLVM libraries it loads. Debian's clang is a
  130 KB launcher; the compiler proper lives in libclang-cpp and libLLVM, so hashing only
  the executable could serve stale objects after an upgrade that changes only a library.
  Hashing ~200 MB costs time, so the result is memoized in the store by the files' (path,
  device, inode, size, mtime). A wrapper script is hashed as it is: the compiler it runs is
  not seen.
- ``mtime``: the same files' paths, sizes and modification times, without reading them.
- ``string:VALUE``: VALUE alone (the user states the version).
- any other value is a command (``%compiler% --version``): its exit status must be 0 and its
  output is the identity. It sees through wrappers. The output is memoized by the command,
  the stat of the compiler and of every file a wrapper script names by absolute path, so
  relinks do not run it while nothing visible changed.
"""

from __future__ import annotations

import os
import stat

import xxhash

from store.jsonload import loads

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


# The same facts for this process, so a runner that needs the identity again after the keys
# (the Dask runner) pays only the stat calls.
_PROCESS: dict[tuple[str, str], str] = {}


class CompilerCheckError(Exception):
    """The --compiler-check command failed; the message says how."""


def identity(compiler: str, memo: Memo, check: str = "content") -> str:
    """A digest naming the exact compiler that will run; raises OSError if it is missing,
    CompilerCheckError if the check's command fails."""
    if check.startswith("string:"):
        return "string:" + xxhash.xxh3_128_hexdigest(check.encode("utf-8", "surrogateescape"))
    executable = os.path.realpath(resolve_program(compiler))
    if check not in ("content", "mtime"):
        return "command:" + _command_identity(check, compiler, executable, memo)
    exe_key = _stat_key(executable)
    libs_text = _PROCESS.get(("toolchain-libs", exe_key))
    if libs_text is None:
        libs_text = memo.memo_get("toolchain-libs", exe_key)
    if libs_text is None:
        import json

        libs_text = json.dumps(toolchain_libraries(executable))
        memo.memo_put("toolchain-libs", exe_key, libs_text)
    _PROCESS["toolchain-libs", exe_key] = libs_text
    files = [executable, *loads(libs_text)]
    if check == "mtime":
        text = "|".join(f"{f}:{os.stat(f).st_size}:{os.stat(f).st_mtime_ns}" for f in files)
        return "mtime:" + xxhash.xxh3_128_hexdigest(text.encode("utf-8", "surrogateescape"))
    full_key = "|".join(_stat_key(f) for f in files)
    found = _PROCESS.get(("toolchain", full_key))
    if found is None:
        found = memo.memo_get("toolchain", full_key)
    if found is None:
        h = xxhash.xxh3_128()
        for path in files:
            h.update(path.rsplit("/", 1)[-1].encode() + b"\0")
            _hash_file(h, path)
        found = h.hexdigest()
        memo.memo_put("toolchain", full_key, found)
    _PROCESS["toolchain", full_key] = found
    return found


_WRAPPER_MAX = 64 * 1024  # a script larger than this is not read for the paths it names


def _named_files(executable: str) -> list[str]:
    """Files a wrapper script names by absolute path (the compiler it runs, mostly)."""
    try:
        with open(executable, "rb") as f:
            head = f.read(_WRAPPER_MAX + 1)
    except OSError:
        return []
    if not head.startswith(b"#!") or len(head) > _WRAPPER_MAX:
        return []
    import re

    text = head.decode("utf-8", "surrogateescape")
    found = []
    for path in re.findall(r"(?<![\w.])/[^\s'\"`$;&|()<>]+", text):
        if path not in found and os.path.isfile(path):
            found.append(path)
    return found


def _command_identity(command: str, compiler: str, executable: str, memo: Memo) -> str:
    """The digest of the check command's output, memoized by what could change it."""
    watched = [executable, *_named_files(executable)]
    memo_key = command + "\0" + compiler + "\0" + "|".join(_stat_key(f) for f in watched)
    found = memo.memo_get("compiler-check", memo_key)
    if found is not None:
        return found
    import shlex
    import subprocess

    argv = [word.replace("%compiler%", compiler) for word in shlex.split(command)]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        raise CompilerCheckError(f"cannot run {argv[0]!r}: {e}") from None
    if done.returncode != 0:
        raise CompilerCheckError(f"{' '.join(argv)!r} exited with status {done.returncode}")
    found = xxhash.xxh3_128_hexdigest(done.stdout + b"\0" + done.stderr)
    memo.memo_put("compiler-check", memo_key, found)
    return found
