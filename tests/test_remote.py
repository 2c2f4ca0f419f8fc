"""The remote tier end to end: real redis-server and nginx, two "machines" (two cache and two
build directories), real clang-22/ld.lld-22 links, real faults."""

import http.client
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import xxhash

from .servers import (
    Server,
    requests,
    requires_nginx,
    requires_redis,
    start_nginx,
    start_redis,
)
from .toolchain import (
    CLANG,
    Project,
    build,
    cached_dist_exe,
    requires_toolchain,
    stats,
)

pytestmark = [requires_toolchain, pytest.mark.e2e]


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Server]:
    server = start_redis(tmp_path / "redis")
    yield server
    server.stop()


def shared_compiler(root: Path, sleep: float = 0.0, gate: Path | None = None) -> Path:
    """One remote-compiler wrapper for every machine (the toolchain is part of the key), which
    logs the directory each compilation ran in. With ``gate``, each compilation, once
    logged, waits until that file exists (a test opens the gate when it is ready)."""
    script = root / "counting-clang"
    pause = f"sleep {sleep}\n" if sleep else ""
    if gate is not None:
        pause += f"while [ ! -e '{gate}' ]; do sleep 0.01; done\n"
    script.write_text(f"#!/bin/sh\npwd >> '{root}/compilations.log'\n{pause}"
                      f"exec '{CLANG}' \"$@\"\n")  # fmt: skip
    script.chmod(0o755)
    return script


class Machine:
    """A build directory and a cache directory of its own, sharing only the remote."""

    def __init__(self, root: Path, name: str, program: str = "calc") -> None:
        self.project = build(program, root / name / "build")
        self.cache = root / name / "cache"
        self.root = root
        self.wrapper = root / "counting-clang"
        self.distributor: str | None = None  # the installed cached-dist
        if not self.wrapper.exists():
            shared_compiler(root)

    def link_command(self, remote: str, *extra: str, out: str = "app") -> list[str]:
        return self.project.link_command(
            out, remote_compiler=self.wrapper, distributor=self.distributor,
            distributor_args=[f"--cache-dir={self.cache}", f"--remote-storage={remote}", *extra],
        )  # fmt: skip

    def link(
        self, remote: str, *extra: str, out: str = "app", env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.link_command(remote, *extra, out=out), cwd=self.project.dir,
                              capture_output=True, text=True, env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert self.project.run_program(out) == self.project.expected_output
        return done

    @property
    def compiled(self) -> int:
        log = self.root / "compilations.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return sum(1 for line in lines if line == str(self.project.dir))

    def output(self, out: str = "app") -> bytes:
        return (self.project.dir / out).read_bytes()


def uncached(project: Project) -> bytes:
    done = project.link("plain", distributor_args=["--disable"])
    assert done.returncode == 0, done.stderr
    return (project.dir / "plain").read_bytes()


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("cached-dist: warning:")]


def redis_call(server: Server, *args: str) -> str:
    done = subprocess.run(["redis-cli", "-p", str(server.port), *args],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout


# -- machine B compiles nothing after machine A ---------------------------------------------


def command_calls(server: Server) -> dict[str, int]:
    """Redis INFO commandstats: calls per command since the last CONFIG RESETSTAT."""
    text = redis_call(server, "INFO", "commandstats")
    return {m[1]: int(m[2]) for m in re.finditer(r"cmdstat_(\w+):calls=(\d+)", text)}


def imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}  # fmt: skip


@requires_redis
@requires_nginx
@pytest.mark.parametrize("backend", ["redis", "http"])
def test_machine_b_compiles_nothing_after_machine_a(tmp_path: Path, backend: str) -> None:
    start = start_redis if backend == "redis" else start_nginx
    server = start(tmp_path / backend)
    try:
        a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
        a.link(server.url)
        assert a.compiled == 5
        assert stats(a.cache)["remote_uploads"] == 5
        if backend == "redis":
            redis_call(server, "CONFIG", "RESETSTAT")
        seen = len(requests(server)) if backend == "http" else 0
        env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
        done = b.link(server.url, "-v", env=env)
        assert b.compiled == 0 and "5 jobs: 5 hits (5 from the remote), 0 compiled" in done.stderr
        assert warnings(done.stderr) == []
        where = re.escape(server.url)
        hit = rf"cached-dist: hit  [0-9a-f]{{32}} \S+: remote \({where}\), [0-9.]+ ms"
        assert len(re.findall(hit, done.stderr)) == 5, done.stderr
        s = stats(b.cache)
        assert s["remote_hits"] == 5 and s["remote_misses"] == 0 and s["remote_errors"] == 0
        # One batched lookup for the whole link: B decodes its few shards itself (cheaper
        # than asking for their digests, see test_without_the_native_decoder_...).
        assert s["remote_round_trips"] == 1 and s.get("remote_memo_hits", 0) == 0
        assert s["shards_decoded"] == 5
        assert s["remote_bytes_downloaded"] > 0 and s["entries"] == 5  # promoted locally
        assert b.output() == a.output() == uncached(b.project)
        # What the server saw: one lookup command (Redis), or one concurrent burst of GETs.
        if backend == "redis":
            assert command_calls(server) == {"mget": 1}
            assert "redis" not in imported(done.stderr)  # the lookup speaks RESP itself
        else:
            lookups = requests(server)[seen:]
            assert sorted(m for m, *_ in lookups) == ["GET"] * 5
            assert len({c for *_, c in lookups}) <= 5
        # The next link on B is served by its local store, without asking the remote.
        server.stop()
        done = b.link(server.url, out="again")
        assert warnings(done.stderr) == [] and "5 hits, 0 compiled" in done.stderr
        s = stats(b.cache)
        assert (s["hits"], s["local_hits"], s["remote_hits"]) == (10, 5, 5)
        assert b.output("again") == a.output()
    finally:
        server.stop()


_HIDE_EXTENSION = "import sys; sys.modules['cached_dist.bitcode._shard'] = None\n"


@requires_redis
def test_without_the_native_decoder_shard_digests_come_from_the_remote(
    tmp_path: Path, redis_server: Server
) -> None:
    """Decoding shards in pure Python costs more than a round trip: B asks for the digests A
    decoded (A shares them only then too), so B decodes none."""
    hidden = tmp_path / "cached-dist-python-decoder"
    hidden.write_text(f"#!{sys.executable}\n{_HIDE_EXTENSION}"
                      "from cached_dist.cli import run\nrun()\n")  # fmt: skip
    hidden.chmod(0o755)
    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    for m in (a, b):
        m.distributor = str(hidden)
    a.link(redis_server.url)
    redis_call(redis_server, "CONFIG", "RESETSTAT")
    done = b.link(redis_server.url)
    assert b.compiled == 0 and "5 jobs: 5 hits (5 from the remote)" in done.stderr
    s = stats(b.cache)
    assert s["remote_round_trips"] == 2 and s["remote_memo_hits"] == 5
    assert s.get("shards_decoded", 0) == 0 and s["shards_memoized"] == 5
    assert command_calls(redis_server) == {"mget": 2}
    assert b.output() == a.output() == uncached(b.project)


@requires_redis
def test_a_remote_hit_does_not_wait_for_the_local_store(
    tmp_path: Path, redis_server: Server
) -> None:
    """Promoting remote hits into B's store happens behind the link: with B's index database
    locked by another writer, the link still ends at once, and the entries arrive later."""
    import sqlite3

    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    a.link(redis_server.url)
    from store import Store

    Store(b.cache).close()  # B's store exists (empty), as on a developer's machine
    holder = sqlite3.connect(b.cache / "index" / "cache.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process is writing B's index
        # Waiting for the lock would take diskcache's busy timeout (10 s) and then fail.
        done = subprocess.run(b.link_command(redis_server.url), cwd=b.project.dir,
                              capture_output=True, text=True, timeout=8)  # fmt: skip
        assert done.returncode == 0 and warnings(done.stderr) == [], done.stderr
        assert "5 jobs: 5 hits (5 from the remote), 0 compiled" in done.stderr
        assert b.project.run_program() == b.project.expected_output
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert stats(b.cache)["entries"] == 5  # stats waits for the writer behind the link
    redis_server.stop()
    done = b.link(redis_server.url, out="again")
    assert "5 hits, 0 compiled" in done.stderr and warnings(done.stderr) == []
    assert b.output("again") == a.output()


# -- single-flight across machines -----------------------------------------------------------


@requires_redis
def test_two_machines_at_once_compile_each_job_once(tmp_path: Path, redis_server: Server) -> None:
    shared_compiler(tmp_path, sleep=0.4)
    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    procs = [subprocess.Popen(m.link_command(redis_server.url, "-j2"), cwd=m.project.dir,
                              stderr=subprocess.PIPE, text=True) for m in (a, b)]  # fmt: skip
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert warnings(err) == []
    assert a.compiled + b.compiled == 5  # each job once, in total
    assert a.output() == b.output() == uncached(a.project)
    sa, sb = stats(a.cache), stats(b.cache)
    assert sa["remote_hits"] + sb["remote_hits"] == 5
    assert sa["misses"] + sb["misses"] == 5


@requires_redis
def test_a_dead_holders_claim_is_taken_over_when_its_lease_ends(
    tmp_path: Path, redis_server: Server
) -> None:
    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    a.link(redis_server.url)
    keys = redis_call(redis_server, "--scan", "--pattern", "cached-dist:v1:[0-9a-f]*").split()
    assert len(keys) == 5
    for key in keys:  # a machine claimed every key, then died: its leases run out in 1.5 s
        redis_call(redis_server, "DEL", key)
        claim = key.replace("cached-dist:v1:", "cached-dist:claim:")
        last_claimed = time.monotonic()  # before the claim is made: its lease ends later
        redis_call(redis_server, "SET", claim, "dead-machine", "PX", "1500")
    done = b.link(redis_server.url)
    elapsed = time.monotonic() - last_claimed
    assert b.compiled == 5 and warnings(done.stderr) == []
    assert 1.5 <= elapsed < 15  # the last claim was waited for, not stolen
    assert b.output() == a.output()


# -- faults: never a failed link, never a wrong binary ---------------------------------------


def _one_remote_warning(stderr: str, url: str) -> None:
    found = warnings(stderr)
    assert len(found) == 1, stderr
    assert found[0].startswith(f"cached-dist: warning: remote {url}: ")
    assert found[0].endswith("; continuing without it")
    # In the system's or the client's words: no Python class, no errno tag.
    assert not re.search(r"\b\w+(Error|Exception)\b|\[Errno", found[0]), found[0]


@requires_redis
@requires_nginx
@pytest.mark.parametrize("backend", ["redis", "http"])
def test_no_server_listening(tmp_path: Path, backend: str) -> None:
    server = (start_redis if backend == "redis" else start_nginx)(tmp_path / "gone")
    server.stop()
    a = Machine(tmp_path, "a")
    started = time.monotonic()
    done = a.link(server.url)
    assert time.monotonic() - started < 20
    _one_remote_warning(done.stderr, server.url)
    assert warnings(done.stderr)[0] == \
        f"cached-dist: warning: remote {server.url}: Connection refused; continuing without it"  # fmt: skip
    assert a.compiled == 5 and stats(a.cache)["remote_errors"] == 1
    assert a.output() == uncached(a.project)


@requires_redis
@requires_nginx
@pytest.mark.parametrize("backend", ["redis", "http"])
def test_server_killed_mid_link(tmp_path: Path, backend: str) -> None:
    server = (start_redis if backend == "redis" else start_nginx)(tmp_path / backend)
    shared_compiler(tmp_path, sleep=0.5)
    a = Machine(tmp_path, "a")
    proc = subprocess.Popen(a.link_command(server.url, "-j1"), cwd=a.project.dir,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 30
    while a.compiled < 2 and time.monotonic() < deadline:  # the lookup is done, jobs run
        time.sleep(0.05)
    server.kill()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    _one_remote_warning(err, server.url)
    assert a.compiled == 5 and a.output() == uncached(a.project)


@requires_redis
@requires_nginx
@pytest.mark.parametrize("backend", ["redis", "http"])
def test_server_paused_costs_one_timeout(tmp_path: Path, backend: str) -> None:
    server = (start_redis if backend == "redis" else start_nginx)(tmp_path / backend)
    try:
        a = Machine(tmp_path, "a")
        server.pause()  # accepts connections (the kernel does), answers nothing
        started = time.monotonic()
        done = a.link(server.url, "--remote-timeout=0.5")
        elapsed = time.monotonic() - started
        _one_remote_warning(done.stderr, server.url)
        assert "timed out (after 0.5 s)" in done.stderr
        assert elapsed < 10, elapsed  # one timeout, not one per job
        assert a.compiled == 5 and a.output() == uncached(a.project)
    finally:
        server.stop()


@requires_redis
def test_garbage_values_are_misses(tmp_path: Path, redis_server: Server) -> None:
    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    a.link(redis_server.url)
    import redis

    client = redis.Redis(port=redis_server.port)
    keys = list(client.scan_iter("cached-dist:v1:[0-9a-f]*"))
    good = client.get(keys[0])
    assert isinstance(good, bytes) and good.startswith(b"CDR3")
    # Every value replaced: garbage, an empty header, a cut header, nothing, a cut value.
    empty = b"CDR2\x00\x00\x00\x02" + xxhash.xxh3_128_digest(b"{}") + b"{}"
    own = client.get(keys[4])
    assert isinstance(own, bytes)
    for key, value in zip(keys, [b"garbage", empty, b"CDR2", b"", own[:-1]], strict=True):
        client.set(key, value)
    client.close()
    done = b.link(redis_server.url, "-v")
    assert warnings(done.stderr) == [] and b.compiled == 5
    where = re.escape(redis_server.url)
    damaged = rf"cached-dist: remote {where}: a damaged value under [0-9a-f]{{32}}; a miss"
    assert len(re.findall(damaged, done.stderr)) == 5, done.stderr
    s = stats(b.cache)
    assert s["remote_corrupt"] == 5 and s["remote_hits"] == 0 and s["remote_wrong_key"] == 0
    assert b.output() == uncached(b.project)


@requires_redis
def test_flipped_output_byte_is_a_miss(tmp_path: Path, redis_server: Server) -> None:
    import redis

    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    a.link(redis_server.url)
    client = redis.Redis(port=redis_server.port)
    for key in client.scan_iter("cached-dist:v1:[0-9a-f]*"):
        old = client.get(key)
        assert isinstance(old, bytes)
        value = bytearray(old)
        value[-10] ^= 0x01  # inside the object file, after the header
        client.set(key, bytes(value))
    client.close()
    done = b.link(redis_server.url)
    assert warnings(done.stderr) == [] and b.compiled == 5
    assert stats(b.cache)["remote_corrupt"] == 5
    assert b.output() == a.output() == uncached(b.project)


def remote_value(server: Server, key: str) -> bytes | None:
    """The value the server holds for ``key``, as a client of its own protocol reads it."""
    if server.url.startswith("redis"):
        import redis

        client = redis.Redis(port=server.port)
        try:
            value = client.get(f"cached-dist:v1:{key}")
        finally:
            client.close()
        assert value is None or isinstance(value, bytes)
        return value
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", f"/cache/{key[:2]}/{key}")
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    return data if response.status == 200 else None


def set_remote_value(server: Server, key: str, value: bytes) -> None:
    """Stores ``value`` under ``key`` as any writer of the server can."""
    if server.url.startswith("redis"):
        import redis

        client = redis.Redis(port=server.port)
        try:
            assert client.set(f"cached-dist:v1:{key}", value)
        finally:
            client.close()
        return
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("PUT", f"/cache/{key[:2]}/{key}", value)
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()
    assert response.status in (201, 204), response.status


def keys_by_module(stderr: str) -> dict[str, str]:
    """Module -> key, from a link's --verbose lines for the jobs it compiled."""
    return dict((m[2], m[1]) for m in re.finditer(r"miss ([0-9a-f]{32}) (\S+): compiled", stderr))


@requires_redis
@requires_nginx
@pytest.mark.parametrize("backend", ["redis", "http"])
def test_a_valid_value_under_another_key_is_a_counted_miss(tmp_path: Path, backend: str) -> None:
    """Another job's whole, valid value under one of P1's keys (a writer's bug, a proxy
    mixing up paths): P1 relinked from an empty local cache is right, the key is a counted
    miss, and nothing of the other value reaches the local store."""
    from store import Store, entry

    server = (start_redis if backend == "redis" else start_nginx)(tmp_path / backend)
    try:
        p1, p2 = Machine(tmp_path, "p1", "calc"), Machine(tmp_path, "p2", "tally")
        keys1 = keys_by_module(p1.link(server.url, "-v").stderr)
        keys2 = keys_by_module(p2.link(server.url, "-v").stderr)
        assert len(keys1) == 5 and "main.o" in keys1 and "main.o" in keys2
        swapped, source = keys1["main.o"], keys2["main.o"]
        other = remote_value(server, source)
        assert other is not None and entry.decode(other, source)
        set_remote_value(server, swapped, other)  # the other key's value, byte for byte
        assert remote_value(server, swapped) == other
        other_digests = {d for d, _ in entry.decode(other, source)[0].values()}

        c = Machine(tmp_path, "c", "calc")  # P1 again, on a machine with an empty cache
        done = c.link(server.url, "-v")  # exit 0 and the program prints what calc prints
        assert warnings(done.stderr) == []
        assert f"remote {server.url}: the value of another key under {swapped}; a miss" in (
            done.stderr)  # fmt: skip
        assert c.compiled == 1 and keys_by_module(done.stderr) == {"main.o": swapped}
        assert c.output() == p1.output() == uncached(c.project)
        s = stats(c.cache)
        assert (s["remote_wrong_key"], s["remote_corrupt"]) == (1, 0)
        assert (s["remote_hits"], s["remote_misses"], s["entries"]) == (4, 1, 5)

        # Nothing wrong was promoted: verify finds nothing, and every local entry is P1's.
        checked = subprocess.run([cached_dist_exe(), "verify", f"--cache-dir={c.cache}"],
                                 capture_output=True, text=True)  # fmt: skip
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "0 corrupt blobs removed, 0 entries dropped" in checked.stdout
        local, own = Store(c.cache), Store(p1.cache)
        found, expected = local.lookup(list(keys1.values())), own.lookup(list(keys1.values()))
        assert {k: m.outputs for k, m in found.items()} == {
            k: m.outputs for k, m in expected.items()}  # fmt: skip
        assert not other_digests & {d for m in found.values() for d, _ in m.outputs.values()}
        assert local.lookup([source]) == {}
        local.close()
        own.close()

        # The remote holds C's own value for the key again (uploaded after its compile).
        healed = remote_value(server, swapped)
        assert healed is not None and healed != other and entry.decode(healed, swapped)
        server.stop()  # and C's next link is served by its local store alone
        done = c.link(server.url, out="again")
        assert "5 hits, 0 compiled" in done.stderr and c.output("again") == p1.output()
    finally:
        server.stop()


@requires_redis
def test_a_value_of_the_previous_format_is_a_miss_and_replaced(
    tmp_path: Path, redis_server: Server
) -> None:
    """Values written before they named their key (CDR1) are misses, neither damage nor
    another key's; the link uploads its own, which the next machine hits."""
    import json

    from store import entry

    a, b, c = Machine(tmp_path, "a"), Machine(tmp_path, "b"), Machine(tmp_path, "c")
    keys = keys_by_module(a.link(redis_server.url, "-v").stderr)
    key = keys["main.o"]
    current = remote_value(redis_server, key)
    assert current is not None
    outputs, meta = entry.decode(current, key)
    listed = [[role, digest, len(data)] for role, (digest, data) in outputs.items()]
    header = json.dumps({"outputs": listed, "meta": meta}, separators=(",", ":")).encode()
    old = b"".join([b"CDR1", len(header).to_bytes(4, "big"), header,
                    *(data for _, data in outputs.values())])  # fmt: skip
    set_remote_value(redis_server, key, old)
    done = b.link(redis_server.url, "-v")
    assert warnings(done.stderr) == [] and b.compiled == 1
    assert f"a value of another format under {key}; a miss" in done.stderr
    s = stats(b.cache)
    assert (s["remote_hits"], s["remote_misses"]) == (4, 1)
    assert (s["remote_corrupt"], s["remote_wrong_key"]) == (0, 0)
    assert b.output() == a.output() == uncached(b.project)
    replaced = remote_value(redis_server, key)
    assert replaced is not None and replaced.startswith(b"CDR3")
    c.link(redis_server.url)
    assert c.compiled == 0 and stats(c.cache)["remote_hits"] == 5


@requires_redis
def test_server_out_of_memory(tmp_path: Path) -> None:
    # DEBUG is refused unless enabled (Redis 7), and redis-cli exits 0 on a refusal: without
    # both, the server was ~100 KB short of full, and whether a link's first entries fit
    # depended on their order (one in three links of B under load had a remote hit).
    server = start_redis(tmp_path / "small", "--maxmemory", "1mb", "--maxmemory-policy",
                         "noeviction", "--enable-debug-command", "local")  # fmt: skip
    try:
        a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
        filled = subprocess.run(["redis-cli", "-p", str(server.port), "DEBUG", "POPULATE",
                                 "20000", "filler", "100"], capture_output=True, text=True)  # fmt: skip
        assert filled.stdout.strip() == "OK", filled
        assert "OOM" in redis_call(server, "SET", "one-more", "x")  # full
        done = a.link(server.url)
        _one_remote_warning(done.stderr, server.url)
        assert "maxmemory" in done.stderr  # the claims were refused: the server is full
        assert a.compiled == 5 and a.output() == uncached(a.project)
        done = b.link(server.url)  # nothing was stored, and B is not held up by claims
        assert b.compiled == 5 and b.output() == a.output()
    finally:
        server.stop()


@requires_redis
def test_read_only_client_reads_and_writes_nothing(tmp_path: Path, redis_server: Server) -> None:
    a, b, c = Machine(tmp_path, "a"), Machine(tmp_path, "b"), Machine(tmp_path, "c")
    b.link(redis_server.url, "--remote-read-only")
    assert b.compiled == 5 and redis_call(redis_server, "DBSIZE").strip() == "0"
    a.link(redis_server.url)
    done = c.link(redis_server.url, "--remote-read-only")
    assert c.compiled == 0 and "5 hits" in done.stderr
    assert (
        len(redis_call(redis_server, "--scan", "--pattern", "cached-dist:v1:[0-9a-f]*").split())
        == 5
    )
    assert redis_call(redis_server, "--scan", "--pattern", "cached-dist:claim:*").split() == []
    assert stats(c.cache)["remote_uploads"] == 0


@requires_redis
def test_read_only_server(tmp_path: Path) -> None:
    """A read-only replica (its primary is gone): lookups work, writes are refused."""
    server = start_redis(tmp_path / "replica", "--replicaof", "127.0.0.1", "1")
    try:
        a = Machine(tmp_path, "a")
        done = a.link(server.url)
        _one_remote_warning(done.stderr, server.url)
        assert "READONLY" in done.stderr or "read only" in done.stderr
        assert a.compiled == 5 and a.output() == uncached(a.project)
    finally:
        server.stop()


@requires_nginx
def test_http_server_refusing_writes(tmp_path: Path) -> None:
    server = start_nginx(tmp_path / "ro", read_only=True)
    try:
        a = Machine(tmp_path, "a")
        done = a.link(server.url)
        _one_remote_warning(done.stderr, server.url)
        assert "HTTP 403" in done.stderr
        assert a.compiled == 5 and a.output() == uncached(a.project)
    finally:
        server.stop()


@requires_redis
def test_password_never_printed(tmp_path: Path) -> None:
    server = start_redis(tmp_path / "auth", password="s3cret-pw")
    try:
        a, b, c = Machine(tmp_path, "a"), Machine(tmp_path, "b"), Machine(tmp_path, "c")
        done = a.link(server.url, "-v")
        assert a.compiled == 5 and "s3cret-pw" not in done.stderr
        assert stats(a.cache)["remote_uploads"] == 5
        done = b.link(server.url, "-v")
        assert b.compiled == 0 and "s3cret-pw" not in done.stderr
        assert "remote (redis://:***@127.0.0.1" in done.stderr
        # The password may come from the environment instead of the URL.
        env = {**os.environ, "CACHED_DIST_REMOTE_PASSWORD": "s3cret-pw"}
        bare = server.url.replace(":s3cret-pw@", "")
        done = c.link(bare, "-v", env=env)
        assert c.compiled == 0 and "s3cret-pw" not in done.stderr
        # A wrong password: one warning naming neither password, and a correct binary.
        d = Machine(tmp_path, "d")
        wrong = server.url.replace("s3cret-pw", "wrong-pw")
        done = d.link(wrong, "-v")
        _one_remote_warning(done.stderr, "redis://:***@127.0.0.1:" + str(server.port) + "/0")
        assert "wrong-pw" not in done.stderr and "s3cret-pw" not in done.stderr
        assert d.compiled == 5 and d.output() == uncached(d.project)
        assert stats(d.cache)["remote_errors"] == 1
    finally:
        server.stop()


def test_bad_url_is_one_usage_error_without_the_password(tmp_path: Path) -> None:
    from .toolchain import cached_dist_exe

    done = subprocess.run([cached_dist_exe(), "--remote-storage=ftp://u:pw123@host/x", "x.json"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("cached-dist: error: ") and len(done.stderr.splitlines()) == 1
    assert "pw123" not in done.stderr and "ftp://u:***@host/x" in done.stderr
