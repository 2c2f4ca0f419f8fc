"""Remote full hits, this checkout against a revision, side by side: links that compile nothing
but write what the remote served into an empty local store (the detached writer's case).

    python -m benchmarks.remote_compare --base REV [--modules 300] [--links 60]

A generated program of ``--modules`` modules (benchmarks/remote.py ``synthetic``) is linked
once through this checkout's cached-dist with a redis-server (started here on loopback) as
its remote tier, and its job file kept (benchmarks/remote.py ``capture``). Then ``--links``
rounds: in each, this checkout and REV (its tree from benchmarks/serve_compare.py ``export``)
each serve that job file from the remote into an empty local store, the order alternating;
after each link, the writes it left behind are waited for (``stats`` settles them), so no
link shares the machine with the one before it. The link's own wall time is compared: the
paired differences (this checkout minus REV), as serve_compare gives them. Saved to
benchmarks/results/remote_compare.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time

from .cache_link import byte_compile, cached_dist
from .floor_bench import RESULTS
from .remote import LLVM_BIN, Redis, capture, synthetic
from .serve_compare import described, export, paired
from .sources import WORK, machine
from .timing import timed

ROOT = WORK / "remote_compare"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.remote_compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--modules", type=int, default=300)
    parser.add_argument("--links", type=int, default=60, help="rounds (pairs of links)")
    args = parser.parse_args(argv)
    if args.links < 2:
        parser.error("--links must be at least 2")
    byte_compile()
    ROOT.mkdir(parents=True, exist_ok=True)
    base = export(args.base)
    redis = Redis(ROOT / "redis")
    try:
        src, objects = synthetic(ROOT / "program", args.modules)
        link = [str(LLVM_BIN / "clang"), "-flto=thin", "-O2", "-fuse-ld=lld", *objects, "-o",
                "app"]  # fmt: skip
        remote = f"--remote-storage={redis.url}"
        shutil.rmtree(ROOT / "first", ignore_errors=True)  # compiled now: uploaded to this server
        job_file = capture(src, link, ROOT / "saved", [f"--cache-dir={ROOT / 'first'}", remote])
        trees = {"this checkout": cached_dist(), base.name: base.launcher}
        times: dict[str, list[float]] = {name: [] for name in trees}
        for i in range(args.links):
            order = list(trees.items()) if i % 2 == 0 else list(trees.items())[::-1]
            for name, launcher in order:
                cache = ROOT / "cache"
                shutil.rmtree(cache, ignore_errors=True)
                command = [launcher, f"--cache-dir={cache}", "--quiet", remote, str(job_file)]
                times[name].append(timed(command, src))
                done = subprocess.run([launcher, "stats", "--json", f"--cache-dir={cache}"],
                                      capture_output=True, text=True, check=True)  # fmt: skip
                counts = json.loads(done.stdout)
                if counts["remote_hits"] != counts["hits"] or counts["misses"]:
                    raise RuntimeError(f"{name}: not a remote full hit: {counts}")
    finally:
        redis.stop()
    new, old = times["this checkout"], times[base.name]
    result = {
        "benchmark": "remote_compare", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine(), "base": args.base, "modules": args.modules, "links": args.links,
        "link_ms": paired([1000 * t for t in new], [1000 * t for t in old]),
        "medians_ms": {name: 1000 * statistics.median(t) for name, t in times.items()},
    }  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "remote_compare.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.modules} modules, remote full hit into an empty local store: this checkout "
          f"minus {args.base}, {args.links} pairs")  # fmt: skip
    print(f"  link       {described(result['link_ms'])}")
    for name, median in result["medians_ms"].items():
        print(f"  {name}: {median:.1f} ms (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
