"""The native shard decoder against an earlier build of itself, side by side in one process.

    python -m benchmarks.native_compare [--base REV] [--rounds N]

Builds ``cached_dist/bitcode/_shard.c`` as it is and as it was at REV (default 7e6c4c0, the
commit before issue 14's second session) with the same compiler command, checks that both
give the same canonical text for every shard ``benchmarks.floor_bench`` captured (run it
first), then times both, interleaved, on those shards: MB of shard bytes per CPU second,
best of N rounds, with module paths left unresolved and with a content digest per path (what
a link does). Results: benchmarks/results/native_compare.json.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from .sources import WORK, machine

ROOT = Path(__file__).parent.parent
SOURCE = "cached_dist/bitcode/_shard.c"


def build(source: str, out: Path) -> ModuleType:
    """Compiles ``source`` (C text) into ``out`` and loads it."""
    c = out.with_suffix(".c")
    c.write_text(source)
    include = sysconfig.get_paths()["include"]
    subprocess.run(["cc", "-O2", "-std=c99", "-shared", "-fPIC", f"-I{include}", str(c), "-o",
                    str(out)], check=True)  # fmt: skip
    spec = importlib.util.spec_from_file_location("_shard", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.native_compare", description=__doc__
    )
    parser.add_argument("--base", default="7e6c4c0")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    shards = [p.read_bytes() for p in sorted((WORK / "floor_bench").glob("*/shards/*.thinlto.bc"))]
    if not shards:
        print("no captured shards: run python -m benchmarks.floor_bench first", file=sys.stderr)
        return 1
    old_source = subprocess.run(["git", "show", f"{args.base}:{SOURCE}"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        builds = {"base": build(old_source, Path(tmp) / "base.so"),
                  "now": build((ROOT / SOURCE).read_text(), Path(tmp) / "now.so")}  # fmt: skip
        memo: dict[str, str] = {}

        def per_path(path: str) -> str:
            found = memo.get(path)
            if found is None:
                found = memo[path] = hashlib.md5(
                    path.encode("utf-8", "surrogateescape")
                ).hexdigest()
            return found

        lookups: dict[str, Callable[[str], str | None]] = {"unresolved": lambda p: None,
                                                           "digest per path": per_path}  # fmt: skip
        total = sum(map(len, shards))
        results: dict[str, dict[str, float]] = {}
        for name, lookup in lookups.items():
            for s in shards:  # the same canonical text before any timing means something
                if builds["base"].canonical_body(s, lookup) != builds["now"].canonical_body(
                    s, lookup
                ):
                    print(f"the two builds disagree on a shard ({name})", file=sys.stderr)
                    return 1
            best = dict.fromkeys(builds, 0.0)
            for _ in range(args.rounds):
                for which, module in builds.items():
                    started = time.process_time()
                    for s in shards:
                        module.canonical_body(s, lookup)
                    best[which] = max(best[which], total / 1e6 / (time.process_time() - started))
            results[name] = {**{f"{k} MB/s": v for k, v in best.items()},
                             "speedup": best["now"] / best["base"]}  # fmt: skip
            speedup = best["now"] / best["base"]
            print(f"{name}: {args.base} {best['base']:.1f} MB/s, now {best['now']:.1f} MB/s "
                  f"({speedup:.2f}x) on {len(shards)} shards, {total} bytes")  # fmt: skip
    report = {"benchmark": "native_compare", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": machine(), "base": args.base, "shards": len(shards), "bytes": total,
              "rounds": args.rounds, "results": results}  # fmt: skip
    out = Path(__file__).parent / "results" / "native_compare.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
