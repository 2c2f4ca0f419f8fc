"""The benchmarks' byte-compiling, which decides whether a timed start compiles modules."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.cache_link import byte_compile

SECOND = 1_790_000_000 * 10**9  # any whole second: both edits are made to fall within it


def test_a_module_edited_twice_within_a_second_is_not_compiled_at_each_start(
    tmp_path: Path,
) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    module = package / "mod.py"
    module.write_text("VALUE = 1\n")
    os.utime(module, ns=(SECOND, SECOND))
    byte_compile((package,))
    module.write_text("VALUE = 'a longer value'\n")  # another size, the same mtime second
    os.utime(module, ns=(SECOND + 5, SECOND + 5))
    byte_compile((package,))
    shown = subprocess.run(
        [sys.executable, "-v", "-c", "import pkg.mod; print(pkg.mod.VALUE)"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert shown.stdout == "a longer value\n"
    compiled = importlib.util.cache_from_source(str(module))
    assert f"code object from '{compiled}'" in shown.stderr  # the .pyc, not the source
    assert f"code object from {module}\n" not in shown.stderr
