"""Store micro-benchmark: put and get+materialize latency and throughput.

Small (4 KiB) and large (4 MiB) blobs, in one process and in 8 processes sharing one store,
plus the cost a fully cached link pays in a fresh process (import, open, 33 hits, record).
Run: python -m benchmarks.store_bench [--quick] [--dir DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from store import Store

SIZES = {"4 KiB": 4 << 10, "4 MiB": 4 << 20}


def _worker(root: str, size: int, ops: int, wid: int, barrier: Barrier, out: Any) -> None:
    """Put `ops` distinct blobs, then read each back through get + materialize."""
    work = Path(root).parent / f"bench-{wid}"
    work.mkdir(exist_ok=True)
    s = Store(root, max_size=1 << 40, warn=lambda m: print(m, file=sys.stderr))
    rnd = os.urandom(size)
    srcs = []
    for i in range(ops):
        src = work / f"src{i}"
        src.write_bytes(i.to_bytes(8, "little") + wid.to_bytes(4, "little") + rnd[12:])
        srcs.append(str(src))
    result: dict[str, Any] = {}
    for phase in ("put", "get"):
        barrier.wait()
        lat: list[float] = []
        start = time.perf_counter()
        for i in range(ops):
            key = f"{wid:04x}{i:08x}"
            t0 = time.perf_counter()
            if phase == "put":
                ok = s.put(key, {"obj": srcs[i]}, duration=1.0, toolchain="b", key_version=1)
            else:
                m = s.get(key)
                ok = m is not None and s.materialize(m, {"obj": str(work / "out.o")})
            lat.append(time.perf_counter() - t0)
            assert ok, (phase, key)
        result[phase] = (start, time.perf_counter(), lat)
    out.put(result)


def run(root: str, size: int, ops: int, procs: int) -> dict[str, dict[str, float]]:
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(procs)
    out: Any = ctx.Queue()
    workers = [
        ctx.Process(target=_worker, args=(root, size, ops, w, barrier, out)) for w in range(procs)
    ]
    for p in workers:
        p.start()
    results = [out.get() for _ in workers]
    for p in workers:
        p.join()
    summary: dict[str, dict[str, float]] = {}
    for phase in ("put", "get"):
        lats = sorted(x for r in results for x in r[phase][2])
        wall = max(r[phase][1] for r in results) - min(r[phase][0] for r in results)
        n = len(lats)
        summary[phase] = {
            "p50_ms": statistics.median(lats) * 1e3,
            "p95_ms": lats[min(n - 1, int(n * 0.95))] * 1e3,
            "ops_s": n / wall,
            "mb_s": n * size / wall / 1e6,
        }
    return summary


_COLD = """
import time, sys
t0 = time.perf_counter()
import store
t1 = time.perf_counter()
s = store.Store(sys.argv[1])
t2 = time.perf_counter()
hits = 0
for i in range(33):
    m = s.get(f"c01d{i:04x}")
    hits += m is not None and s.materialize(m, {"obj": f"{sys.argv[2]}/o{i}.o"})
t3 = time.perf_counter()
s.record(hits=hits)
t4 = time.perf_counter()
assert hits == 33
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3)
"""


def cold_link(base: Path, repeats: int) -> dict[str, float]:
    """A fully cached 33-job link in a fresh interpreter: where its ~100 ms budget goes."""
    root = str(base / "cold")
    out = base / "cold-out"
    out.mkdir()
    s = Store(root)
    src = base / "cold-src"
    for i in range(33):
        src.write_bytes(os.urandom(50_000))
        s.put(f"c01d{i:04x}", {"obj": str(src)}, duration=1.0, toolchain="b", key_version=1)
    s.close()
    rows: list[list[float]] = []
    walls: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = subprocess.run(
            [sys.executable, "-c", _COLD, root, str(out)],
            capture_output=True,
            text=True,
            check=True,
        )
        walls.append(time.perf_counter() - t0)
        rows.append([float(x) for x in res.stdout.split()])
    best = [min(col) * 1e3 for col in zip(*rows, strict=True)]
    base_py = min(_time([sys.executable, "-c", "pass"]) for _ in range(repeats))
    return {
        "import_ms": best[0],
        "open_ms": best[1],
        "hits_ms": best[2],
        "record_ms": best[3],
        "process_ms": min(walls) * 1e3,
        "bare_python_ms": base_py * 1e3,
    }


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer operations (smoke run)")
    parser.add_argument("--dir", help="where to create the scratch stores (default: a temp dir)")
    args = parser.parse_args(argv)
    ops = {"4 KiB": 50 if args.quick else 1000, "4 MiB": 4 if args.quick else 24}
    base = Path(tempfile.mkdtemp(prefix="store-bench-", dir=args.dir))
    try:
        print(f"store micro-benchmark, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
        print(f"scratch: {base}\n")
        print("| blob | procs | op | ops/proc | p50 ms | p95 ms | ops/s | MB/s |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for label, size in SIZES.items():
            for procs in (1, 8):
                root = base / f"s-{size}-{procs}" / "c"
                root.parent.mkdir()
                summary = run(str(root), size, ops[label], procs)
                for phase, r in summary.items():
                    op = "put" if phase == "put" else "get+materialize"
                    print(
                        f"| {label} | {procs} | {op} | {ops[label]} | {r['p50_ms']:.3f} |"
                        f" {r['p95_ms']:.3f} | {r['ops_s']:.0f} | {r['mb_s']:.1f} |"
                    )
                shutil.rmtree(root.parent)
        cold = cold_link(base, 3 if args.quick else 10)
        print("\nfully cached 33-job link (50 KB objects) in a fresh process, best of runs:")
        for name, value in cold.items():
            print(f"  {name}: {value:.1f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
