"""Compression of stored and sent objects (issue 43): bytes and the full-hit time, off vs on.

For each program: a cold link through cached-dist with a Redis tier (real redis-server on a
free loopback port) at --compression-level 0 and at the default (1), giving the bytes the
local store keeps and the bytes uploaded; a second "machine" (an empty local cache) served
from Redis, giving the bytes downloaded; then full local hits, the two levels interleaved
(the machine is shared: ratios of medians measured side by side, not absolute times), with
the paired differences' median and its 95% interval (serve_compare.paired), and full hits
from Redis the same way (each on an empty local cache: every value downloaded, decompressed
at level 1, checked and placed). Which placer served the hits is recorded (``placer``):
store/_link.c places compressed blobs itself when it was built with libzstd. Then the hits'
placing alone (``placing``), which is all the two levels' local hits do differently,
without the link's noise around it, and the remote hits' fetching and decoding alone
(``fetching``).
Run: python -m benchmarks.compression [--runs N] [--programs lua-regular,gen-300,leveldb]

Programs: floor_bench's (lua-regular, lua-thin, gen-300, gen-3000) and leveldb (db_bench,
built once by its own CMake build, benchmarks/harness/codebases.py, and reused). Results
are merged into benchmarks/results/compression.json by program.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .floor_bench import link_command, program_source
from .serve_compare import paired

HERE = Path(__file__).parent
LEVELS = (0, 1)

#: A program's link: (output, extra flags) -> the command, run where the program links.
Command = Callable[[str, list[str]], list[str]]


def cached_dist() -> str:
    return str(Path(sys.executable).parent / "cached-dist")


def program(name: str, work: Path) -> tuple[Path, Command]:
    """Where ``name`` links, and its link command."""
    if name == "leveldb":
        return leveldb(work)
    return program_source(name, work), lambda out, extra: link_command(name, out, extra)


def leveldb(work: Path) -> tuple[Path, Command]:
    """db_bench of leveldb, built by its own CMake build (once: the build and its captured
    link are kept under ``work`` and reused)."""
    from .harness.codebases import Build, LevelDB
    from .sources import ensure_packages

    saved, top = work / "leveldb-link.json", work / "leveldb"
    if saved.exists() and top.exists():
        kept = json.loads(saved.read_text())
        build = Build(root=Path(kept["root"]), cwd=Path(kept["cwd"]), link=tuple(kept["link"]),
                      top=Path(kept["top"]))  # fmt: skip
    else:
        ensure_packages(LevelDB.packages)
        build = LevelDB().build(top, work / "leveldb-build-cache")
        saved.write_text(json.dumps({"root": str(build.root), "cwd": str(build.cwd),
                                     "link": list(build.link), "top": str(build.top)}))  # fmt: skip
    return build.cwd, lambda out, extra: build.command(out, extra)


def placer() -> str:
    """Which placer serves this install's full hits of compressed blobs."""
    try:
        from store._link import HAS_ZSTD
    except ImportError:
        return "Python (the native placer is not built)"
    if HAS_ZSTD:
        return "native (store/_link.c), plain and compressed blobs"
    return "native for plain blobs, Python for compressed ones (built without libzstd)"


def link(command: Command, src: Path, out: str, args: list[str]) -> float:
    extra = [f"-fthinlto-distributor={cached_dist()}",
             "-Xthinlto-distributor=" + ",".join(["--quiet", *args])]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command(out, extra), cwd=src, check=True, capture_output=True)
    return time.perf_counter() - started


def stats(cache: Path) -> dict[str, float]:
    done = subprocess.run([cached_dist(), "stats", "--json", f"--cache-dir={cache}"],
                          check=True, capture_output=True, text=True)  # fmt: skip
    result: dict[str, float] = json.loads(done.stdout)
    return result


def placing(work: Path, rounds: int) -> dict[str, object]:
    """A full hit's placing alone, in this process, without the link around it: the
    program's objects (the plain store's blobs) put in a fresh store of each level, then all
    placed by Store.materialize_many (one process, no forked helper) into
    a fresh directory, ``rounds`` times, the configurations alternating: level 0 and level 1
    through this install's placer, and level 1 with the native placer off (compressed blobs
    decompressed in Python, as before store/_link.c had libzstd). Milliseconds, medians."""
    from store import Store
    from store import placing as where

    objects = sorted(p for p in (work / "cache-a-0" / "blobs").rglob("*")
                     if p.is_file() and len(p.name) == 30)  # fmt: skip
    configs = {"level0": 0, "level1": 1, "level1_python": 1}
    stores: dict[str, tuple[Any, list[Any]]] = {}
    for config, level in configs.items():
        root = work / f"place-{config}"
        shutil.rmtree(root, ignore_errors=True)
        s = Store(str(root / "c"), compression_level=level)
        for i, p in enumerate(objects):
            assert s.put(f"{i:08x}", {"o": str(p)}, duration=1.0, toolchain="t", key_version=1)
        stores[config] = (s, [s.get(f"{i:08x}") for i in range(len(objects))])
    namespace = vars(where)  # placing's module globals: what place() calls
    native = namespace["native_copy_blobs"]
    times: dict[str, list[float]] = {config: [] for config in configs}
    for run in range(-1, rounds):  # run -1: untimed
        for config in list(configs)[:: 1 - 2 * (run % 2)]:
            s, manifests = stores[config]
            out = work / f"place-{config}" / f"out-{run}"
            out.mkdir()
            plans = [(m, {"o": str(out / f"{i}.o")}) for i, m in enumerate(manifests)]
            namespace["native_copy_blobs"] = None if config.endswith("python") else native
            try:
                started = time.perf_counter()
                took = s.materialize_many(plans)
                elapsed = time.perf_counter() - started
            finally:
                namespace["native_copy_blobs"] = native
            assert None not in took, config
            if run >= 0:
                times[config].append(1000 * elapsed)
    for config in configs:
        shutil.rmtree(work / f"place-{config}", ignore_errors=True)
    result: dict[str, object] = {"outputs": len(objects), "rounds": rounds}
    for config in configs:
        result[f"ms_{config}"] = round(statistics.median(times[config]), 2)
    diff = paired(times["level1"], times["level0"])
    result["diff_ms"] = {k: round(v, 2) for k, v in diff.items()}
    return result


#: The remote hits' configurations: (values' level, local store's level). The third, values
#: compressed but the local store plain, tells the two levels' costs apart.
REMOTE: dict[int | str, tuple[int, int]] = {0: (0, 0), 1: (1, 1), "1-plain-local": (1, 0)}


def remote_hits(
    command: Command, src: Path, work: Path, runs: int, servers: dict[int, Any]
) -> dict[int | str, list[float]]:
    """Full hits from Redis, the configurations interleaved and the order alternating: each
    link on a machine with an empty local cache, served every job by the level's
    redis-server (its values written by the cold link at that level). Seconds per link."""
    times: dict[int | str, list[float]] = {config: [] for config in REMOTE}
    for run in range(-1, runs):  # run -1: one untimed hit of each
        for config in list(REMOTE)[:: 1 - 2 * (run % 2)]:
            level, local = REMOTE[config]
            cache = work / f"cache-r-{config}"
            shutil.rmtree(cache, ignore_errors=True)
            took = link(command, src, "app-remote", [
                f"--cache-dir={cache}", f"--remote-storage={servers[level].url}",
                f"--compression-level={level}", f"--local-compression-level={local}",
            ])  # fmt: skip
            s = stats(cache)  # waits for the promotion written behind the link
            assert s["remote_hits"] == s["hits"] > 0 and s["misses"] == 0, s
            if run >= 0:
                times[config].append(took)
    return times


def fetching(servers: dict[int, Any], rounds: int) -> dict[str, object]:
    """A remote full hit's own work without the link around it: every value the cold link
    uploaded, fetched in one round trip (RedisStorage.get_many, as a link's lookup does) and
    decoded (store.entry.decode: decompressed where compressed, every byte checked against
    its digest), ``rounds`` times, the levels alternating. Milliseconds, medians."""
    import redis

    from store import entry
    from store.remote.redis import VALUE, RedisStorage

    keys: dict[int, list[str]] = {}
    for level, server in servers.items():
        client = redis.Redis.from_url(server.url)
        keys[level] = sorted(k.decode().removeprefix(VALUE)
                             for k in client.scan_iter(f"{VALUE}*"))  # fmt: skip
        client.close()
    times: dict[int, list[float]] = {level: [] for level in LEVELS}
    for run in range(-1, rounds):  # run -1: untimed
        for level in LEVELS[:: 1 - 2 * (run % 2)]:
            tier = RedisStorage(servers[level].url, connect_timeout=5, timeout=60)
            started = time.perf_counter()
            values = tier.get_many(keys[level])
            for key, value in zip(keys[level], values, strict=True):
                assert value is not None and entry.decode(value, key)
            elapsed = time.perf_counter() - started
            if run >= 0:
                times[level].append(1000 * elapsed)
    result: dict[str, object] = {"values": len(keys[1]), "rounds": rounds}
    for level in LEVELS:
        result[f"ms_level{level}"] = round(statistics.median(times[level]), 2)
    diff = paired(times[1], times[0])
    result["diff_ms"] = {k: round(v, 2) for k, v in diff.items()}
    return result


def measure(name: str, work: Path, runs: int) -> dict[str, object]:
    from tests.servers import start_redis

    src, command = program(name, work)
    load = os.getloadavg()[0]
    result: dict[str, object] = {"program": name, "placer": placer()}
    servers = {level: start_redis(work / f"redis-{level}") for level in LEVELS}
    try:
        for level in LEVELS:
            a, b = work / f"cache-a-{level}", work / f"cache-b-{level}"
            for d in (a, b):
                shutil.rmtree(d, ignore_errors=True)
            common = [
                f"--compression-level={level}",
                f"--local-compression-level={level}",
                f"--remote-storage={servers[level].url}",
            ]
            link(command, src, "app-a", [f"--cache-dir={a}", *common])
            link(command, src, "app-b", [f"--cache-dir={b}", *common])
            sa, sb = stats(a), stats(b)
            result[f"level{level}"] = {
                "jobs": sa["misses"], "stored": sa["bytes_stored"],
                "original": sa["bytes_original"], "uploaded": sa["remote_bytes_uploaded"],
                "downloaded": sb["remote_bytes_downloaded"], "remote_hits": sb["remote_hits"],
            }  # fmt: skip
        remote = remote_hits(command, src, work, runs, servers)
        result["fetching"] = fetching(servers, max(runs, 21))
    finally:
        for server in servers.values():
            server.stop()
    times: dict[int, list[float]] = {level: [] for level in LEVELS}
    # Interleaved, both levels see the same load; the order alternates (a link's aftermath,
    # its deferred writes, falls on the link after it). Run -1: one untimed hit of each.
    for run in range(-1, runs):
        for level in LEVELS[:: 1 - 2 * (run % 2)]:
            cache = work / f"cache-a-{level}"
            args = [
                f"--cache-dir={cache}",
                f"--compression-level={level}",
                f"--local-compression-level={level}",
            ]
            took = link(command, src, "app-hit", args)
            if run >= 0:
                times[level].append(took)
    for level in LEVELS:
        result[f"hit_ms_level{level}"] = round(1000 * statistics.median(times[level]), 1)
        result[f"remote_hit_ms_level{level}"] = round(1000 * statistics.median(remote[level]), 1)
    result["hit_ms_runs"] = {f"level{level}": [round(1000 * t, 1) for t in times[level]]
                             for level in LEVELS}  # fmt: skip
    result["remote_hit_ms_level1_plain_local"] = round(
        1000 * statistics.median(remote["1-plain-local"]), 1
    )
    result["remote_hit_ms_runs"] = {f"level{config}": [round(1000 * t, 1) for t in remote[config]]
                                    for config in REMOTE}  # fmt: skip
    if runs >= 2:  # level 1 minus level 0, link by link
        diff = paired([1000 * t for t in times[1]], [1000 * t for t in times[0]])
        result["hit_diff_ms"] = {k: round(v, 1) for k, v in diff.items()}
        diff = paired([1000 * t for t in remote[1]], [1000 * t for t in remote[0]])
        result["remote_hit_diff_ms"] = {k: round(v, 1) for k, v in diff.items()}
        parts: dict[str, tuple[int | str, int | str]] = {
            "values": ("1-plain-local", 0),  # compressed values, both stores plain
            "local": (1, "1-plain-local"),  # compressed values, the local store compressing
        }
        for name, (x, y) in parts.items():
            diff = paired([1000 * t for t in remote[x]], [1000 * t for t in remote[y]])
            result[f"remote_hit_diff_ms_{name}"] = {k: round(v, 1) for k, v in diff.items()}
    result["placing"] = placing(work, max(runs, 21))
    off, on = result["level0"], result["level1"]
    assert isinstance(off, dict) and isinstance(on, dict)
    result["stored_ratio"] = round(off["stored"] / on["stored"], 2)
    result["sent_ratio"] = round(off["uploaded"] / on["uploaded"], 2)
    result["hit_cost"] = round(result["hit_ms_level1"] / result["hit_ms_level0"], 3)  # type: ignore[operator]
    remote_ms = (result["remote_hit_ms_level1"], result["remote_hit_ms_level0"])
    result["remote_hit_cost"] = round(remote_ms[0] / remote_ms[1], 3)  # type: ignore[operator]
    result["runs"] = runs
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    result["load"] = f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after"
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--programs", default="lua-regular,gen-300")
    parser.add_argument("--work", type=Path, default=HERE / "work" / "compression")
    args = parser.parse_args(argv)
    out = HERE / "results" / "compression.json"
    results: list[dict[str, object]] = json.loads(out.read_text()) if out.exists() else []
    for name in args.programs.split(","):
        work = args.work / name
        work.mkdir(parents=True, exist_ok=True)
        measured = measure(name, work, args.runs)
        print(json.dumps(measured), flush=True)
        results = [r for r in results if r.get("program") != name] + [measured]
        out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
