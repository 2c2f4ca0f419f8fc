"""The README's line as a user runs it, against LLD's cache and the warm server started by hand.

    python -m benchmarks.autostart_bench [--rounds N] [--programs lua-regular,gen-300]

Per program (floor_bench's: lua 5.4 with its regular liblua.a, the generated program of 300
modules in a regular archive), full hits timed interleaved round by round, the order
rotating, each the whole ``clang`` link as the user waits for it:

* LLD cache: ``-Wl,--thinlto-cache-dir`` warmed once (LLD then starts no distributor);
* plain line: ``-fthinlto-distributor=$(command -v cached-dist)``, what the README showed
  before the server started on first use (``cached-dist flags --no-server``);
* README line: the flags ``cached-dist flags`` prints, with the server the first link
  started (not this benchmark): on a socket of its own, with its default idle time;
* warm server: ``cached-dist serve`` started by hand and ``flags --server``, as before;
* warm server --hard-link: the same, outputs hard-linked.

Every configuration but LLD's has the same cache. The README line's program is a copy of
bin/cached-dist that appends a byte to a file at each interpreter start: none may start
during the timed rounds (every link served), or the run fails; the hand-started server's
``--verbose`` log must show each of its links served. Printed, and saved to
benchmarks/results/autostart_bench.json: medians, each link over the LLD cache link of its
round (median), and the README line against the hand-started server, pair by pair (mean
and standard error of the differences, and their median). The machine's load average is
saved with them: on a shared machine, compare ratios, not times across runs.
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

from .cache_link import byte_compile, cached_dist
from .floor_bench import LLVM_BIN, RESULTS, launch_server, link_command, program_source
from .serve_compare import paired
from .sources import WORK, machine
from .timing import interleave, timed

ROOT = WORK / "autostart_bench"
PROGRAMS = ("lua-regular", "gen-300")
LLD, PLAIN, README, WARM, WARM_HL = ("LLD cache", "plain line", "README line", "warm server",
                                     "warm server --hard-link")  # fmt: skip
CONFIGS = (LLD, PLAIN, README, WARM, WARM_HL)
#: bin/cached-dist, but noting each interpreter start (a byte) in $STARTS.
COUNTING = """#!{python}
import os
fd = os.open(os.environ["STARTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, b"x")
os.close(fd)
from cached_dist.cli import run
run()
"""


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Program:
    """One program's links: their commands, environments and the servers they use."""

    def __init__(self, program: str, work: Path) -> None:
        self.program = program
        self.src = program_source(program, work)
        self.cache, self.lld_cache = work / "cache", work / "lld-cache"
        for d in (self.cache, self.lld_cache):
            shutil.rmtree(d, ignore_errors=True)
        self.counting = work / "bin" / "cached-dist"
        self.counting.parent.mkdir(exist_ok=True)
        self.counting.write_text(COUNTING.format(python=sys.executable))
        self.counting.chmod(0o755)
        self.starts = work / "starts"
        self.starts.unlink(missing_ok=True)
        base = {k: v for k, v in os.environ.items() if k != "CACHED_DIST_NO_SERVER"}
        self.sockets = sockets = Path(f"/tmp/cd-autostart-{os.getpid()}-{program}")  # short
        sockets.mkdir(exist_ok=True)
        self.auto_env = {**base, "CACHED_DIST_SOCKET": str(sockets / "auto.sock"),
                         "STARTS": str(self.starts)}  # fmt: skip
        self.hand_env = {**base, "CACHED_DIST_SOCKET": str(sockets / "hand.sock")}
        self.hand_log = work / "serve.log"
        self.hand: subprocess.Popen[bytes] | None = None
        cache = f"--cache-dir={self.cache}"
        self.commands = {
            LLD: (self._link("app-lld", [f"-fthinlto-distributor={cached_dist()}",
                                         "-Xthinlto-distributor=--disable",
                                         f"-Wl,--thinlto-cache-dir={self.lld_cache}"]), base),
            PLAIN: (self._link("app-plain", self._flags(cached_dist(), "--no-server", cache)),
                    base),
            README: (self._link("app-readme", self._flags(str(self.counting), cache,
                                                          env=self.auto_env)), self.auto_env),
            WARM: (self._link("app-warm", self._flags(cached_dist(), "--server", cache)),
                   self.hand_env),
            WARM_HL: (self._link("app-warmhl", self._flags(cached_dist(), "--server", cache,
                                                           "--hard-link")), self.hand_env),
        }  # fmt: skip

    def _flags(self, program: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
        done = subprocess.run([program, "flags", "--cc", str(LLVM_BIN / "clang"), *args],
                              capture_output=True, text=True, env=env, check=True)  # fmt: skip
        return done.stdout.split()

    def _link(self, out: str, flags: list[str]) -> list[str]:
        return link_command(self.program, out, flags)

    def warm(self) -> None:
        """Fills the caches, lets the README line's first link start its server (the second
        is then served), starts the other server by hand."""
        say(f"{self.program}: cold link through cached-dist, then LLD's cache")
        for name in (PLAIN, LLD):
            cmd, env = self.commands[name]
            timed(cmd, self.src, env)
        cmd, env = self.commands[README]
        timed(cmd, self.src, env)  # no server: cached-dist links, then starts one
        deadline = time.monotonic() + 60
        while self._status(self.auto_env) != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.program}: no server started after the first link")
            time.sleep(0.05)
        self.hand = launch_server(cached_dist(), self.hand_log, self.hand_env)
        for cmd, env in self.commands.values():  # everything warm, every binary written once
            timed(cmd, self.src, env)
        binaries = {(self.src / f"app-{n}").read_bytes()
                    for n in ("lld", "plain", "readme", "warm", "warmhl")}  # fmt: skip
        if len(binaries) != 1:
            raise RuntimeError(f"{self.program}: the links gave different binaries")

    def _status(self, env: dict[str, str]) -> int:
        return subprocess.run([str(self.counting), "serve", "--status"], env=env,
                              capture_output=True).returncode  # fmt: skip

    def thunks(self) -> dict[str, Callable[[], float]]:
        def thunk(name: str) -> Callable[[], float]:
            cmd, env = self.commands[name]
            return lambda: timed(cmd, self.src, env)

        return {f"{self.program}: {n}": thunk(n) for n in CONFIGS}

    def interpreter_starts(self) -> int:
        return self.starts.stat().st_size if self.starts.exists() else 0

    def served_by_hand(self) -> int:
        return self.hand_log.read_text().count(": served ")

    def stop(self) -> None:
        subprocess.run([str(self.counting), "serve", "--stop"], env=self.auto_env,
                       capture_output=True)  # fmt: skip
        if self.hand is not None:
            self.hand.terminate()
            self.hand.wait(30)
            self.hand = None
        shutil.rmtree(self.sockets, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.autostart_bench",
                                     description=__doc__)  # fmt: skip
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    args = parser.parse_args(argv)
    byte_compile()
    programs = [Program(p, ROOT / p) for p in args.programs.split(",") if p]
    load_before = os.getloadavg()
    try:
        for p in programs:
            p.warm()
        starts = {p.program: p.interpreter_starts() for p in programs}
        served = {p.program: p.served_by_hand() for p in programs}
        thunks = {k: v for p in programs for k, v in p.thunks().items()}
        results = interleave(thunks, args.rounds, say)
        for p in programs:
            if p.interpreter_starts() != starts[p.program]:
                raise RuntimeError(f"{p.program}: the README line's links were not all served "
                                   f"({p.interpreter_starts() - starts[p.program]} "
                                   "interpreters started)")  # fmt: skip
            if p.served_by_hand() - served[p.program] != 2 * args.rounds:
                raise RuntimeError(f"{p.program}: the hand-started server did not serve every "
                                   "link")  # fmt: skip
    finally:
        for p in programs:
            p.stop()
    load_after = os.getloadavg()
    table: dict[str, dict[str, object]] = {}
    print(f"| program | {' | '.join(CONFIGS)} |\n|" + " --- |" * (len(CONFIGS) + 1))
    for p in programs:
        times = {n: results[f"{p.program}: {n}"].times for n in CONFIGS}
        med = {n: statistics.median(t) for n, t in times.items()}
        ratio = {n: statistics.median(a / b for a, b in zip(times[n], times[LLD], strict=True))
                 for n in CONFIGS}  # fmt: skip
        versus = {n: paired(times[README], times[n]) for n in (PLAIN, WARM)}
        table[p.program] = {"median_s": med, "round_ratio": ratio,
                            "readme_minus_s": versus, "times_s": times}  # fmt: skip
        cells = [f"{1000 * med[LLD]:.0f} ms"] + [f"{1000 * med[n]:.0f} ms ({ratio[n]:.2f}x)"
                                                 for n in CONFIGS[1:]]  # fmt: skip
        print(f"| {p.program} | " + " | ".join(cells) + " |")
    print("\nThe README line minus the other link of its round (ms): mean +- standard error, "
          "median\n")  # fmt: skip
    for p in programs:
        for n, d in table[p.program]["readme_minus_s"].items():  # type: ignore[attr-defined]
            print(f"{p.program}: README line - {n}: {1000 * d['mean']:+.2f} +- "
                  f"{1000 * d['se']:.2f} ms, median {1000 * d['median']:+.2f} ms")  # fmt: skip
    print(f"\nload average: {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    report = {"benchmark": "autostart_bench", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": machine(), "load_before": load_before, "load_after": load_after,
              "rounds": args.rounds, "table": table}  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "autostart_bench.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
