"""Shard canonicalization throughput on a realistic multi-module DTLTO link.

Builds a program of N modules (default 40) that call across each other, puts
all but ``main`` in a regular static archive, captures the shards LLD sends
its distributor, then times ``canonical_shard`` and the bare bitstream walk
over all of them.  Run with ``python -m benchmarks.shard_bench``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cached_dist.bitcode import native
from cached_dist.bitcode.bitstream import EOF, BitstreamCursor
from cached_dist.bitcode.shard import canonical_shard
from tests import shardgen


def _walk(data: bytes) -> None:
    cur = BitstreamCursor(data)
    while cur.advance() != EOF:
        pass


def _time(fn: Callable[[], None], repeat: int) -> float:
    """Best-of-``repeat`` seconds for one call of ``fn`` (least noisy on a shared box)."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return min(runs)


def main(argv: list[str] | None = None) -> int:
    """Build, capture, measure, print a Markdown-ready summary."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--modules", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    if not shardgen.have_toolchain():
        print(f"skipped: {shardgen.TOOLCHAIN_MISSING_REASON}", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "src"
        sources = shardgen.many_module_program(args.modules)
        shardgen.write_sources(d, sources)
        objs = shardgen.compile_thin(d, sorted(sources))
        lib = [o for o in objs if o != "main.o"]
        shardgen.archive(d, "libmods.a", lib)
        cap = shardgen.dtlto_capture(d, ["main.o", "libmods.a"], Path(tmp) / "cap")
    jobs = [(j.shard, j.module_digest()) for j in cap.jobs]
    total = sum(len(s) for s, _ in jobs)
    sizes = sorted(len(s) for s, _ in jobs)
    results = [canonical_shard(s, f) for s, f in jobs]
    exact = sum(r.exact for r in results)

    def canon_all() -> None:
        for s, f in jobs:
            canonical_shard(s, f)

    def walk_all() -> None:
        for s, _ in jobs:
            _walk(s)

    t_canon = _time(canon_all, args.repeat)
    t_walk = _time(walk_all, args.repeat)
    mb = total / 1e6
    if native.NATIVE:
        same = sum(native.canonical_digest(s, f)[:2] == (r.digest, r.exact)
                   for (s, f), r in zip(jobs, results, strict=True))  # fmt: skip

        def native_all() -> None:
            for s, f in jobs:
                native.canonical_digest(s, f)

        t_native = _time(native_all, args.repeat)
        print(f"native canonical digest: {t_native * 1e3:.2f} ms for all, "
              f"{t_native / len(jobs) * 1e6:.1f} us/shard, {mb / t_native:.1f} MB/s, "
              f"{t_canon / t_native:.0f}x the reference; "
              f"same digest on {same}/{len(jobs)}")  # fmt: skip
    else:
        print("native canonical digest: the C extension is not built")
    print(f"shards: {len(jobs)} ({exact} exact), {total} bytes total,")
    print(f"  size min/median/max: {sizes[0]}/{statistics.median(sizes):.0f}/{sizes[-1]} bytes")
    print(
        f"canonical_shard: {t_canon * 1e3:.2f} ms for all, "
        f"{t_canon / len(jobs) * 1e6:.0f} us/shard, {mb / t_canon:.2f} MB/s"
    )
    print(f"bitstream walk:  {t_walk * 1e3:.2f} ms for all, {mb / t_walk:.2f} MB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
