"""The native input reader (cached_dist/keys/_read.c) against read_regular's Python code: the
same bytes, or the same error, in every case a file can be in when it is read."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from cached_dist.keys import digests

from .sanitized import sanitized_build

_built = sanitized_build("CACHED_DIST_SANITIZED_READ", "_read")
if _built is not None:  # scripts/sanitize: this file runs against its ASan/UBSan build
    digests.read_exact, digests.read_new = _built.read_exact, _built.read_new

needs_native = pytest.mark.skipif(digests.read_exact is None,
                                  reason="the C extension is not built")  # fmt: skip


def test_ci_builds_the_native_reader() -> None:
    """CI installs with a C compiler (scripts/setup): there the reader must be present."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        assert digests.read_exact is not None
    elif digests.read_exact is None:
        pytest.skip("the C extension is not built (CI is not set)")


def _outcome(read: Callable[[], object]) -> tuple[str, object]:
    try:
        return "bytes", read()
    except OSError as e:
        return type(e).__name__, (e.errno, e.strerror, e.filename, str(e))


def _as_is(f: Path) -> None:
    pass


def _grown(f: Path) -> None:
    with open(f, "ab") as out:
        out.write(b"+")


def _shrunk(f: Path) -> None:
    os.truncate(f, f.stat().st_size - 1)


def _touched(f: Path) -> None:  # same size, another mtime
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))


def _replaced(f: Path) -> None:  # another inode, the same bytes
    other = f.with_name(f.name + ".new")
    other.write_bytes(f.read_bytes())
    os.replace(other, f)


def _fifo(f: Path) -> None:  # opening it must not wait for a writer
    f.unlink()
    os.mkfifo(f)


def _directory(f: Path) -> None:
    f.unlink()
    f.mkdir()


def _gone(f: Path) -> None:
    f.unlink()


def _dangling(f: Path) -> None:
    f.unlink()
    f.symlink_to(f.with_name("nowhere"))


@needs_native
@pytest.mark.parametrize("size", [0, 1, 4096, 70_000, 3 << 20])
@pytest.mark.parametrize("change", [_as_is, _grown, _shrunk, _touched, _replaced, _fifo,
                                    _directory, _gone, _dangling])  # fmt: skip
def test_the_native_reader_reads_and_refuses_as_the_python_one(
    tmp_path: Path, size: int, change: Callable[[Path], None]
) -> None:
    if change is _shrunk and size == 0:
        pytest.skip("nothing to take from an empty file")
    f = tmp_path / "member.o"
    f.write_bytes(bytes(i * 7 % 251 for i in range(size)))
    seen = os.stat(f)  # the job-file checks' stat
    change(f)
    native = _outcome(lambda: digests.read_regular(str(f), seen))
    reference = _outcome(lambda: digests._read_regular(str(f), seen))
    assert native == reference
    if change is _as_is:
        assert native == ("bytes", f.read_bytes())
    else:
        assert native[0] != "bytes"  # every change is refused


def _python_new(path: str) -> tuple[bytes, tuple[int, int, int, int]]:
    """read_new's reference, all in Python: digests._read_new (stat, then read_regular), with
    read_regular's own Python reads rather than the extension's."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path} is not a regular file")
    return digests._read_regular(path, st), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@needs_native
@pytest.mark.parametrize("what", ["file", "empty", "fifo", "directory", "gone", "dangling",
                                  "/dev/null", "not a directory"])  # fmt: skip
def test_reading_a_file_not_examined_stats_it_first(tmp_path: Path, what: str) -> None:
    """read_new (a worker's reads, before the checks) against stat + read_regular: a FIFO or
    a device is refused without being opened, and the identity is the stat's."""
    f = tmp_path / "member.o"
    f.write_bytes(b"" if what == "empty" else b"module" * 100)
    path = str(f)
    if what == "fifo":
        f.unlink()
        os.mkfifo(f)
    elif what in ("directory", "gone", "dangling"):
        {"directory": _directory, "gone": _gone, "dangling": _dangling}[what](f)
    elif what == "/dev/null":
        path = what
    elif what == "not a directory":
        path = str(f / "below")
    assert digests.read_new is not digests._read_new  # the extension's
    native = _outcome(lambda: digests.read_new(path))
    assert native == _outcome(lambda: _python_new(path))
    assert (native[0] == "bytes") == (what in ("file", "empty"))


@needs_native
def test_the_native_reader_checks_its_arguments() -> None:
    assert digests.read_exact is not None
    with pytest.raises(ValueError, match="size out of range"):
        digests.read_exact("x", 0, 0, -1, 0)
    with pytest.raises(TypeError):
        digests.read_exact(b"x", 0, 0, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # no path holds NUL; os.open says the same
        digests.read_exact("a\0b", 0, 0, 0, 0)
