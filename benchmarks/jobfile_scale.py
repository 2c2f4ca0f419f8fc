"""Peak memory and time per job of huge job files: 1k, 10k and 100k jobs of one real module.

    python -m benchmarks.jobfile_scale [--sizes 1000,10000,100000] [--rounds N]
                                      [--baseline ROOT] [--baseline-max N]

A real clang-22/ld.lld-22 link is captured once (job file and shard), then one of its jobs
is copied N times, each copy with its own output: what a program of N modules asks of the
distributor per job, with one module's bytes. Each measurement is a fresh child process whose
peak resident memory is read from ``os.wait4``'s rusage:

- ``keys``: load the job file, check it, and key every job (what every link does first);
- ``hit``: the whole ``cached-dist`` link with every job a cache hit (each output written).

``--baseline ROOT`` runs the same children on another checkout's code (e.g. main's, in a
worktree) interleaved with this one, round by round, so ratios are side by side; links
larger than ``--baseline-max`` jobs are measured for this tree only. Results go to
benchmarks/results/jobfile_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "work" / "jobfile_scale"
RESULTS = HERE / "results" / "jobfile_scale.json"
LLVM = Path("/usr/lib/llvm-22/bin")

MAIN_C = "int helper(int);\nint main(int argc, char **argv) { return helper(argc) - 1; }\n"
HELPER_C = (
    "int helper(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * x; return s + x; }\n"
)

# Runs in the child: the link's first phase, with the code found under sys.argv[1].
KEYS_CHILD = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
started = time.perf_counter()
from cached_dist import jobfile
from cached_dist.jobfile import checks
from cached_dist.keys.compute import compute_keys
from cached_dist.keys.shard_key import ShardKeys
from store import Store
job_file = jobfile.load(sys.argv[2])
if hasattr(checks, "check_job_file"):
    checks.check_job_file(job_file)
else:
    checks.check_inputs(job_file)
    checks.check_output_dirs(job_file)
store = Store(sys.argv[3])
# Code before the forked splits' removal took the processes to split decoding over.
split = "parallel" in ShardKeys.__init__.__code__.co_varnames
keyed = compute_keys(job_file, store, ShardKeys(store, 2) if split else ShardKeys(store))
assert all(k.key is not None for k in keyed), keyed[0].reason
print(time.perf_counter() - started)
"""

HIT_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
sys.argv = ["cached-dist", "--quiet", "--cache-dir=" + sys.argv[3], sys.argv[2]]
from cached_dist.cli import run
run()
"""


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def capture() -> dict[str, object]:
    """A real DTLTO link of two files; returns its job for ``main.o`` with a saved shard."""
    saved = WORK / "captured" / "a.job.json"
    if not saved.exists():
        if WORK.exists():
            shutil.rmtree(WORK)
        WORK.mkdir(parents=True)
        (WORK / "main.c").write_text(MAIN_C)
        (WORK / "helper.c").write_text(HELPER_C)
        for src in ("main.c", "helper.c"):
            subprocess.run([LLVM / "clang", "-flto=thin", "-O2", "-c", src], cwd=WORK, check=True)
        exe = Path(sys.executable).parent / "cached-dist"
        subprocess.run(
            [LLVM / "clang", "-flto=thin", "-O2", "-fuse-ld=lld", "main.o", "helper.o", "-o", "a",
             f"-fthinlto-distributor={sys.executable}",
             f"-Xthinlto-distributor={HERE / 'capture_distributor.py'}",
             "-Xthinlto-distributor=captured", f"-Xthinlto-distributor={exe}",
             "-Xthinlto-distributor=--cache-dir=capture-cache", "-Xthinlto-distributor=--quiet"],
            cwd=WORK, check=True,
        )  # fmt: skip
    document = json.loads(saved.read_text())
    job = next(j for j in document["jobs"] if j["inputs"][0] == "main.o")
    shard = os.path.join("captured", os.path.basename(job["inputs"][1]))
    rename = {job["inputs"][1]: shard}
    job["inputs"] = [rename.get(p, p) for p in job["inputs"]]
    job["args"] = [
        "-fthinlto-index=" + shard if a.startswith("-fthinlto-index=") else a for a in job["args"]
    ]
    return {"common": document["common"], "job": job}


def job_file(base: dict[str, object], n: int) -> Path:
    """Writes the N-job file in a child process: a child's ru_maxrss starts from its parent's
    peak (Linux carries the high-water mark across fork and exec), so the parent must never
    hold a big document itself."""
    path = WORK / f"jobs-{n}.json"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "benchmarks.jobfile_scale", "--generate", str(n)],
                       cwd=ROOT, check=True)  # fmt: skip
    return path


def generate(base: dict[str, object], n: int) -> Path:
    """N copies of the captured job, each with its own output in out-N/ and its own shard
    in shards-N/ (hard links to copies of the real one: per-path work as in a real link,
    little disk)."""
    path = WORK / f"jobs-{n}.json"
    if path.exists():
        return path
    job = base["job"]
    assert isinstance(job, dict)
    out, shard = job["outputs"][0], job["inputs"][1]
    (WORK / f"out-{n}").mkdir(exist_ok=True)
    (WORK / f"shards-{n}").mkdir(exist_ok=True)
    jobs = []
    for i in range(n):
        mine, my_shard = f"out-{n}/{i}.native.o", f"shards-{n}/{i}.thinlto.bc"
        if not os.path.exists(WORK / my_shard):
            source = WORK / f"shards-{n}" / f"source-{i // 50000}"  # ext4: < 65000 links
            if not source.exists():
                shutil.copy(WORK / shard, source)
            os.link(source, WORK / my_shard)
        args = [mine if a == out else a for a in job["args"]]
        args = [f"-fthinlto-index={my_shard}" if a.startswith("-fthinlto-index=") else a
                for a in args]  # fmt: skip
        jobs.append({"args": args, "inputs": [job["inputs"][0], my_shard, *job["inputs"][2:]],
                     "outputs": [mine]})  # fmt: skip
    path.write_text(json.dumps({"common": base["common"], "jobs": jobs}, indent=1))
    return path


def measure(kind: str, root: Path, jobs: Path, cache: Path) -> tuple[float, int]:
    """(wall seconds, peak RSS in KiB) of one child."""
    out = WORK / jobs.stem.replace("jobs", "out")
    for entry in os.scandir(out):
        os.unlink(entry.path)
    code = KEYS_CHILD if kind == "keys" else HIT_CHILD
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), jobs.name, str(cache)],
                            cwd=WORK, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    assert proc.stdout is not None and proc.stderr is not None
    stderr = proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} {jobs.name} with {root} failed: {stderr[-2000:]}")
    return elapsed, usage.ru_maxrss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--baseline-max", type=int, default=10000)
    parser.add_argument("--kinds", default="keys,hit")
    parser.add_argument("--generate", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        generate(capture(), args.generate)
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    base = capture()
    cache = WORK / "cache"
    warm = job_file(base, 1)
    measure("hit", ROOT, warm, cache)  # compiles the one key every copy shares
    roots = {"this": ROOT}
    if args.baseline is not None:
        roots["baseline"] = args.baseline.resolve()
    rows: dict[str, dict[str, list[list[float]]]] = {}
    for n in sizes:
        jobs = job_file(base, n)
        for r in range(args.rounds):
            for kind in args.kinds.split(","):
                order = list(roots.items())
                order = order[r % len(order) :] + order[: r % len(order)]
                for name, root in order:
                    if name == "baseline" and n > args.baseline_max:
                        continue
                    seconds, rss = measure(kind, root, jobs, cache)
                    say(f"{n} jobs, {kind}, {name}: {seconds:.2f} s, "
                        f"{1e3 * seconds / n:.3f} ms/job, {rss / 1024:.0f} MiB")  # fmt: skip
                    rows.setdefault(f"{n}/{kind}/{name}", {}).setdefault("runs", []).append(
                        [seconds, rss]
                    )
    summary: dict[str, dict[str, object]] = {}
    for label, data in rows.items():
        n = int(label.split("/")[0])
        runs = sorted(data["runs"])
        median = runs[len(runs) // 2]
        summary[label] = {"jobs": n, "seconds": median[0], "ms_per_job": 1e3 * median[0] / n,
                          "peak_rss_mib": max(r[1] for r in runs) / 1024, "runs": runs}  # fmt: skip
    RESULTS.parent.mkdir(exist_ok=True)
    # Runs of other sizes are kept: one invocation per size range builds the whole table.
    document = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": {}}
    command = " ".join(["python -m benchmarks.jobfile_scale", *sys.argv[1:]])
    measured = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    for s in summary.values():
        s.update(command=command, measured=measured)
    document["runs"].update(summary)
    RESULTS.write_text(json.dumps(document, indent=1) + "\n")
    summary = document["runs"]
    print("| jobs | phase | code | wall time | per job | peak RSS |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, s in summary.items():
        size, kind, name = label.split("/")
        print(f"| {size} | {kind} | {name} | {s['seconds']:.2f} s | {s['ms_per_job']:.3f} ms | "
              f"{s['peak_rss_mib']:.0f} MiB |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
