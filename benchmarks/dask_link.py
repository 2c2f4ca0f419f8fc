"""Cold link of lua or leveldb: the Dask runner with 2 local workers against the local runner.

    python -m benchmarks.dask_link [--rounds N] [--program lua|leveldb]

Both compile every backend job (each link gets a fresh cache) two at a time: the local runner with
``--jobs=2``, the Dask runner on a scheduler and two single-threaded workers on 127.0.0.1
(as root, in a mount namespace that hides the build, so every input is really shipped).
Rounds alternate the order. On one machine Dask cannot be faster: the workers share the same
cores, and shipping, scheduling and the sandboxes are pure overhead; the figure is that
overhead. A first, untimed Dask link imports distributed and connects in-process (its setup
time is reported) and leaves the resident client that the timed Dask links use, as every
link after a machine's first does. One more verbose Dask link gives the bytes sent against
the bytes the jobs name.
Results: results/dask_link.json (lua) or results/dask_link-leveldb.json.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.dask_cluster import cluster

from . import lua
from .sources import WORK, ensure_packages, machine
from .timing import interleave, timed

RESULTS = Path(__file__).parent / "results"
_SENT = re.compile(
    r"sending (\d+) distinct inputs, (\d+) bytes \(the jobs name (\d+) bytes of inputs in all\), "
    r"for (\d+) jobs"
)
_JOB = re.compile(r"compiled on Dask worker .*, ([0-9.]+) s$")
_CONNECTED = re.compile(r"Dask: connected to \S+ in ([0-9.]+) s")


def cached_dist() -> str:
    return str(Path(sys.executable).parent / "cached-dist")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dask_link", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--program", choices=("lua", "leveldb"), default="lua")
    args = parser.parse_args(argv)
    print(f"building {args.program}", file=sys.stderr)
    src, command, top, label = _program(args.program)
    hide = [top] if os.geteuid() == 0 else []
    with tempfile.TemporaryDirectory() as logs, cluster(Path(logs), 2, hide=hide) as c:
        scheduler = f"--dask-scheduler={c.address}"
        links = iter(range(10**6))

        def link(out: str, *more: str) -> float:
            """A cold link: a fresh, empty cache (keys computed, every job stored)."""
            cache = f"--cache-dir={logs}/cache-{next(links)}"
            options = ",".join(["--quiet", cache, *more])
            extra = [f"-fthinlto-distributor={cached_dist()}", f"-Xthinlto-distributor={options}"]
            return timed(command(out, extra), src)

        # The first Dask link of a machine imports distributed and connects in-process, then
        # leaves a resident client that the links after it use (cached_dist/runners/
        # dask_resident.py): measured once here, the timed links are the ones after it.
        first = subprocess.run(
            command("out-dask", [f"-fthinlto-distributor={cached_dist()}",
                                 f"-Xthinlto-distributor=--verbose,--cache-dir={logs}/cache-f,"
                                 f"{scheduler}"]),
            cwd=src, capture_output=True, text=True, check=True)  # fmt: skip
        in_process = _CONNECTED.search(first.stderr)
        assert in_process is not None and "distributed imported" in first.stderr, first.stderr
        _await_resident(c.address)
        configs = {
            "local runner (--jobs=2)": lambda: link("out-local", "--jobs=2"),
            "Dask runner (2 workers)": lambda: link("out-dask", scheduler),
        }
        results = interleave(configs, args.rounds, lambda m: print(m, file=sys.stderr))
        print({name: m.times for name, m in results.items()}, file=sys.stderr)
        verbose = [
            f"-fthinlto-distributor={cached_dist()}",
            f"-Xthinlto-distributor=--verbose,--cache-dir={logs}/cache-v,{scheduler}",
        ]
        done = subprocess.run(command("out-dask", verbose), cwd=src,
                              capture_output=True, text=True, check=True)  # fmt: skip
    sent = _SENT.search(done.stderr)
    assert sent is not None, done.stderr
    distinct, shipped, named, jobs = (int(g) for g in sent.groups())
    compiles = [float(m.group(1)) for m in map(_JOB.search, done.stderr.splitlines()) if m]
    connected = _CONNECTED.search(done.stderr)
    assert connected is not None and "through the resident client" in done.stderr, done.stderr
    setup = float(connected.group(1))  # once a link, before any job: reach the resident client
    first_setup = float(in_process.group(1))  # the first link: import distributed and connect
    same = (src / "out-local").read_bytes() == (src / "out-dask").read_bytes()
    base = results["local runner (--jobs=2)"].median
    ours = results["Dask runner (2 workers)"].median
    report = {
        "benchmark": "dask_link",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine(),
        "program": f"{label}, {jobs} backend jobs",
        "workers_hide_build": bool(hide),
        "rounds": args.rounds,
        "times": {name: m.times for name, m in results.items()},
        "medians": {name: m.median for name, m in results.items()},
        "ratio": ours / base,
        "overhead_ms_per_job": 1000 * (ours - base) * 2 / jobs,  # 2 jobs at a time
        "setup_s": setup,
        "first_link_setup_s": first_setup,
        "overhead_ms_per_job_beyond_setup": 1000 * (ours - base - setup) * 2 / jobs,
        "distinct_inputs_sent": distinct,
        "bytes_sent": shipped,
        "bytes_named_by_jobs": named,
        "worker_compile_seconds": sum(compiles),
        "byte_identical": same,
    }
    RESULTS.mkdir(exist_ok=True)
    name = "dask_link.json" if args.program == "lua" else f"dask_link-{args.program}.json"
    (RESULTS / name).write_text(json.dumps(report, indent=1) + "\n")
    print(f"local {base:.3f} s, Dask {ours:.3f} s, ratio {ours / base:.3f}, "
          f"{report['overhead_ms_per_job']:.0f} ms per job ({setup:.2f} s of it once per link "
          f"to reach the resident client; the first link's in-process setup {first_setup:.2f} s; "
          f"{report['overhead_ms_per_job_beyond_setup']:.0f} ms per job beyond it); "
          f"sent {distinct} inputs, "
          f"{shipped} bytes, of {named} bytes named by {jobs} jobs; identical: {same}")  # fmt: skip
    return 0


def _await_resident(address: str, wait: float = 60.0) -> None:
    from cached_dist.runners import dask_resident

    deadline = time.monotonic() + wait
    while (found := dask_resident.connect(address)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the first Dask link left no resident client")
        time.sleep(0.1)
    found.close()


def _program(name: str) -> tuple[Path, Callable[[str, list[str]], list[str]], Path, str]:
    """Where the link runs, its command (output, extra flags), the tree to hide, a label."""
    if name == "lua":
        src = lua.build(WORK / "lua-dask")
        return src, lua.link_command, src.parent, "lua 5.4 (lua.o + liblua.a)"
    from .harness.codebases import LevelDB

    top = WORK / "leveldb-dask"
    ensure_packages(LevelDB.packages)
    build = LevelDB().build(top, WORK / "leveldb-dask-cache")
    return build.cwd, lambda out, extra: build.command(out, extra), top, LevelDB.program


if __name__ == "__main__":
    sys.exit(main())
