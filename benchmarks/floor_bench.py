"""Full hits against LLD's own cache and against two floors, side by side in one run.

    python -m benchmarks.floor_bench [--rounds N] [--programs a,b,...] [--profile] [--output F]

Per program, eight links of the same inputs are timed, interleaved round by round:

* LLD cache: ``-Wl,--thinlto-cache-dir`` warmed once (LLD then starts no distributor);
* cached-dist: a full hit from a warmed cache, outputs copied (the default);
* cached-dist --hard-link: the same, outputs hard-linked to the verified blobs;
* warm server, and with --hard-link: the same two through ``cached-dist-client`` and a
  ``cached-dist serve`` this benchmark starts on a private socket (no interpreter per link);
* C floor: ``floor_c.c`` (compiled here), which only hard-links precomputed objects;
* Python floor: ``floor_py.py``, the interpreter, ``import json`` and the same links;
* cached-dist with its C extension hidden (the pure-Python shard decoder).

Every distributor runs under ``timeshim.c``, which logs its wall time: the per-job excess over
the Python floor is computed from those (the distributor's own share of each link), since
LLD's own time varies from link to link by more than a 3,000-job full hit costs. The shim
adds one small exec to every distributor's link alike. Each of ours is also read against the
C floor link of its own round (``floor_distance``): the C floor's own excess over LLD's cache
(LLD writing shards and a job file, starting a process, reading the outputs back) moves from
run to run, and that reading leaves it out.

Also measured: what creating an empty file costs in each program's link directory (on ext4
it varies with how full that part of the disk is, and every copied output pays it).

Programs: lua 5.4 with a regular and a thin liblua.a (Debian's source, its own Makefile), and
the generated program of tests/shardgen.py with 300 and 3,000 modules in a regular archive.
Not in the default set: ``coff-300``, the 300-module program compiled for
x86_64-pc-windows-msvc, archived by llvm-lib and linked by lld-link (``/lldltocache:`` as
LLD's cache, ``/thinlto-distributor:`` and its arguments; its results go to ``--output``).
Also measured: the native and pure-Python shard canonicalization speed (MB/s of shard bytes)
on the real shards of these links, and that both give the same digests. ``--profile`` prints
a cProfile of one cached-dist full hit per program. Results: benchmarks/results/floor_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import lua
from .cache_link import CAPTURE, byte_compile, cached_dist
from .sources import WORK, machine
from .timing import Measured, interleave, timed

HERE = Path(__file__).parent
RESULTS = HERE / "results"
LLVM_BIN = Path("/usr/lib/llvm-22/bin")
PROGRAMS = ("lua-regular", "lua-thin", "gen-300", "gen-3000")
PY_DECODER = "cached-dist, Python decoder"  # the extensions hidden: the state before issue 14
HARD_LINK = "cached-dist --hard-link"
WARM, WARM_HARD_LINK = "warm server", "warm server --hard-link"
CONFIGS = ("LLD cache", "cached-dist", HARD_LINK, WARM, WARM_HARD_LINK, "C floor", "Python floor",
           PY_DECODER)  # fmt: skip
OURS = ("cached-dist", HARD_LINK, WARM, WARM_HARD_LINK)  # the excess over the Python floor
# CPU time (user + system) of each timed link and everything it ran: far less sensitive than
# wall time to other work on the machine.
CPU_TIMES: dict[str, list[float]] = {}
# Each distributor runs under timeshim.c, which logs its wall time: the distributor's own share
# of each link, apart from LLD's (whose time varies by more than a large full hit costs).
DIST_LOGS: dict[str, Path] = {}
DIST_TIMES: dict[str, list[float]] = {}


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_generated(modules: int, dest: Path, coff: bool = False) -> Path:
    """tests/shardgen.py's program of ``modules`` modules, all but main in libmods.a; with
    ``coff``, compiled for Windows (it needs no C library) into .obj files and mods.lib."""
    from tests import shardgen

    library = "mods.lib" if coff else "libmods.a"
    if (dest / library).exists():
        return dest
    sources = shardgen.many_module_program(modules)
    shardgen.write_sources(dest, sources)
    suffix = ".obj" if coff else ".o"
    # Windows probes stacks over 4 KB through the C runtime's __chkstk (main's 300 calls):
    # the program is linked without it.
    target = ["--target=x86_64-pc-windows-msvc", "-mno-stack-arg-probe"] if coff else []

    def compile_one(name: str) -> None:
        obj = name.replace(".c", suffix)
        subprocess.run([str(LLVM_BIN / "clang"), *target, "-flto=thin", "-O2", "-c", name,
                        "-o", obj], cwd=dest, check=True, capture_output=True)  # fmt: skip

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(compile_one, sorted(sources)))
    members = [n.replace(".c", suffix) for n in sorted(sources) if n != "main.c"]
    archive = ([str(LLVM_BIN / "llvm-lib"), f"/out:{library}"] if coff
               else [str(LLVM_BIN / "llvm-ar"), "rcs", library])  # fmt: skip
    subprocess.run([*archive, *members], cwd=dest, check=True, capture_output=True)
    return dest


def link_command(program: str, out: str, extra: list[str]) -> list[str]:
    if program.startswith("lua"):
        return lua.link_command(out, extra)
    if program.startswith("coff"):
        return [str(LLVM_BIN / "lld-link"), "/brepro", "/subsystem:console", "/entry:main",
                "/nodefaultlib", "main.obj", "mods.lib", f"/out:{out}",
                *lld_link_flags(extra)]  # fmt: skip
    return [str(LLVM_BIN / "clang"), "-flto=thin", "-O2", "-fuse-ld=lld", "main.o",
            "libmods.a", "-o", out, *extra]  # fmt: skip


def lld_link_flags(extra: Sequence[str]) -> list[str]:
    """The clang driver's DTLTO flags of the ELF links, as lld-link spells them: it names no
    backend compiler by itself (the driver names itself), and takes each distributor
    argument as one flag (the driver splits -Xthinlto-distributor= on commas)."""
    out = []
    for word in extra:
        flag, _, value = word.partition("=")
        if flag == "-fthinlto-distributor":
            out += [f"/thinlto-distributor:{value}",
                    f"/thinlto-remote-compiler:{LLVM_BIN / 'clang'}"]  # fmt: skip
        elif flag == "-Xthinlto-distributor":
            out += [f"/thinlto-distributor-arg:{arg}" for arg in value.split(",")]
        elif flag == "-Wl,--thinlto-cache-dir":
            out.append(f"/lldltocache:{value}")
        else:
            raise ValueError(f"no lld-link spelling for {word!r}")
    return out


def program_source(program: str, work: Path, fresh: bool = False) -> Path:
    """Where ``program`` links: built under ``work``, or the build a previous run left there
    (without ``fresh``)."""
    if program.startswith("lua") and (fresh or not (work / "lua/src/liblua.a").exists()):
        return lua.build(work / "lua", thin=program == "lua-thin")
    if program.startswith("lua"):
        return work / "lua/src"
    return build_generated(int(program.split("-")[1]), work / "src", program.startswith("coff"))


def prepare(
    program: str, work: Path, floor_c: Path, shim: Path, fresh: bool
) -> dict[str, Callable[[], float]]:
    """Builds the program, warms every cache, saves the floors' objects; returns the six
    timed links. Without ``fresh``, a build, caches and objects left by a previous run are
    reused (the first timed links re-warm whatever is missing)."""
    src = program_source(program, work, fresh)
    ours_cache, lld_cache, pre, shards = (work / n for n in ("cache", "lld-cache", "pre", "shards"))
    ours_args = f"--quiet,--cache-dir={ours_cache}"
    dist = f"-fthinlto-distributor={cached_dist()}"
    if fresh or not (pre / "0.o").exists():
        for d in (ours_cache, lld_cache, pre, shards):
            shutil.rmtree(d, ignore_errors=True)
        say(f"{program}: cold link through cached-dist (compiles every job)")
        timed(link_command(program, "app-ours", [dist, f"-Xthinlto-distributor={ours_args}"]),
              src)  # fmt: skip
        say(f"{program}: saving objects for the floors and shards for the decoder")
        timed(link_command(program, "app-save", [
        f"-fthinlto-distributor={sys.executable}",
        f"-Xthinlto-distributor={HERE / 'floor_save.py'},{pre},{CAPTURE},{shards},"
        f"{cached_dist()},{ours_args}"]), src)  # fmt: skip
    no_native = work / "cached-dist-python-decoder"
    no_native.write_text(f"#!{sys.executable}\nimport sys\n"
                         "sys.modules['cached_dist.bitcode._shard'] = None\n"
                         "sys.modules['cached_dist.keys._read'] = None\n"
                         "from cached_dist.cli import run\nrun()\n")  # fmt: skip
    no_native.chmod(0o755)

    def shimmed(name: str, command: str) -> list[str]:
        """The distributor ``command`` (comma-separated words) under the time shim."""
        log = work / ("distributor-" + "".join(c if c.isalnum() else "_" for c in name) + ".log")
        log.unlink(missing_ok=True)
        DIST_LOGS[f"{program}: {name}"] = log
        return [f"-fthinlto-distributor={shim}", f"-Xthinlto-distributor={log},{command}"]

    lld = [f"-fthinlto-distributor={floor_c}", f"-Xthinlto-distributor={pre}",
           f"-Wl,--thinlto-cache-dir={lld_cache}"]  # fmt: skip  # warmed by the C floor
    ours = f"{cached_dist()},{ours_args}"
    from cached_dist.serve import CLIENT

    warm = f"{CLIENT},{ours}"
    commands = {
        "LLD cache": link_command(program, "app-lld", lld),
        "cached-dist": link_command(program, "app-ours", shimmed("cached-dist", ours)),
        HARD_LINK: link_command(program, "app-ourshl", shimmed(HARD_LINK, f"{ours},--hard-link")),
        WARM: link_command(program, "app-warm", shimmed(WARM, warm)),
        WARM_HARD_LINK: link_command(
            program, "app-warmhl", shimmed(WARM_HARD_LINK, f"{warm},--hard-link")
        ),
        "C floor": link_command(program, "app-cfloor", shimmed("C floor", f"{floor_c},{pre}")),
        "Python floor": link_command(
            program,
            "app-pyfloor",
            shimmed("Python floor", f"{sys.executable},{HERE / 'floor_py.py'},{pre}"),
        ),
        PY_DECODER: link_command(
            program, "app-ourspy", shimmed(PY_DECODER, f"{no_native},{ours_args}")
        ),
    }
    for command in commands.values():
        timed(command, src)  # everything warm, every binary written once
    outs = ("lld", "ours", "ourshl", "warm", "warmhl", "cfloor", "pyfloor", "ourspy")
    binaries = {(src / f"app-{n}").read_bytes() for n in outs}
    if len(binaries) != 1:
        raise RuntimeError(f"{program}: the eight links gave different binaries")

    def runner(name: str, command: list[str]) -> Callable[[], float]:
        def run() -> float:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall = timed(command, src)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            CPU_TIMES.setdefault(f"{program}: {name}", []).append(cpu)
            log = DIST_LOGS.get(f"{program}: {name}")
            if log is not None:  # the distributor's own time in this link
                last = log.read_text().split()[-1]
                DIST_TIMES.setdefault(f"{program}: {name}", []).append(float(last))
            return wall

        return run

    return {name: runner(name, command) for name, command in commands.items()}


def create_cost(directory: Path, count: int = 200) -> float:
    """Median ms to create (and close) an empty file in ``directory``: what each copied output
    costs beyond its bytes, and what a hard link avoids. On ext4 it depends on how full the
    directory's block group is, so it is measured where the links write."""
    times = []
    paths = [directory / f".create-cost-{os.getpid()}-{i}" for i in range(count)]
    try:
        for path in paths:  # all kept until the end, as a link's outputs are
            started = time.perf_counter()
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            times.append(time.perf_counter() - started)
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
    return 1000 * statistics.median(times)


def shard_speed(shard_dirs: list[Path]) -> dict[str, float]:
    """Native and reference canonicalization of the captured shards: MB/s and agreement."""
    from cached_dist.bitcode import native
    from cached_dist.bitcode.shard import canonical_shard

    shards = [p.read_bytes() for d in shard_dirs for p in sorted(d.glob("*.thinlto.bc"))]

    def lookup(path: str) -> str | None:
        return None  # the captured module files are gone: paths stay in the form

    total = sum(len(s) for s in shards)
    reference = [canonical_shard(s, lookup) for s in shards]
    result: dict[str, float] = {"shards": len(shards), "bytes": total,
                                "exact": sum(r.exact for r in reference)}  # fmt: skip
    started = time.process_time()
    for s in shards:
        canonical_shard(s, lookup)
    result["python_mb_s"] = total / 1e6 / (time.process_time() - started)
    if native.NATIVE:
        same = sum(native.canonical_digest(s, lookup)[:2] == (r.digest, r.exact)
                   for s, r in zip(shards, reference, strict=True))  # fmt: skip
        result["native_same_digest"] = same
        rounds = 5
        started = time.process_time()
        for _ in range(rounds):
            for s in shards:
                native.canonical_digest(s, lookup)
        result["native_mb_s"] = rounds * total / 1e6 / (time.process_time() - started)
    return result


def profile_hit(program: str, work: Path) -> None:
    """One cached-dist full hit under cProfile; prints the top of the cumulative profile."""
    src = work / ("lua/src" if program.startswith("lua") else "src")
    out = work / "hit.prof"
    wrapper = work / "profiled-cached-dist"
    # cli.run() ends with os._exit (no interpreter teardown): profile main(), save, then exit.
    wrapper.write_text(f"#!{sys.executable}\nimport cProfile, sys\n"
                       f"from cached_dist.cli import main\np = cProfile.Profile()\n"
                       f"rc = p.runcall(main, sys.argv[1:])\n"
                       f"p.dump_stats({str(out)!r})\nsys.exit(rc)\n")  # fmt: skip
    wrapper.chmod(0o755)
    timed(link_command(program, "app-ours", [
        f"-fthinlto-distributor={wrapper}",
        f"-Xthinlto-distributor=--quiet,--cache-dir={work / 'cache'}"]), src)  # fmt: skip
    import pstats

    print(f"--- cProfile of one cached-dist full hit: {program}")
    pstats.Stats(str(out)).sort_stats("tottime").print_stats(18)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor_bench", description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="rebuild everything")
    parser.add_argument("--output", default="floor_bench.json",
                        help="results file in benchmarks/results/")  # fmt: skip
    args = parser.parse_args(argv)
    programs = [p for p in args.programs.split(",") if p]
    byte_compile()
    root = WORK / "floor_bench"
    root.mkdir(parents=True, exist_ok=True)
    floor_c, shim = root / "floor_c", root / "timeshim"
    for exe in (floor_c, shim):
        subprocess.run(["cc", "-O2", "-o", str(exe), str(HERE / f"{exe.name}.c")], check=True)
    server = start_server(root)
    try:
        return measure(args, programs, root, floor_c, shim, server)
    finally:
        server.terminate()
        server.wait(30)


def start_server(root: Path) -> subprocess.Popen[bytes]:
    """``cached-dist serve --verbose`` on a socket of this run's own (the links inherit
    CACHED_DIST_SOCKET); its log says which links it served."""
    sock = root / "serve.sock"
    os.environ["CACHED_DIST_SOCKET"] = str(sock)
    return launch_server(cached_dist(), root / "serve.log")


def launch_server(
    program: str, log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``PROGRAM serve --verbose``, its stderr in ``log``, once it says it serves."""
    server = subprocess.Popen([program, "serve", "--verbose"], env=env, stderr=log.open("w"))
    deadline = time.monotonic() + 60
    while "serving on" not in log.read_text():
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{program} serve did not start: {log.read_text()}")
        time.sleep(0.05)
    return server


def measure(args: argparse.Namespace, programs: list[str], root: Path, floor_c: Path,
            shim: Path, server: subprocess.Popen[bytes]) -> int:  # fmt: skip
    configs: dict[str, Callable[[], float]] = {}
    jobs: dict[str, int] = {}
    for program in programs:
        for name, thunk in prepare(program, root / program, floor_c, shim, args.fresh).items():
            configs[f"{program}: {name}"] = thunk
        job_files = list((root / program / "shards").glob("*.job.json"))
        jobs[program] = len(json.loads(job_files[0].read_text())["jobs"])
    if args.profile:
        for program in programs:
            profile_hit(program, root / program)
    warmed = (root / "serve.log").read_text().count(": served ")
    results = interleave(configs, args.rounds, say)
    log = (root / "serve.log").read_text()
    served = log.count(": served ") - warmed
    handed_back = [line for line in log.splitlines() if ": handed back " in line]
    if served != 2 * len(programs) * args.rounds or handed_back:
        raise RuntimeError(f"the warm server served {served} timed links: {handed_back[:3]}")
    creates = {p: create_cost(root / p / ("lua/src" if p.startswith("lua") else "src"))
               for p in programs}  # fmt: skip
    table: dict[str, dict[str, object]] = {}
    header = ("| program | jobs | " + " | ".join(CONFIGS) + " | excess over the Python floor "
              "(" + ", ".join(OURS) + ") |\n|" + " --- |" * (len(CONFIGS) + 3))  # fmt: skip
    print(header)
    for program in programs:
        med = {n: results[f"{program}: {n}"].median for n in CONFIGS}
        lld = med["LLD cache"]
        excess = [1000 * (med[n] - med["Python floor"]) / jobs[program] for n in OURS]
        table[program] = {"jobs": jobs[program], **{f"{n} s": v for n, v in med.items()},
                          **{f"{n} ratio": v / lld for n, v in med.items()},
                          **{_excess_key(n): e for n, e in zip(OURS, excess, strict=True)},
                          "file_create_ms": creates[program]}  # fmt: skip
        print(_row(program, jobs[program], med, excess))
    print("\nEach link over the LLD cache link of its own round, medians (a program's link "
          "times can drift over a run; its configurations run one after another):\n")  # fmt: skip
    print("| program | " + " | ".join(CONFIGS[1:]) + " |\n|" + " --- |" * len(CONFIGS))
    for program in programs:
        table[program]["round_ratios"] = ratios = round_ratios(results, program)
        print(f"| {program} | " + " | ".join(f"{ratios[n]:.2f}x" for n in CONFIGS[1:]) + " |")
    print("\nEach of ours over the C floor link of its own round (what no distributor run by LLD "
          "avoids: LLD's shards and job file, the process, the outputs read back), medians over "
          "the rounds, in ms and over that round's LLD cache link:\n")  # fmt: skip
    print("| program | " + " | ".join(OURS) + " |\n|" + " --- |" * (len(OURS) + 1))
    for program in programs:
        table[program]["over_c_floor"] = over = floor_distance(results, program)
        print(f"| {program} | " + " | ".join(f"{1000 * over[n][0]:.1f} ms ({over[n][1]:.3f}x)"
                                             for n in OURS) + " |")  # fmt: skip
    # The warm server's children are not the link's: their CPU time is nowhere in its rusage.
    local = [n for n in CONFIGS if n not in (WARM, WARM_HARD_LINK)]
    print("\nCPU time (user + system, the link and all it ran; not for the warm server, whose "
          "children are not the link's), medians:\n")  # fmt: skip
    print(f"| program | jobs | {' | '.join(local)} | excess over the Python floor (copies, "
          "--hard-link) |\n|" + " --- |" * (len(local) + 3))  # fmt: skip
    for program in programs:
        cpu = {n: statistics.median(CPU_TIMES[f"{program}: {n}"]) for n in local}
        excess = [1000 * (cpu[n] - cpu["Python floor"]) / jobs[program] for n in OURS[:2]]
        table[program]["cpu"] = {
            **{f"{n} s": v for n, v in cpu.items()},
            **{_excess_key(n): e for n, e in zip(OURS, excess, strict=False)},
        }
        print(_row(program, jobs[program], cpu, excess, local))
    print(
        "\nThe distributor's own wall time inside the links (timeshim.c; for the warm server,"
        " the client's, which waits for the server's child), medians; the excess over the "
        "Python floor's, per job:\n"
    )
    owned = (*OURS, "C floor", "Python floor")
    print("| program | jobs | " + " | ".join(owned) + " | excess per job (" + ", ".join(OURS)
          + ") |\n|" + " --- |" * (len(owned) + 3))  # fmt: skip
    for program in programs:
        own = {n: statistics.median(DIST_TIMES[f"{program}: {n}"]) for n in owned}
        per_job = [1000 * (own[n] - own["Python floor"]) / jobs[program] for n in OURS]
        table[program]["distributor"] = {
            **{f"{n} s": v for n, v in own.items()},
            **{_excess_key(n): e for n, e in zip(OURS, per_job, strict=True)},
        }
        cells = " | ".join(f"{1000 * own[n]:.1f} ms" for n in own)
        print(f"| {program} | {jobs[program]} | {cells} | "
              + ", ".join(f"{e:.3f}" for e in per_job) + " ms/job |")  # fmt: skip
    print("\nCreating an empty file where each program links (ms, median of 200): "
          + ", ".join(f"{p} {creates[p]:.3f}" for p in programs))  # fmt: skip
    speed = shard_speed([root / p / "shards" for p in programs])
    print(f"shards: {speed}")
    report = {"benchmark": "floor_bench", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": machine(), "load": os.getloadavg(), "rounds": args.rounds,
              "table": table, "shard_canonicalization": speed,
              "warm_server": {"served": served, "handed_back": len(handed_back)},
              "times_s": {n: m.times for n, m in results.items()},
              "cpu_s": CPU_TIMES, "distributor_s": DIST_TIMES}  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.output).write_text(json.dumps(report, indent=1) + "\n")
    return 0


def round_ratios(results: Mapping[str, Measured], program: str) -> dict[str, float]:
    """Each configuration's median, over the rounds, of its link time over the LLD cache
    link's in the same round: less moved by a drift over the run than a ratio of medians."""
    lld = results[f"{program}: LLD cache"].times
    return {n: statistics.median(t / base for t, base in zip(results[f"{program}: {n}"].times,
                                                             lld, strict=True))
            for n in CONFIGS[1:]}  # fmt: skip


def floor_distance(results: Mapping[str, Measured], program: str) -> dict[str, list[float]]:
    """Each of our configurations' distance from the C floor link of its own round: the
    median over the rounds of the difference (seconds) and of the difference over that
    round's LLD cache link. What a ratio to LLD's cache would mean for us, with the C floor's
    own excess over LLD's cache (which moves from run to run) taken out."""
    lld = results[f"{program}: LLD cache"].times
    floor = results[f"{program}: C floor"].times
    over: dict[str, list[float]] = {}
    for n in OURS:
        rounds = list(zip(results[f"{program}: {n}"].times, floor, lld, strict=True))
        over[n] = [
            statistics.median(t - f for t, f, _ in rounds),
            statistics.median((t - f) / base for t, f, base in rounds),
        ]
    return over


def _excess_key(config: str) -> str:
    """The results' name for a configuration's excess per job (the names of earlier runs)."""
    names = {"cached-dist": "excess_ms_per_job", HARD_LINK: "excess_ms_per_job_hard_link",
             WARM: "excess_ms_per_job_warm_server",
             WARM_HARD_LINK: "excess_ms_per_job_warm_server_hard_link"}  # fmt: skip
    return names[config]


def _row(
    program: str, jobs: int, med: dict[str, float], excess: list[float],
    configs: Sequence[str] = CONFIGS,
) -> str:  # fmt: skip
    lld = med["LLD cache"]
    cells = " | ".join(f"{1000 * med[n]:.0f} ms ({med[n] / lld:.2f}x)" for n in configs[1:])
    return (f"| {program} | {jobs} | {1000 * lld:.0f} ms | {cells} | "
            + ", ".join(f"{e:.3f}" for e in excess) + " ms/job |")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
