"""The REAPI cache tier against a real buildbox-casd: machines share results through its
ActionCache and CAS, each entry a real Action, and every fault costs at most a warning."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from .servers import Casd, casd, requires_casd, start_casd  # noqa: F401
from .test_remote import Machine, imported, shared_compiler, uncached, warnings
from .toolchain import requires_toolchain, stats

pytestmark = [requires_toolchain, requires_casd, pytest.mark.e2e]


def test_machine_b_compiles_nothing_after_machine_a(tmp_path: Path, casd: Casd) -> None:  # noqa: F811
    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    done = a.link(casd.url, "-v")
    assert a.compiled == 5 and warnings(done.stderr) == [], done.stderr
    s = stats(a.cache)
    assert s["remote_uploads"] == 5 and s["reapi_uploads"] == 5 and s["reapi_misses"] == 5
    assert s["reapi_bytes_uploaded"] > 0
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    done = b.link(casd.url, "-v", env=env)
    assert b.compiled == 0 and "5 jobs: 5 hits (5 from the remote), 0 compiled" in done.stderr
    assert warnings(done.stderr) == []
    # The lookups speak gRPC themselves (store/remote/reapi_lookup.py): a hit from the tier
    # imports neither grpcio nor protobuf, whose import costs more than the rest of the link.
    modules = imported(done.stderr)
    assert "store.remote.reapi_lookup" in modules  # the measurement works
    assert sorted(m for m in modules if m.split(".")[0] in ("grpc", "google")
                  or m.startswith("store.remote.reapi_pb")) == []  # fmt: skip
    # Nor, without --verbose (whose source-path hint reads more), what a local full hit does
    # without (tests/test_hot_path.py): the tier checks what it reads without re, and
    # suppresses errors without contextlib.
    # A store that has seen this compiler (it linked another program), as on a developer's
    # machine: a new store's first link creates its databases and identifies the compiler.
    seen = Machine(tmp_path, "seen", program="shapes")
    seen.link(casd.url)
    c = Machine(tmp_path, "c")
    c.cache = seen.cache
    quiet = c.link(casd.url, env=env)
    assert c.compiled == 0 and "5 jobs: 5 hits (5 from the remote), 0 compiled" in quiet.stderr
    assert sorted({"re", "enum", "contextlib", "json", "subprocess"} & imported(quiet.stderr)) == []
    where = re.escape(casd.url)
    hit = rf"cached-dist: hit  [0-9a-f]{{32}} \S+: remote \({where}\), [0-9.]+ ms"
    assert len(re.findall(hit, done.stderr)) == 5, done.stderr
    s = stats(b.cache)
    assert (s["remote_hits"], s["reapi_hits"], s["reapi_misses"], s["remote_errors"]) == (
        5,
        5,
        0,
        0,
    )
    # One round of concurrent GetActionResult calls, one of BatchReadBlobs (casd does not
    # inline outputs in the ActionCache's answer), however many jobs.
    assert s["remote_round_trips"] == 2, s
    assert s["reapi_bytes_downloaded"] > 0 and s["entries"] == 5  # promoted locally
    assert b.output() == a.output() == uncached(b.project)
    # The next link on B is served by its local store, without asking the server.
    done = b.link(casd.url, out="again")
    assert warnings(done.stderr) == [] and "5 hits, 0 compiled" in done.stderr
    assert stats(b.cache)["remote_round_trips"] == 2


def test_the_entry_is_a_real_action(tmp_path: Path, casd: Casd) -> None:  # noqa: F811
    """What a REAPI tool finds under each key: a real Action (the compile's Command with
    canonical names and the toolchain in the platform, the key file as input root) whose
    ActionResult lists the object by its canonical name."""
    from store.remote.reapi_grpc import Client
    from store.remote.reapi_pb import remote_execution_pb2 as rpb

    a = Machine(tmp_path, "a", program="shapes")
    done = a.link(casd.url, "-v")
    stored = re.findall(rf"remote {re.escape(casd.url)}: stored ([0-9a-f]{{32}}) as Action "
                        r"([0-9a-f]{64})/(\d+)", done.stderr)  # fmt: skip
    assert len(stored) == 4, done.stderr
    client = Client(casd.url, connect_timeout=5, timeout=30)
    try:
        digests = [rpb.Digest(hash=h, size_bytes=int(n)) for _, h, n in stored]
        results = client.get_action_results(digests)
        actions = client.read_blobs(digests)
        for (key, h, _), result in zip(stored, results, strict=True):
            action = rpb.Action.FromString(actions[h])
            blobs = client.read_blobs([action.command_digest, action.input_root_digest])
            command = rpb.Command.FromString(blobs[action.command_digest.hash])
            assert command.arguments[0] == "clang" and "-O2" in command.arguments
            assert command.arguments[-4:] == ["module.o", "-fthinlto-index=shard.thinlto.bc",
                                              "-o", "outputs/0.o"]  # fmt: skip
            assert list(command.output_paths) == ["outputs/0.o"]
            props = {p.name: p.value for p in command.platform.properties}
            assert set(props) == {"ISA", "OSFamily", "toolchain"} and props["OSFamily"] == "linux"
            assert action.platform == command.platform
            root = rpb.Directory.FromString(blobs[action.input_root_digest.hash])
            assert [f.name for f in root.files] == ["cached-dist.key"]
            marker = client.read_blobs([root.files[0].digest])[root.files[0].digest.hash]
            assert marker == f"cached-dist key {key}\n".encode()
            assert result is not None and [f.path for f in result.output_files] == ["outputs/0.o"]
            obj = client.read_blobs([result.output_files[0].digest])
            assert next(iter(obj.values()))[:4] == b"\x7fELF"
    finally:
        client.close()


def test_relink_from_another_directory_all_hits(tmp_path: Path, casd: Casd) -> None:  # noqa: F811
    """Regular and thin archives, absolute paths: B's per-link names differ from A's, the
    Actions (from the keys' ingredients) do not."""
    for archive in ("regular", "thin"):
        from .toolchain import build

        root = tmp_path / archive
        root.mkdir()
        a, b = Machine(root, "a"), Machine(root, "b")
        for m in (a, b):
            m.project = build("calc", m.project.dir, archive)
            m.project.link_inputs = [str(m.project.dir / p) for p in m.project.link_inputs]
        a.link(casd.url)
        done = b.link(casd.url)
        assert b.compiled == 0 and "5 hits (5 from the remote)" in done.stderr, done.stderr
        assert b.output() == uncached(b.project)


def test_wrong_instance_name_is_one_warning(tmp_path: Path, casd: Casd) -> None:  # noqa: F811
    a = Machine(tmp_path, "a")
    done = a.link(casd.url, "--remote-instance-name=no-such-instance")
    found = warnings(done.stderr)
    assert len(found) == 1, done.stderr
    assert found[0].startswith(f"cached-dist: warning: remote {casd.url}: GetActionResult: ")
    assert found[0].endswith("; continuing without it")
    assert a.compiled == 5 and stats(a.cache)["remote_errors"] == 1
    assert a.output() == uncached(a.project)


class _Recorder:
    """A gRPC server in the test process that records what each call carried and answers
    every ActionCache lookup NOT_FOUND, GetCapabilities with ``capabilities`` if given, and
    everything else UNIMPLEMENTED."""

    def __init__(self, sock: str, capabilities: bytes = b"") -> None:
        import grpc

        self.seen: list[tuple[str, dict[str, str | bytes], bytes]] = []

        class Handler(grpc.GenericRpcHandler):
            def service(
                inner, details: grpc.HandlerCallDetails
            ) -> grpc.RpcMethodHandler[bytes, bytes]:
                method = details.method

                def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
                    self.seen.append((method, dict(context.invocation_metadata()), request))
                    if method.endswith("/GetActionResult"):
                        context.abort(grpc.StatusCode.NOT_FOUND, "no such action")
                    if method.endswith("/GetCapabilities") and capabilities:
                        return capabilities
                    context.abort(grpc.StatusCode.UNIMPLEMENTED, "not here")

                return grpc.unary_unary_rpc_method_handler(answer)

        from concurrent import futures

        self.server = grpc.server(futures.ThreadPoolExecutor(4), handlers=[Handler()])
        self.server.add_insecure_port(f"unix:{sock}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(None)


def test_headers_and_instance_name_are_sent_and_never_printed(tmp_path: Path) -> None:
    """Every call carries the headers and the instance name; a header value (an API key)
    appears in no message, even when the server fails."""
    from store.remote.reapi_pb import remote_execution_pb2 as rpb

    sock = str(tmp_path / "grpc.sock")
    recorder = _Recorder(sock)
    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    secret = "s3cret-api-key-value"
    try:
        done = a.link(f"unix:{sock}", f"--remote-header=X-Api-Key={secret}", "-v",
                      "--remote-instance-name=team/main", "--remote-header=x-other=1")  # fmt: skip
    finally:
        recorder.stop()
    assert secret not in done.stderr
    lookups = [(meta, request) for method, meta, request in recorder.seen
               if method.endswith("/GetActionResult")]  # fmt: skip
    assert len(lookups) == 5
    for meta, request in lookups:
        assert meta["x-api-key"] == secret and meta["x-other"] == "1"
        raw = meta["build.bazel.remote.execution.v2.requestmetadata-bin"]
        assert isinstance(raw, bytes)
        tool = rpb.RequestMetadata.FromString(raw)
        assert tool.tool_details.tool_name == "cached-dist"
        assert rpb.GetActionResultRequest.FromString(request).instance_name == "team/main"
    # The uploads failed (UNIMPLEMENTED): one warning, the key hidden.
    found = warnings(done.stderr)
    assert len(found) == 1 and "UNIMPLEMENTED" in found[0], done.stderr
    # A server that is gone: one warning, still no key; from the environment as well.
    env = {**os.environ, "CACHED_DIST_REMOTE_HEADER": f"x-api-key={secret}\nx-other=1"}
    done = b.link(f"unix:{sock}", "-v", env=env)
    assert len(warnings(done.stderr)) == 1 and secret not in done.stderr
    assert a.output() == b.output() == uncached(a.project)


def test_a_server_refusing_updates_is_read_only_said_once(tmp_path: Path) -> None:
    from store.remote.reapi_pb import remote_execution_pb2 as rpb

    caps = rpb.ServerCapabilities(cache_capabilities=rpb.CacheCapabilities(
        digest_functions=[rpb.DigestFunction.SHA256],
        action_cache_update_capabilities=rpb.ActionCacheUpdateCapabilities(update_enabled=False),
    ))  # fmt: skip
    sock = str(tmp_path / "grpc.sock")
    recorder = _Recorder(sock, caps.SerializeToString())
    try:
        a = Machine(tmp_path, "a")
        shared_compiler(tmp_path, sleep=0.1)  # results arrive apart: several upload batches
        done = a.link(f"unix:{sock}")
    finally:
        recorder.stop()
    found = warnings(done.stderr)
    assert found == [f"cached-dist: warning: remote unix:{sock}: the server does not accept "
                     "action cache updates (update_enabled: false); using it read-only"]  # fmt: skip
    methods = [method.rsplit("/", 1)[1] for method, _, _ in recorder.seen]
    assert sorted(set(methods)) == ["GetActionResult", "GetCapabilities"], methods
    assert stats(a.cache)["remote_uploads"] == 0 and a.compiled == 5


def test_read_only_tier_writes_nothing(tmp_path: Path) -> None:
    server = start_casd(tmp_path / "casd")
    try:
        a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
        a.link(server.url, "--remote-read-only")
        assert stats(a.cache)["remote_uploads"] == 0
        b.link(server.url)
        assert b.compiled == 5  # nothing was there to hit
        assert stats(b.cache)["reapi_uploads"] == 5
        done = a.link(server.url, "--remote-read-only", out="again")
        assert "5 hits" in done.stderr
    finally:
        server.stop()


def test_server_killed_mid_link(tmp_path: Path) -> None:
    server = start_casd(tmp_path / "casd")
    shared_compiler(tmp_path, sleep=0.5)
    a = Machine(tmp_path, "a")
    proc = subprocess.Popen(a.link_command(server.url, "-j1"), cwd=a.project.dir,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while a.compiled < 2 and time.monotonic() < deadline:  # the lookup is done, jobs run
        time.sleep(0.05)
    server.kill()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    found = warnings(err)
    assert len(found) == 1 and found[0].startswith(f"cached-dist: warning: remote {server.url}: ")
    assert a.compiled == 5 and a.output() == uncached(a.project)
    server.stop()


def test_server_paused_costs_one_timeout(tmp_path: Path) -> None:
    server = start_casd(tmp_path / "casd")
    try:
        a = Machine(tmp_path, "a")
        server.pause()  # the socket accepts, nothing answers
        started = time.monotonic()
        done = a.link(server.url, "--remote-timeout=0.5")
        elapsed = time.monotonic() - started
        found = warnings(done.stderr)
        assert len(found) == 1 and "timed out (after " in found[0], done.stderr
        assert elapsed < 30, elapsed  # one timeout, not one per job
        assert a.compiled == 5 and a.output() == uncached(a.project)
    finally:
        server.stop()


def test_casd_proxy_in_front_of_another_casd(tmp_path: Path, casd: Casd) -> None:  # noqa: F811
    """The per-machine topology: each machine's casd proxies to the shared one."""
    proxies = [start_casd(tmp_path / f"proxy{i}", remote=casd.url) for i in range(2)]
    try:
        a, b = Machine(tmp_path, "a", program="tally"), Machine(tmp_path, "b", program="tally")
        a.link(proxies[0].url)
        done = b.link(proxies[1].url)
        assert b.compiled == 0 and "from the remote" in done.stderr, done.stderr
        assert b.output() == uncached(b.project)
        # The shared server holds the results: a machine talking to it directly hits too.
        c = Machine(tmp_path, "c", program="tally")
        c.link(casd.url)
        assert c.compiled == 0
    finally:
        for proxy in proxies:
            proxy.stop()


ARGS = ["-O2", "<module>", "-fthinlto-index=<shard>", "-o", "<output0>"]


def _value(key: str, data: bytes, **meta: object) -> bytes:
    from store.entry import encode

    return encode(key, {"output0": data}, {"duration": 0.5, **meta})


def test_a_result_naming_another_key_is_a_miss(casd: Casd) -> None:  # noqa: F811
    """An ActionResult stored for key A, copied under key B's Action (a hostile writer, a
    proxy mixing up digests), is never served for B: a counted miss."""
    from store.entry import decode
    from store.remote.reapi import ReapiStorage

    tier = ReapiStorage(casd.url, connect_timeout=5, timeout=30)
    try:
        key_a, key_b = os.urandom(16).hex(), os.urandom(16).hex()
        for key in (key_a, key_b):
            tier.describe(key, ARGS, 1, "tc")
        tier.put_many([(key_a, _value(key_a, b"object of A" * 100, diagnostics="warning: A\n"))])
        [value] = tier.get_many([key_a])
        assert value is not None
        decoded = decode(value, key_a)
        assert decoded[0]["output0"][1] == b"object of A" * 100
        assert decoded[1]["diagnostics"] == "warning: A\n" and decoded[1]["duration"] == 0.5
        assert tier.get_many([key_b]) == [None] and tier.wrong_key == 0
        # Copy A's result under B's Action digest, as a server could.
        from store.remote.reapi_pb import remote_execution_pb2 as rpb

        (ha, na), (hb, nb) = tier._actions[key_a][0], tier._actions[key_b][0]
        digest_a, digest_b = rpb.Digest(hash=ha, size_bytes=na), rpb.Digest(hash=hb, size_bytes=nb)
        [result_a] = tier.client.get_action_results([digest_a])
        assert result_a is not None
        tier.client.update_action_results([(digest_b, result_a)])
        assert tier.get_many([key_b]) == [None] and tier.wrong_key == 1
        # Keys never described (memos) are misses without a call.
        trips = tier.round_trips
        assert tier.get_many(["memo-3-shard-x"]) == [None] and tier.round_trips == trips
    finally:
        tier.close()


def test_blobs_above_the_batch_limit_go_by_bytestream(casd: Casd) -> None:  # noqa: F811
    from store.entry import decode
    from store.remote.reapi import BATCH_LIMIT, ReapiStorage

    tier = ReapiStorage(casd.url, connect_timeout=5, timeout=60)
    try:
        key = os.urandom(16).hex()
        tier.describe(key, ARGS, 1, "tc")
        big = os.urandom(BATCH_LIMIT + 3 * 2**20)  # written and read by ByteStream
        tier.put_many([(key, _value(key, big))])
        assert tier.bytes_uploaded >= len(big)
        [value] = tier.get_many([key])
        assert value is not None
        assert decode(value, key)[0]["output0"][1] == big
    finally:
        tier.close()
