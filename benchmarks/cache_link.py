"""The cache's own costs on lua 5.4 (thin archive, 33 backend jobs for the `lua` link).

    python -m benchmarks.cache_link [--rounds N]

1. Full hit: wall time of the `cached-dist` process alone on the real job file of a link
   whose every job is cached (budget: 100 ms + 0.5 ms per job).
2. Cold link: a link whose jobs the cache has never seen, through a cache already in use
   (it knows the toolchain), against the same link through the bare local runner
   (`--disable`), interleaved (budget: at most 5% slower). Also reported: the same link
   into a brand-new cache directory, which pays once for creating the store and hashing
   the toolchain (~200 MB of LLVM libraries).
Results go to benchmarks/results/cache_link.json.
"""

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import lua
from .sources import WORK, machine
from .timing import interleave, timed

RESULTS = Path(__file__).parent / "results"
CAPTURE = Path(__file__).parent / "capture_distributor.py"


def cached_dist() -> str:
    return str(Path(sys.executable).parent / "cached-dist")


ROOT = Path(__file__).parent.parent  # the checkout
PACKAGES = (ROOT / "cached_dist", ROOT / "store", ROOT / "procs")


def byte_compile(packages: tuple[Path, ...] = PACKAGES, python: str = sys.executable) -> None:
    """Like an installed package: no module recompiled at each start.

    Forced (``-f``, ~0.2 s): compileall judges a .pyc by the source's mtime in whole
    seconds, while the interpreter also compares the size. A module edited twice within a
    second (an edit undone by ``git checkout``) thus keeps a .pyc that compileall takes for
    fresh and the interpreter refuses. Without bytecode writes (``PYTHONDONTWRITEBYTECODE``,
    as on the build machines), every start then compiles the module again. For
    store/rows.py that added 2.6 ms to each plain link of a benchmark run."""
    subprocess.run([python, "-m", "compileall", "-q", "-f", *map(str, packages)],
                   check=True, capture_output=True)  # fmt: skip


UNSEEN = "cached-dist, cache in use, lua unseen"
NEW = "cached-dist, brand-new cache directory"
BARE = "bare local runner (--disable)"


def warm_other_program(cache: Path) -> None:
    """Links the tests' small C program through cached-dist into ``cache``: the store then
    exists and knows the toolchain, as any cache in use does, but holds nothing of lua."""
    build = WORK / "cache_link" / "other"
    shutil.rmtree(build, ignore_errors=True)
    shutil.copytree(ROOT / "tests" / "programs" / "calc", build)
    clang = str(lua.LLVM_BIN / "clang")
    objects = []
    for source in sorted(build.glob("*.c")):
        obj = source.with_suffix(".o").name
        timed([clang, "-flto=thin", "-O2", "-c", source.name, "-o", obj], build)
        objects.append(obj)
    timed([clang, "-flto=thin", "-O2", "-fuse-ld=lld", *objects, "-o", "calc",
           f"-fthinlto-distributor={cached_dist()}",
           f"-Xthinlto-distributor=--quiet,--cache-dir={cache}"], build)  # fmt: skip


def say(message: str) -> None:
    print(message, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cache_link", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hit-runs", type=int, default=21)
    args = parser.parse_args(argv)
    byte_compile()
    say("building lua 5.4 with a thin liblua.a")
    work = WORK / "cache_link"
    src = lua.build(work / "lua", thin=True)
    cache = work / "cache"
    saved = work / "saved"
    for d in (cache, saved):
        shutil.rmtree(d, ignore_errors=True)
    capture = [
        f"-fthinlto-distributor={sys.executable}",
        f"-Xthinlto-distributor={CAPTURE},{saved},{cached_dist()},--cache-dir={cache}",
    ]
    say("warming the cache")
    timed(lua.link_command("lua-warm", capture), src)
    job_file = saved / "lua-warm.job.json"
    jobs = len(json.loads(job_file.read_text())["jobs"])
    for shard in saved.glob("*.thinlto.bc"):
        shutil.copy(shard, src / shard.name)
    hit_cmd = [cached_dist(), f"--cache-dir={cache}", "--quiet", str(job_file)]
    hit_times = sorted(timed(hit_cmd, src) for _ in range(args.hit_runs))
    hit = hit_times[len(hit_times) // 2]
    budget = 0.100 + 0.0005 * jobs
    say(f"full hit: {1000 * hit:.1f} ms for {jobs} jobs (budget {1000 * budget:.1f} ms)")
    bare_python = sorted(timed([sys.executable, "-c", "pass"], src) for _ in range(args.hit_runs))

    # A cache in use that has never seen lua: made once by linking another program into it.
    template = work / "template-cache"
    shutil.rmtree(template, ignore_errors=True)
    warm_other_program(template)

    def cold_link(cache_dir: Path | None) -> float:
        opts = "-Xthinlto-distributor=--quiet,--disable"
        if cache_dir is not None:
            opts = f"-Xthinlto-distributor=--quiet,--cache-dir={cache_dir}"
        cmd = lua.link_command("lua-cold", [f"-fthinlto-distributor={cached_dist()}", opts])
        return timed(cmd, src)

    def unseen() -> float:
        shutil.rmtree(work / "cold-cache", ignore_errors=True)
        shutil.copytree(template, work / "cold-cache")
        return cold_link(work / "cold-cache")

    def brand_new() -> float:
        shutil.rmtree(work / "new-cache", ignore_errors=True)
        return cold_link(work / "new-cache")

    configs = {
        UNSEEN: unseen,
        NEW: brand_new,
        BARE: lambda: cold_link(None),
    }
    results = interleave(configs, args.rounds, say)
    cold = results[UNSEEN].median
    new = results[NEW].median
    bare = results[BARE].median
    report = {
        "benchmark": "cache_link",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine(),
        "program": f"lua 5.4, thin liblua.a, {jobs} backend jobs",
        "full_hit": {"median_s": hit, "times_s": hit_times, "budget_s": budget,
                     "bare_python_s": bare_python[len(bare_python) // 2]},
        "cold": {"times_s": {n: m.times for n, m in results.items()},
                 "cached_s": cold, "new_cache_s": new, "bare_s": bare,
                 "overhead": cold / bare - 1, "overhead_new_cache": new / bare - 1},
    }  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cache_link.json").write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"full hit {1000 * hit:.1f} ms for {jobs} jobs (budget {1000 * budget:.1f} ms); "
        f"cold {cold:.3f} s vs bare {bare:.3f} s: overhead {100 * (cold / bare - 1):+.1f}% "
        f"(brand-new cache directory: {100 * (new / bare - 1):+.1f}%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
