"""Operating a long-lived cache (issue 43): age eviction with set clocks, the Prometheus
exposition (parsed by prometheus_client, as a scraper would), zeroing the counters."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from store import Store
from tests.store.helpers import write

from .toolchain import cached_dist_exe

DAY = 86400.0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([cached_dist_exe(), *args], capture_output=True, text=True)


def _put(s: Store, tmp: Path, key: str, data: bytes) -> None:
    assert s.put(key, {"output0": write(tmp / f"src-{key}", data)}, duration=1.0,
                 toolchain="t", key_version=1)  # fmt: skip


def _age_blobs(root: Path, key_blobs: dict[str, list[Path]], key: str, days: float) -> None:
    """Sets the clock of ``key``'s blobs ``days`` back (what a hit that long ago left)."""
    when = time.time() - days * DAY
    for blob in key_blobs[key]:
        os.utime(blob, (when, when))


@pytest.mark.parametrize("level", [0, 1])
def test_trim_evicts_entries_not_used_for_the_given_age(tmp_path: Path, level: int) -> None:
    root = tmp_path / "c"
    s = Store(root, compression_level=level)
    blobs: dict[str, list[Path]] = {}
    for key, days in (("aa", 10), ("bb", 3), ("cc", 0)):
        before = {p for p in (root / "blobs").rglob("*") if p.is_file()}
        _put(s, tmp_path, key, key.encode() * 5000)
        blobs[key] = [p for p in (root / "blobs").rglob("*") if p.is_file() and p not in before]
        _age_blobs(root, blobs, key, days)
    s.close()
    done = _cli("trim", "--evict-older-than=7d", f"--cache-dir={root}")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("cached-dist: freed ") and f"left in {root}" in done.stderr
    s = Store(root)
    assert s.get("aa") is None and s.get("bb") is not None and s.get("cc") is not None
    assert not any(p.exists() for p in blobs["aa"])
    left = sum(p.stat().st_size for k in ("bb", "cc") for p in blobs[k])
    assert s.stats()["size"] == left and s.stats()["evictions"] == 1
    # A hit refreshes the clock: bb, used now, survives a cut-off it was older than.
    m = s.get("bb")
    assert m is not None and s.materialize(m, {"output0": str(tmp_path / "out")})
    s.close()
    assert _cli("trim", "--evict-older-than", "2d", f"--cache-dir={root}").returncode == 0
    s = Store(root)
    assert s.get("bb") is not None and s.get("cc") is not None
    # Both set two days back: a one-day cut-off takes both, and the size counter with them.
    _age_blobs(root, blobs, "bb", 2)
    _age_blobs(root, blobs, "cc", 2)
    s.close()
    assert _cli("trim", "--evict-older-than=1d", f"--cache-dir={root}").returncode == 0
    s = Store(root)
    assert s.get("bb") is None and s.get("cc") is None and s.stats()["size"] == 0


@pytest.mark.parametrize("age", ["7", "x", "-1d", "0h", "", "7y"])
def test_a_bad_age_is_one_usage_error(tmp_path: Path, age: str) -> None:
    done = _cli("trim", f"--evict-older-than={age}", f"--cache-dir={tmp_path}")
    assert done.returncode == 2
    assert done.stderr.startswith("cached-dist: error: trim: option --evict-older-than: ")
    assert "(examples: 7d, 12h, 30m, 90s)" in done.stderr and done.stderr.count("\n") == 1


def _cache_with_counts(tmp_path: Path) -> Path:
    root = tmp_path / 'cache dir "quoted"'
    s = Store(root, compression_level=1)
    _put(s, tmp_path, "aa", b"\x7fELF" + bytes(4000))
    m = s.get("aa")
    assert m is not None and s.materialize(m, {"output0": str(tmp_path / "o")})
    s.record(hits=3, misses=1, time_saved=1.5, bytes_served=4004, remote_hits=2)
    s.close()
    return root


def test_prometheus_output_parses_with_a_real_parser(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    root = _cache_with_counts(tmp_path)
    done = _cli("stats", "--format=prometheus", f"--cache-dir={root}")
    assert done.returncode == 0, done.stderr
    families = {f.name: f for f in text_string_to_metric_families(done.stdout)}
    as_json = json.loads(_cli("stats", "--json", f"--cache-dir={root}").stdout)
    samples = {s.name: s for f in families.values() for s in f.samples}
    assert samples["cached_dist_hits_total"].value == 3 == as_json["hits"]
    assert families["cached_dist_hits"].type == "counter"
    assert families["cached_dist_entries"].type == "gauge"
    assert samples["cached_dist_entries"].value == 1
    assert samples["cached_dist_time_saved_seconds_total"].value == 1.5
    assert samples["cached_dist_remote_hits_total"].value == 2
    ratio = samples["cached_dist_compression_ratio"].value
    assert ratio == pytest.approx(as_json["bytes_original"] / as_json["bytes_stored"]) and ratio > 5
    assert samples["cached_dist_hits_total"].labels == {"cache_dir": str(root)}
    info = samples["cached_dist_info"]
    assert info.labels["cache_dir"] == str(root) and info.labels["shard_decoder"] in (
        "native", "python")  # fmt: skip
    numeric = {k for k, v in as_json.items() if isinstance(v, int | float)}
    assert len(families) == len(numeric) + 1  # every numeric figure, and the info


def test_the_text_shows_stored_against_original_bytes(tmp_path: Path) -> None:
    root = _cache_with_counts(tmp_path)
    as_json = json.loads(_cli("stats", "--json", f"--cache-dir={root}").stdout)
    text = _cli("stats", f"--cache-dir={root}").stdout.splitlines()
    (stored,) = [line for line in text if line.startswith("bytes stored ")]
    (original,) = [line for line in text if line.startswith("bytes original ")]
    ratio = as_json["bytes_original"] / as_json["bytes_stored"]
    assert stored.split()[2:] == [str(as_json["bytes_stored"]), "B"] and ratio > 5
    assert original.endswith(f" ({ratio:.2f}x the bytes stored)"), original


def test_zero_sets_counters_back_but_not_what_the_cache_holds(tmp_path: Path) -> None:
    root = _cache_with_counts(tmp_path)
    before = json.loads(_cli("stats", "--json", f"--cache-dir={root}").stdout)
    done = _cli("stats", "--zero", f"--cache-dir={root}")
    assert done.returncode == 0 and done.stdout == f"statistics zeroed in {root}\n"
    after = json.loads(_cli("stats", "--json", f"--cache-dir={root}").stdout)
    assert (after["hits"], after["misses"], after["stores"], after["remote_hits"]) == (0, 0, 0, 0)
    assert after["time_saved"] == 0 and after["bytes_stored"] == 0
    assert (after["entries"], after["size"]) == (before["entries"], before["size"]) != (0, 0)
    # With a format: the counts from before, printed, then zeroed.
    s = Store(root)
    s.record(hits=7)
    s.close()
    shown = _cli("stats", "--zero", "--json", f"--cache-dir={root}")
    assert json.loads(shown.stdout)["hits"] == 7
    assert json.loads(_cli("stats", "--json", f"--cache-dir={root}").stdout)["hits"] == 0
    bad = _cli("stats", "--format=xml", f"--cache-dir={root}")
    assert bad.returncode == 2 and bad.stderr == (
        "cached-dist: error: stats: --format takes text, json, prometheus, not 'xml'\n"
    )
