"""``cached-dist verify`` on a local entry whose manifest names another key: dropped, reported."""

import subprocess
from pathlib import Path

from store import Store
from store.rows import Rows

from .toolchain import cached_dist_exe


def verify(cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([cached_dist_exe(), "verify", f"--cache-dir={cache}"],
                          capture_output=True, text=True, cwd=cache.parent)  # fmt: skip


def test_verify_drops_and_reports_an_entry_naming_another_key(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    s = Store(cache)
    for key in ("ab01", "cd02", "ef03"):
        (tmp_path / key).write_bytes(key.encode() * 100)
        assert s.put(key, {"output0": str(tmp_path / key)}, duration=1.0, toolchain="t",
                     key_version=1)  # fmt: skip
    a = s.get("ab01")
    assert a is not None and s._index is not None
    s._index.set_entry("cd02", a.encode())  # a writer's bug: ab01's manifest filed as cd02
    Rows(str(cache), s._modes).put("a:ef03", a.encode())  # and in ef03's row file alone
    s.close()
    done = verify(cache)
    assert done.returncode == 1 and done.stderr == ""
    assert done.stdout == (
        "checked 3 blobs (1.2 KiB) and 3 entries: 0 corrupt blobs removed, 2 entries dropped, "
        "0 damaged paths repaired\n"
    )
    assert Store(cache).lookup(["ab01", "cd02", "ef03"]) == {"ab01": a}
    again = verify(cache)
    assert again.returncode == 0 and "1 entries: 0 corrupt blobs removed, 0 entries dropped" in (
        again.stdout)  # fmt: skip
