"""Two warm servers side by side, this checkout against a revision: the whole link as the
user waits for it, and the distributor's own share of it.

    python -m benchmarks.serve_compare --base REV [--program gen-300] [--links 300]
                                       [--gap 0.03] [--copies] [--plain]

REV's tree (``git archive``) goes to benchmarks/work/serve_compare/REV, where its C
extensions and client are built in place. Each tree runs a ``cached-dist serve`` of its own
on a socket of its own, with a cache of its own, warmed by two links (the first compiled by
that tree's cached-dist, the second served). Then ``--links`` rounds: in each, one link
through each server, the order alternating, ``--gap`` seconds after each. Every link is
``floor_bench.link_command`` with the client as the distributor, under ``timeshim.c``: the
distributor's own time, and the ``clang`` command's wall time, LLD's time included (the
whole link). A change to the server can take time off the first and put it on the second:
work moved out of the link lands on an LLD that is finishing it (docs/design.md, "After the
link"). Printed, and saved to benchmarks/results/serve_compare.json: the paired differences
(this checkout minus REV), their mean with its standard error and their median. Every timed
link must be served by its server, or the run fails.

``--plain``: no servers; each link runs its tree's cached-dist itself (a link before the
server is up, or with ``CACHED_DIST_SERVER=0``), and every timed link must be a full hit.

Programs: those of floor_bench (lua-regular, lua-thin, gen-300, gen-3000), built where
floor_bench builds them (reused if there). ``--copies``: outputs copied, not hard-linked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .cache_link import ROOT as CHECKOUT
from .cache_link import byte_compile, cached_dist
from .floor_bench import (
    HERE,
    PROGRAMS,
    RESULTS,
    launch_server,
    link_command,
    program_source,
)
from .sources import WORK, machine
from .timing import timed

ROOT = WORK / "serve_compare"


def paired(new: list[float], old: list[float]) -> dict[str, float]:
    """The differences ``new - old``, pair by pair: their mean, its standard error, their
    median with its 95% confidence interval, and how many pairs.

    Link times have long tails (a link now and then takes several times the median), which
    widen the mean's error far more than the median's: the interval is the distribution-free
    one, between the order statistics a binomial count of pairs puts either side of it."""
    if len(new) != len(old) or len(new) < 2:
        raise ValueError("need two lists of the same length, at least 2")
    diffs = sorted(a - b for a, b in zip(new, old, strict=True))
    n = len(diffs)
    below = max(0, math.floor(n / 2 - 1.96 * math.sqrt(n) / 2))  # pairs under the interval
    return {"mean": statistics.fmean(diffs), "se": statistics.stdev(diffs) / math.sqrt(n),
            "median": statistics.median(diffs), "median_low": diffs[below],
            "median_high": diffs[n - 1 - below], "pairs": float(n)}  # fmt: skip


def described(d: dict[str, float]) -> str:
    """One line of :func:`paired`'s figures, as the comparisons print them."""
    return (f"mean {d['mean']:+.2f} +- {d['se']:.2f} ms, median {d['median']:+.2f} ms, "
            f"95% [{d['median_low']:+.2f}, {d['median_high']:+.2f}]")  # fmt: skip


class Tree:
    """One cached-dist: its launcher, client, server and cache."""

    def __init__(self, name: str, launcher: str, client: Path) -> None:
        self.name = name
        self.launcher = launcher
        self.client = client
        self.dir = ROOT / "runs" / name.replace(" ", "-")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.cache = self.dir / "cache"
        self.own = self.dir / "own.log"
        self.log = self.dir / "serve.log"
        self.env = {**os.environ, "CACHED_DIST_SOCKET": str(self.dir / "s.sock")}
        self.server: subprocess.Popen[bytes] | None = None
        self.walls: list[float] = []

    def start(self) -> None:
        self.server = launch_server(self.launcher, self.log, self.env)

    def misses(self) -> int:
        """Misses so far in this tree's cache (``stats``)."""
        done = subprocess.run([self.launcher, "stats", "--json", f"--cache-dir={self.cache}"],
                              capture_output=True, text=True, check=True)  # fmt: skip
        return int(json.loads(done.stdout)["misses"])

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(30)

    def served(self) -> int:
        return self.log.read_text().count(": served ")

    def link(self, program: str, src: Path, shim: Path, extra: list[str], plain: bool) -> float:
        """One link through this tree's server (``plain``: its cached-dist alone, no server);
        its wall time."""
        args = [str(self.own), *([] if plain else [str(self.client)]), self.launcher, "--quiet",
                f"--cache-dir={self.cache}", *extra]  # fmt: skip
        cmd = link_command(
            program,
            "app-compare",
            [f"-fthinlto-distributor={shim}", "-Xthinlto-distributor=" + ",".join(args)],
        )
        return timed(cmd, src, self.env)

    def own_times(self) -> list[float]:
        return [float(x) for x in self.own.read_text().split()]


def export(rev: str) -> Tree:
    """REV's tree with its extensions and client built in place (reused if built before)."""
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=CHECKOUT,
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    dest = ROOT / sha[:12]
    launcher = dest / "cached-dist"
    if not launcher.exists():
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", sha], cwd=CHECKOUT, capture_output=True,
                                 check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=dest,
                       check=True, capture_output=True)  # fmt: skip
        byte_compile(
            tuple(dest / p for p in ("cached_dist", "store", "procs") if (dest / p).is_dir())
        )
        launcher.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(dest)!r})\n"
                            "from cached_dist.cli import run\nrun()\n")  # fmt: skip
        launcher.chmod(0o755)
    return Tree(f"base-{sha[:12]}", str(launcher), dest / "cached_dist/serve/cached-dist-client")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.serve_compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--program", default="gen-300", choices=PROGRAMS)
    parser.add_argument("--links", type=int, default=300, help="rounds (pairs of links)")
    parser.add_argument("--gap", type=float, default=0.03, help="seconds after each link")
    parser.add_argument("--copies", action="store_true", help="copy outputs, no --hard-link")
    parser.add_argument("--plain", action="store_true",
                        help="no server: each link runs the tree's cached-dist itself")  # fmt: skip
    args = parser.parse_args(argv)
    if args.links < 2:
        parser.error("--links must be at least 2")
    byte_compile()
    ROOT.mkdir(parents=True, exist_ok=True)
    shim = ROOT / "timeshim"
    subprocess.run(["cc", "-O2", "-o", str(shim), str(HERE / "timeshim.c")], check=True)
    src = program_source(args.program, WORK / "floor_bench" / args.program)
    old = export(args.base)
    new = Tree("this checkout", cached_dist(), CHECKOUT / "cached_dist/serve/cached-dist-client")
    extra = [] if args.copies else ["--hard-link"]
    trees = (new, old)
    plain = args.plain
    warmed: dict[str, int] = {}
    try:
        for tree in trees:
            if not plain:
                tree.start()
            for _ in range(2):  # the first compiles into its cache; the second is served
                tree.link(args.program, src, shim, extra, plain)
            if not plain and tree.served() != 1:
                raise RuntimeError(f"{tree.name}: the warm-up link was not served: "
                                   f"{tree.log.read_text()}")  # fmt: skip
            warmed[tree.name] = tree.misses()
            tree.own.write_text("")
        for i in range(args.links):
            for tree in trees if i % 2 == 0 else trees[::-1]:
                tree.walls.append(tree.link(args.program, src, shim, extra, plain))
                time.sleep(args.gap)
    finally:
        for tree in trees:
            tree.stop()
    for tree in trees:
        if len(tree.own_times()) != args.links or tree.misses() != warmed[tree.name]:
            raise RuntimeError(f"{tree.name}: not every timed link was a full hit")
        if not plain and tree.served() != 1 + args.links:
            raise RuntimeError(f"{tree.name}: not every timed link was served by its server")
    result = {
        "benchmark": "serve_compare", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine(), "base": args.base, "program": args.program,
        "links": args.links, "gap_s": args.gap, "hard_link": not args.copies, "plain": plain,
        "own_ms": paired([1000 * t for t in new.own_times()], [1000 * t for t in old.own_times()]),
        "whole_link_ms": paired([1000 * t for t in new.walls], [1000 * t for t in old.walls]),
        "medians_ms": {tree.name: {"own": 1000 * statistics.median(tree.own_times()),
                                   "whole link": 1000 * statistics.median(tree.walls)}
                       for tree in trees},
    }  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "serve_compare.json").write_text(json.dumps(result, indent=2) + "\n")
    how = "copies" if args.copies else "--hard-link"
    print(
        f"{args.program}, {'no server' if plain else 'warm server'}, {how}: "
        f"this checkout minus {args.base}, "
        f"{args.links} pairs, {args.gap:g} s between links"
    )
    for label, key in (("own time", "own_ms"), ("whole link", "whole_link_ms")):
        print(f"  {label:10s} {described(result[key])}")
    for name, m in result["medians_ms"].items():
        print(f"  {name}: own {m['own']:.2f} ms, whole link {m['whole link']:.1f} ms (medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
