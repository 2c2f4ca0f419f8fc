"""The remote tier (issue 12): full hits served by Redis, round trips per link, added latency.

    python -m benchmarks.remote [--rounds N] [--modules N] [--latency-ms MS]

1. Lua's full hit (33 jobs) served by the remote alone (an empty local store every round)
   against the same hit from the local store, interleaved round by round; the ratio of
   medians (goal: at most 1.5).
2. Round trips per link, counted by the client (``remote_round_trips``) and by the server
   (``INFO commandstats``), for lua (33 jobs) and a generated program of ``--modules``
   modules (default 300): machine A compiles and uploads, machine B (an empty cache) is
   served by the remote.
3. The same with the server in a network namespace created here, behind a veth pair with
   ``tc netem delay`` (``--latency-ms``, default 5; needs root; 0 skips it).

Each link runs cached-dist alone on a captured job file (benchmarks/capture_distributor.py),
so the times are the distributor's, not the linker's. Writes benchmarks/results/remote.json.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from store import Store

from . import lua
from .cache_link import CAPTURE, byte_compile, cached_dist
from .sources import WORK, machine
from .timing import interleave, timed

RESULTS = Path(__file__).parent / "results"
LLVM_BIN = Path("/usr/lib/llvm-22/bin")
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
NETNS, VETH_HOST, VETH_NS = "cdbench-remote", "cdbr0", "cdbr1"
HOST_IP, NS_IP = "10.231.77.1", "10.231.77.2"


def say(message: str) -> None:
    print(f"[remote] {message}", file=sys.stderr, flush=True)


class Redis:
    """A redis-server without persistence, on loopback or inside the benchmark's namespace."""

    def __init__(self, work: Path, *, netns: bool = False) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.host = NS_IP if netns else "127.0.0.1"
        self.port = _free_port()
        prefix = ["ip", "netns", "exec", NETNS] if netns else []
        self.proc = subprocess.Popen(
            [*prefix, REDIS_SERVER, "--port", str(self.port), "--bind", self.host, "--save", "",
             "--appendonly", "no", "--maxmemory", "1gb", "--maxmemory-policy", "allkeys-lru",
             "--logfile", str(work / f"redis-{self.port}.log")],
        )  # fmt: skip
        self.url = f"redis://{self.host}:{self.port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                self.call("PING")
                return
            except (OSError, subprocess.CalledProcessError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def call(self, *args: str) -> str:
        done = subprocess.run(["redis-cli", "-h", self.host, "-p", str(self.port), *args],
                              capture_output=True, text=True, check=True)  # fmt: skip
        if done.stdout.startswith("Could not connect"):
            raise OSError(done.stdout)
        return done.stdout

    def commands(self) -> dict[str, int]:
        text = self.call("INFO", "commandstats")
        return {m[1]: int(m[2]) for m in re.finditer(r"cmdstat_(\w+):calls=(\d+)", text)}

    def copy_to(self, other: Redis) -> None:
        """Every value of this server into ``other`` (DUMP/RESTORE through the client)."""
        import redis

        src = redis.Redis(host=self.host, port=self.port)
        dst = redis.Redis(host=other.host, port=other.port)
        for key in src.scan_iter("cached-dist:v1:*"):
            dst.restore(key, 0, src.dump(key), replace=True)  # type: ignore[arg-type]
        src.close()
        dst.close()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def netns_up(delay_ms: float) -> None:
    """A namespace of our own, reached over a veth pair whose host side delays every packet
    by ``delay_ms`` (so every round trip costs that much more)."""
    netns_down()
    for cmd in (
        f"ip netns add {NETNS}",
        f"ip link add {VETH_HOST} type veth peer name {VETH_NS}",
        f"ip link set {VETH_NS} netns {NETNS}",
        f"ip addr add {HOST_IP}/30 dev {VETH_HOST}",
        f"ip link set {VETH_HOST} up",
        f"ip netns exec {NETNS} ip addr add {NS_IP}/30 dev {VETH_NS}",
        f"ip netns exec {NETNS} ip link set {VETH_NS} up",
        f"ip netns exec {NETNS} ip link set lo up",
        f"tc qdisc add dev {VETH_HOST} root netem delay {delay_ms}ms",
    ):
        subprocess.run(cmd.split(), check=True, capture_output=True)


def netns_down() -> None:
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)  # takes the veth along


def synthetic(dest: Path, modules: int) -> tuple[Path, list[str]]:
    """A C program of ``modules`` small modules compiled to ThinLTO bitcode; (dir, inputs)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    calls = []
    for i in range(modules):
        (dest / f"m{i}.c").write_text(
            f"int f{i}(int x) {{ int s = 0; for (int j = 0; j < x; j++) s += j * {i + 1} ^ x;"
            f" return s + {i}; }}\n"
        )
        calls.append(f"    s += f{i}(argc + {i % 7});")
    decls = "".join(f"int f{i}(int);\n" for i in range(modules))
    (dest / "main.c").write_text(f'#include <stdio.h>\n{decls}int main(int argc, char **argv) '
                                 f'{{\n    int s = 0;\n{chr(10).join(calls)}\n'
                                 f'    printf("%d\\n", s);\n    return 0;\n}}\n')  # fmt: skip
    sources = sorted(p.name for p in dest.glob("*.c"))
    for start in range(0, len(sources), 50):
        batch = sources[start : start + 50]
        subprocess.run([str(LLVM_BIN / "clang"), "-flto=thin", "-O2", "-c", *batch], cwd=dest,
                       check=True, capture_output=True)  # fmt: skip
    return dest, [s[:-2] + ".o" for s in sources]


def capture(cwd: Path, link: list[str], saved: Path, args: list[str]) -> Path:
    """Links once through the capturing distributor (cached-dist ``args``); the job file."""
    shutil.rmtree(saved, ignore_errors=True)
    wrapper = [f"-fthinlto-distributor={sys.executable}",
               f"-Xthinlto-distributor={CAPTURE},{saved},{cached_dist()},--quiet,"
               + ",".join(args)]  # fmt: skip
    timed([*link[:1], *wrapper, *link[1:]], cwd)
    (job_file,) = saved.glob("*.job.json")
    for shard in saved.glob("*.thinlto.bc"):
        shutil.copy(shard, cwd / shard.name)
    return job_file


def stats(cache: Path) -> dict[str, float]:
    done = subprocess.run([cached_dist(), "stats", "--json", f"--cache-dir={cache}"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    result: dict[str, float] = json.loads(done.stdout)
    return result


def serve_from_remote(
    job_file: Path, cwd: Path, cache: Path, url: str, server: Redis
) -> dict[str, float]:
    """Machine B: an empty cache served by the remote; time, round trips, server commands."""
    shutil.rmtree(cache, ignore_errors=True)
    server.call("CONFIG", "RESETSTAT")
    seconds = timed([cached_dist(), f"--cache-dir={cache}", f"--remote-storage={url}",
                     "--quiet", str(job_file)], cwd)  # fmt: skip
    s = stats(cache)
    assert s["remote_hits"] == s["hits"] and s["misses"] == 0, s
    return {"seconds": seconds, "jobs": s["hits"], "round_trips": s["remote_round_trips"],
            "server_commands": sum(server.commands().values()),
            "server_mget": server.commands().get("mget", 0)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.remote", description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--modules", type=int, default=300)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    args = parser.parse_args(argv)
    byte_compile()
    work = WORK / "remote"
    shutil.rmtree(work / "caches", ignore_errors=True)
    caches = work / "caches"
    near = Redis(work / "redis")
    far: Redis | None = None
    proxy: subprocess.Popen[bytes] | None = None
    report: dict[str, object] = {"benchmark": "remote", "date": time.strftime("%Y-%m-%d %H:%M"),
                                 "machine": machine()}  # fmt: skip
    try:
        say("building lua and the generated program")
        lua_src = lua.build(work / "lua", thin=True)
        gen_dir, gen_inputs = synthetic(work / "generated", args.modules)
        programs = {
            "lua": (lua_src, lua.link_command("lua-cap", [])),
            "generated": (gen_dir, [str(LLVM_BIN / "clang"), "-flto=thin", "-O2",
                                    "-fuse-ld=lld", *gen_inputs, "-o", "gen-cap"]),
        }  # fmt: skip
        jobs: dict[str, Path] = {}
        uploads: dict[str, dict[str, float]] = {}
        for name, (cwd, link) in programs.items():
            say(f"{name}: machine A compiles everything and uploads it")
            a_cache = caches / f"{name}-a"
            a_args = [f"--cache-dir={a_cache}", f"--remote-storage={near.url}"]
            jobs[name] = capture(cwd, link, work / f"saved-{name}", a_args)
            s = stats(a_cache)
            uploads[name] = {"jobs": s["misses"], "round_trips": s["remote_round_trips"],
                             "uploads": s["remote_uploads"]}  # fmt: skip
        far_url = ""
        if args.latency_ms > 0:
            say(f"a network namespace with {args.latency_ms:g} ms added per round trip")
            try:
                netns_up(args.latency_ms)
                far = Redis(work / "redis-far", netns=True)
                near.copy_to(far)
                far_url = far.url
                report["latency_by"] = "network namespace, veth, tc netem"
            except subprocess.CalledProcessError as e:
                netns_down()
                say(f"tc netem unavailable ({' '.join(e.cmd)}: {e.stderr.strip()}); "
                    "a delaying TCP proxy on loopback instead")  # fmt: skip
                report["latency_by"] = "benchmarks/delay_proxy.py on loopback (no tc netem)"
                proxy_port = _free_port()
                proxy = subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.delay_proxy", str(proxy_port), near.host,
                     str(near.port), str(args.latency_ms)], cwd=Path(__file__).parent.parent,
                )  # fmt: skip
                far_url = f"redis://127.0.0.1:{proxy_port}/0"
                _wait_port(proxy_port)
                far = near

        # 1. lua: remote alone against local, interleaved.
        local = caches / "lua-a"  # machine A's warm local store
        empty = caches / "lua-b"
        # A local store that has seen this compiler but never lua (it served the generated
        # program): what a developer's machine has when a teammate's results arrive.
        primed = caches / "primed"
        timed([cached_dist(), f"--cache-dir={primed}", "--quiet", f"--remote-storage={near.url}",
               str(jobs["generated"])], gen_dir)  # fmt: skip

        def local_hit() -> float:
            return timed([cached_dist(), f"--cache-dir={local}", "--quiet",
                          str(jobs["lua"])], lua_src)  # fmt: skip

        behind: dict[str, list[float]] = {}  # per configuration: the promotion's remaining time

        def remote_hit(name: str, url: str, start_from: Path | None = None) -> Callable[[], float]:
            def run() -> float:
                shutil.rmtree(empty, ignore_errors=True)  # outside the timed part
                if start_from is not None:
                    shutil.copytree(start_from, empty)
                command = [cached_dist(), f"--cache-dir={empty}", "--quiet",
                           f"--remote-storage={url}", str(jobs["lua"])]  # fmt: skip
                seconds = timed(command, lua_src)
                # The link has ended; its promotion into the local store may still run behind
                # it (store/behind.py). Wait for it outside the timed part, so that it neither
                # competes with the next timed link nor races the removal of this store, and
                # record how much longer it ran.
                settling = time.perf_counter()
                Store(empty).settle()
                behind.setdefault(name, []).append(time.perf_counter() - settling)
                return seconds

            return run

        # A local store that exists but was never used: no entries, no memos (so the link
        # also hashes the toolchain, as the first link into any new store does).
        pristine = caches / "pristine"
        shutil.rmtree(pristine, ignore_errors=True)
        Store(pristine).close()
        remotes = {"remote, no local store": (near.url, None),
                   "remote, empty local store": (near.url, pristine),
                   "remote, store without lua": (near.url, primed)}  # fmt: skip
        if far is not None:
            remotes[f"remote +{args.latency_ms:g} ms, store without lua"] = (far_url, primed)
        configs = {"local": local_hit}
        configs.update({name: remote_hit(name, *how) for name, how in remotes.items()})
        local_hit()  # warm the page cache and .pyc files
        results = interleave(configs, args.rounds, say)
        medians = {name: m.median for name, m in results.items()}
        report["lua_full_hit"] = {
            "jobs": 33, "rounds": args.rounds, "median_s": medians,
            "ratio_remote_to_local": {n: medians[n] / medians["local"] for n in medians},
            "times_s": {n: m.times for n, m in results.items()},
            "promotion_after_link_s": {
                name: sorted(times)[len(times) // 2] for name, times in behind.items()
            },
        }  # fmt: skip

        # 2 and 3. Round trips per link as the program grows, near and far.
        trips: dict[str, object] = {}
        for name, (cwd, _) in programs.items():
            row: dict[str, object] = {"machine_a": uploads[name]}
            row["machine_b"] = serve_from_remote(jobs[name], cwd, caches / f"{name}-b",
                                                 near.url, near)  # fmt: skip
            if far is not None:
                row["machine_b_far"] = serve_from_remote(jobs[name], cwd, caches / f"{name}-b",
                                                         far_url, far)  # fmt: skip
            trips[name] = row
        report["round_trips"] = trips
        report["latency_ms"] = args.latency_ms
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(10)
        near.stop()
        if far is not None and far is not near:
            far.stop()
        if args.latency_ms > 0:
            netns_down()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "remote.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("machine",)}, indent=1,
                     default=str)[:4000])  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
