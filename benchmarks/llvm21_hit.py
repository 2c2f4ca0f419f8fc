"""Full-hit link time on a real LLVM 21 (ziglang wheel): a regular archive, whose members
LLD 21 names but does not write (cached-dist reads them from the archive), against a thin
archive. Interleaved medians, calc (5 jobs). Run: .venv/bin/python -m benchmarks.llvm21_hit
"""

import statistics
import tempfile
import time
from pathlib import Path

from tests.llvm21 import Llvm21
from tests.toolchain import run

ROUNDS = 15


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="llvm21-hit."))
    tc = Llvm21(root / "tc")
    projects = {a: tc.build("calc", root / a, a) for a in ("regular", "thin")}
    cache = f"--cache-dir={root / 'cache'}"
    for p in projects.values():  # fill the cache
        assert run(tc.link_command(p, "warm", [cache]), p.dir, env=tc.env).returncode == 0
    times: dict[str, list[float]] = {a: [] for a in projects}
    for _ in range(ROUNDS):
        for archive, p in projects.items():
            started = time.perf_counter()
            done = run(tc.link_command(p, "app", [cache]), p.dir, env=tc.env)
            times[archive].append(time.perf_counter() - started)
            assert done.returncode == 0 and "5 hits, 0 compiled" in done.stderr, done.stderr
    for archive, ts in times.items():
        print(f"{archive}: median {1000 * statistics.median(ts):.0f} ms over {ROUNDS} links")
    ratio = statistics.median(times["regular"]) / statistics.median(times["thin"])
    print(f"regular / thin: {ratio:.2f}")


if __name__ == "__main__":
    main()
