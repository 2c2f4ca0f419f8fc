"""The remote tier a team runs for months (issue 43), end to end on real servers and links:
compressed values, signed values, expiry on Redis, one tier over several Redis servers."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from .servers import Server, requires_nginx, requires_redis, start_nginx, start_redis
from .test_remote import (
    Machine,
    keys_by_module,
    redis_call,
    remote_value,
    set_remote_value,
    shared_compiler,
    uncached,
    warnings,
)
from .toolchain import cached_dist_exe, requires_toolchain, stats

pytestmark = [requires_toolchain, pytest.mark.e2e]


def _header(value: bytes) -> dict[str, object]:
    from store import entry

    header: dict[str, object] = json.loads(
        value[entry.FRAME : entry.FRAME + int.from_bytes(value[4:8], "big")]
    )
    return header


@requires_redis
@requires_nginx
@pytest.mark.parametrize("backend", ["redis", "http"])
def test_compressed_and_plain_values_round_trip_mixed_with_old_ones(
    tmp_path: Path, backend: str
) -> None:
    """A writes plain values (--compression-level=0), B (its store compressing) hits them all;
    a compressed upload is smaller and a plain reader hits it; a value of the format before
    compression (CDR2) is still a hit. Every binary is what a link without cache makes."""
    from store import entry

    server = (start_redis if backend == "redis" else start_nginx)(tmp_path / backend)
    try:
        a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
        keys = keys_by_module(a.link(server.url, "-v", "--compression-level=0").stderr)
        plain = {k: remote_value(server, k) for k in keys.values()}
        assert all(v is not None and _header(v)["compression"] == "none" for v in plain.values())
        plain_bytes = stats(a.cache)["remote_bytes_uploaded"]
        done = b.link(server.url, "--local-compression-level=1")
        assert b.compiled == 0 and "5 hits (5 from the remote)" in done.stderr
        assert b.output() == a.output() == uncached(b.project)
        # B's local store, told to, keeps them compressed.
        blobs = [p for p in (b.cache / "blobs").rglob("*") if p.is_file()]
        assert blobs and all(p.suffix == ".zst" for p in blobs)
        s = stats(b.cache)
        assert 0 < s["bytes_stored"] < s["bytes_original"] / 2

        # C compiles with compression on: it uploads far less than A (these objects are a few
        # KiB, headers included: ~2x here; real programs' ratios are in docs/benchmarks/remote.md).
        c = Machine(tmp_path, "c")
        for key in keys.values():  # the values gone: C compiles and uploads
            set_remote_value(server, key, b"gone")
        c.link(server.url)
        assert c.compiled == 5
        # By default the local store keeps its objects compressed too (the native placer
        # decompresses them).
        local = [p for p in (c.cache / "blobs").rglob("*") if p.is_file()]
        assert local and all(p.suffix == ".zst" for p in local)
        packed = {k: remote_value(server, k) for k in keys.values()}
        assert all(v is not None and _header(v)["compression"] == "zstd" for v in packed.values())
        assert stats(c.cache)["remote_bytes_uploaded"] * 1.5 <= plain_bytes

        # One value written as before issue 43 (CDR2): read as ever, beside compressed ones.
        key = keys["main.o"]
        value = packed[key]
        assert value is not None
        outputs, meta = entry.decode(value, key)
        listed = [[role, digest, len(data)] for role, (digest, data) in outputs.items()]
        header = json.dumps({"key": key, "outputs": listed, "meta": meta},
                            separators=(",", ":")).encode()  # fmt: skip
        import xxhash

        old = b"".join([b"CDR2", len(header).to_bytes(4, "big"), xxhash.xxh3_128_digest(header),
                        header, *(data for _, data in outputs.values())])  # fmt: skip
        set_remote_value(server, key, old)
        d = Machine(tmp_path, "d")
        done = d.link(server.url, "--compression-level=0", "--local-compression-level=0")
        assert d.compiled == 0 and "5 hits (5 from the remote)" in done.stderr
        assert warnings(done.stderr) == [] and d.output() == a.output()
        assert all(p.suffix == "" for p in (d.cache / "blobs").rglob("*") if p.is_file())
    finally:
        server.stop()


def _key_file(path: Path, content: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(content)
    path.chmod(mode)
    return path


@requires_redis
def test_a_signed_tier_uses_only_values_signed_with_its_key(tmp_path: Path) -> None:
    """Values replaced by unsigned ones, by ones signed with another key and by another
    key's valid signed value: all misses, counted, one warning; the binary is right."""
    from store import entry

    server = start_redis(tmp_path / "redis")
    try:
        team = _key_file(tmp_path / "team.key", b"correct horse battery staple\n")
        other = b"another team's key"
        a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
        signed = f"--remote-signing-key={team}"
        keys = keys_by_module(a.link(server.url, "-v", signed).stderr)
        values = {m: remote_value(server, k) for m, k in keys.items()}
        assert all(v is not None and _header(v)["mac"] == "hmac-sha256" for v in values.values())
        team_key = team.read_bytes().rstrip(b"\n")
        for v, k in zip(values.values(), keys.values(), strict=True):
            assert v is not None and entry.decode(v, k, team_key)

        mods = sorted(keys)
        unsigned_mod, other_mod, swapped_mod = mods[0], mods[1], mods[2]

        def reencode(module: str, signing_key: bytes | None) -> bytes:
            value = values[module]
            assert value is not None
            outputs, meta = entry.decode(value, keys[module])
            return entry.encode(keys[module], {r: d for r, (_, d) in outputs.items()}, meta,
                                level=1, signing_key=signing_key)  # fmt: skip

        set_remote_value(server, keys[unsigned_mod], reencode(unsigned_mod, None))
        set_remote_value(server, keys[other_mod], reencode(other_mod, other))
        theirs = values[mods[3]]
        assert theirs is not None
        set_remote_value(server, keys[swapped_mod], theirs)  # valid, signed, another key's

        log = tmp_path / "links.jsonl"
        done = b.link(server.url, "-v", signed, f"--stats-log={log}")
        assert b.compiled == 3 and b.output() == a.output() == uncached(b.project)
        s = stats(b.cache)
        assert (s["remote_hits"], s["remote_misses"]) == (2, 3)
        assert (s["remote_rejected"], s["remote_wrong_key"], s["remote_corrupt"]) == (2, 1, 0)
        # The link's line in the stats log says the same, the remote's share included.
        (line,) = (json.loads(text) for text in log.read_text().splitlines())
        assert (line["jobs"], line["hits"], line["remote_hits"], line["compiled"]) == (5, 2, 2, 3)
        assert (line["remote_tier_hits"], line["remote_misses"]) == ([2], 3)
        assert (line["remote_rejected"], line["remote_errors"], line["runner"]) == (2, 0, "local")
        assert line["bytes_downloaded"] > 0 and line["bytes_uploaded"] > 0
        assert warnings(done.stderr) == [
            f"cached-dist: warning: remote {server.url}: values not signed with "
            "--remote-signing-key; not used (counted as remote_rejected)"
        ]
        # A reader without the key still uses signed values (their digests are checked).
        c = Machine(tmp_path, "c")
        done = c.link(server.url)
        assert c.compiled == 0 and c.output() == a.output()
    finally:
        server.stop()


@pytest.mark.parametrize(("mode", "content", "message"), [
    (0o644, b"k", "{path} is readable or writable by others (chmod o-rw {path})"),
    (0o602, b"k", "{path} is readable or writable by others (chmod o-rw {path})"),
    (0o600, b"\n", "{path} is empty"),
    (0o600, b"k" * 5000, "{path} is larger than 4096 bytes: not a key file"),
])  # fmt: skip
def test_a_key_file_others_can_read_is_refused(
    tmp_path: Path, mode: int, content: bytes, message: str
) -> None:
    path = _key_file(tmp_path / "team.key", content, mode)
    done = subprocess.run([cached_dist_exe(), "stats", f"--cache-dir={tmp_path}",
                           f"--remote-signing-key={path}"], capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0
    expected = f"cached-dist: error: option --remote-signing-key: {message.format(path=path)}"
    assert done.stderr.strip() == expected
    missing = subprocess.run([cached_dist_exe(), "stats", f"--cache-dir={tmp_path}",
                              "--remote-signing-key=/nonexistent/key"],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode != 0 and missing.stderr.strip() == (
        "cached-dist: error: option --remote-signing-key: cannot read /nonexistent/key: "
        "No such file or directory"
    )


def test_a_signing_key_with_a_reapi_tier_is_refused(tmp_path: Path) -> None:
    """A REAPI tier's action results carry no MAC: with the key, a link would refuse every
    value it served, so the pair is a usage error, through a link as through a command."""
    key = _key_file(tmp_path / "team.key", b"k")
    url = "grpc://user:secret@127.0.0.1:1"
    expected = ("cached-dist: error: --remote-signing-key cannot sign the REAPI tier "
                "grpc://user:***@127.0.0.1:1: its action results carry no signature, so every "
                "value it served would be refused (sign redis:// and http(s):// tiers only)")  # fmt: skip
    for command in (["stats"], []):
        done = subprocess.run([cached_dist_exe(), *command, f"--cache-dir={tmp_path}",
                               f"--remote-signing-key={key}", "--remote-storage",
                               f"redis://127.0.0.1:1/0 {url}", *([] if command else ["j.json"])],
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 2 and done.stderr.strip() == expected, done.stderr
    # An executor with no tier named is the tier (as Bazel's --remote_executor).
    done = subprocess.run([cached_dist_exe(), "stats", f"--cache-dir={tmp_path}",
                           f"--remote-signing-key={key}", f"--remote-executor={url}"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip() == expected, done.stderr


def _pttl(server: Server, key: str) -> int:
    return int(redis_call(server, "PTTL", f"cached-dist:v1:{key}").strip())


@requires_redis
def test_redis_values_expire_when_unused_and_a_hit_refreshes_them(tmp_path: Path) -> None:
    server = start_redis(tmp_path / "redis")
    try:
        a, b, c = Machine(tmp_path, "a"), Machine(tmp_path, "b"), Machine(tmp_path, "c")
        keys = list(keys_by_module(a.link(server.url, "-v", "--remote-expiry=2h").stderr).values())
        ttls = [_pttl(server, k) for k in keys]
        assert all(2 * 3600_000 - 600_000 < t <= 2 * 3600_000 for t in ttls), ttls
        # Time passes (set by hand, not slept): each has 5 minutes left; B's hits refresh them.
        for k in keys:
            redis_call(server, "PEXPIRE", f"cached-dist:v1:{k}", "300000")
        done = b.link(server.url, "--remote-expiry=2h")
        assert b.compiled == 0 and "5 hits (5 from the remote)" in done.stderr
        assert all(_pttl(server, k) > 3600_000 for k in keys)
        # Expired (a PEXPIRE of 1 ms, then the server drops it): a miss, compiled, stored again.
        redis_call(server, "PEXPIRE", f"cached-dist:v1:{keys[0]}", "1")
        deadline = time.monotonic() + 30
        while _pttl(server, keys[0]) != -2 and time.monotonic() < deadline:
            time.sleep(0.01)
        done = c.link(server.url, "--remote-expiry=2h")
        assert c.compiled == 1 and c.output() == a.output()
        assert _pttl(server, keys[0]) > 3600_000
        # Without --remote-expiry, values never expire (the server's eviction policy rules).
        d = Machine(tmp_path, "d", "tally")
        plain = list(keys_by_module(d.link(server.url, "-v").stderr).values())
        assert plain and all(_pttl(server, k) == -1 for k in plain)
    finally:
        server.stop()


def _owned(url: str, keys: list[str], urls: list[str]) -> list[str]:
    from store.remote.shards import owner

    shards = [(u, 1.0) for u in urls]
    return [k for k in keys if urls[owner(k, shards)] == url]


@requires_redis
def test_two_redis_servers_in_one_tier_one_killed_mid_link(tmp_path: Path) -> None:
    """Keys spread over two servers by rendezvous hashing; the second one killed while A
    compiles: one warning, A finishes right and its uploads go to the first; a machine that
    links later hits what the first holds, the dead one's share being misses."""
    one = start_redis(tmp_path / "one")
    # Which server owns a key depends on the servers' URLs, so on their free ports: two is
    # restarted until each server owns some of A's keys (learnt by a link through one, then
    # forgotten), or the kill below would touch none of A's uploads. Every machine uses the
    # compiler that waits at a gate (the compiler is part of the key), the gate open till A.
    gate = tmp_path / "gate"
    shared_compiler(tmp_path, gate=gate)
    gate.touch()
    probe = Machine(tmp_path, "probe")
    a_expected = list(keys_by_module(probe.link(one.url, "-v").stderr).values())
    redis_call(one, "FLUSHALL")
    for attempt in range(40):
        two = start_redis(tmp_path / f"two-{attempt}")
        if 0 < len(_owned(two.url, a_expected, [one.url, two.url])) < len(a_expected):
            break
        two.stop()
    else:
        raise AssertionError(f"no port of 40 split {a_expected} between two servers")
    try:
        tier = f"{one.url}|{two.url}"
        # Where each key lives: every value on the server owner() names, none elsewhere.
        w = Machine(tmp_path, "w", "tally")
        keys = list(keys_by_module(w.link(tier, "-v").stderr).values())
        for server, other in ((one, two), (two, one)):
            mine = _owned(server.url, keys, [one.url, two.url])
            assert all(remote_value(server, k) is not None for k in mine)
            assert all(remote_value(other, k) is None for k in mine)
        assert stats(w.cache)["remote_uploads"] == len(keys)

        # A's compiles wait at a gate: the second server is killed while the first waits
        # (the lookup and the claims done), so every upload comes after it died.
        gate.unlink()
        a = Machine(tmp_path, "a")
        proc = subprocess.Popen(a.link_command(tier, "-j1", "-v"), cwd=a.project.dir,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        deadline = time.monotonic() + 120
        while a.compiled < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a.compiled == 1, "the link did not reach its first compile"
        two.kill()
        gate.touch()
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert a.compiled == 5 and a.output() == uncached(a.project)
        found = warnings(err)
        assert len(found) == 1, err
        assert found[0].startswith(f"cached-dist: warning: remote {two.url}: ")
        assert found[0].endswith("; continuing without it (its keys are misses)")
        assert stats(a.cache)["remote_errors"] == 1
        a_keys = list(keys_by_module(err).values())
        assert sorted(a_keys) == sorted(a_expected)
        on_one = _owned(one.url, a_keys, [one.url, two.url])
        assert all(remote_value(one, k) is not None for k in on_one)

        b = Machine(tmp_path, "b")
        done = b.link(tier)
        assert b.output() == a.output()
        s = stats(b.cache)
        assert s["remote_hits"] == len(on_one) and b.compiled == 5 - len(on_one)
        assert s["remote_errors"] == 1 and len(warnings(done.stderr)) == 1
    finally:
        one.stop()
        two.stop()


def test_sharded_tier_syntax_errors_are_one_line(tmp_path: Path) -> None:
    cases = {
        "redis://a/0|": "a sharded tier names two servers or more",
        "redis://a/0|http://b/": "the servers of one tier share a scheme",
        "redis://a/0|redis://a/0": "a server named twice in one tier",
        "redis://x:secret@a/0|shards=a,b": "shards= needs a '*' in the URL to replace",
        "redis://a/0|redis://b/0(0)": "a shard's weight must be positive",
        "redis://a/0|ftp://b/0": "the servers of one tier share a scheme",
    }
    for word, message in cases.items():
        done = subprocess.run([cached_dist_exe(), "stats", f"--cache-dir={tmp_path}",
                               f"--remote-storage={word}"], capture_output=True, text=True)  # fmt: skip
        assert done.returncode != 0
        line = done.stderr.strip()
        assert line.startswith("cached-dist: error: option --remote-storage: " + message), line
        assert "secret" not in line and "\n" not in line
    from store import Store

    Store(str(tmp_path)).close()  # a cache: stats refuses a directory that holds none
    ok = subprocess.run([cached_dist_exe(), "stats", f"--cache-dir={tmp_path}",
                         "--remote-storage=redis://cache-*:6379/0|shards=a,b(2),c"],
                        capture_output=True, text=True)  # fmt: skip
    assert ok.returncode == 0 and "error" not in ok.stderr, ok.stderr


def test_environment_and_config_reach_the_new_options(tmp_path: Path) -> None:
    from cached_dist.options import resolve

    key = _key_file(tmp_path / "k", b"secret")
    config = tmp_path / "config.toml"
    config.write_text(f'compression-level = 5\nremote-signing-key = "{key}"\n'
                      'remote-expiry = "7d"\n')  # fmt: skip
    options = resolve([f"--config={config}"], [], {})
    assert (options.compression_level, options.remote_signing_key) == (5, str(key))
    assert options.remote_expiry == 7 * 86400
    env = {"CACHED_DIST_COMPRESSION_LEVEL": "0", "CACHED_DIST_REMOTE_EXPIRY": "12h"}
    options = resolve([f"--config={config}"], [], env)
    assert (options.compression_level, options.remote_expiry) == (0, 12 * 3600)
    other = _key_file(tmp_path / "other.key", b"other")
    env = {"CACHED_DIST_REMOTE_SIGNING_KEY": str(other), "CACHED_DIST_STATS_LOG": "/l.jsonl"}
    options = resolve([f"--config={config}"], [], env)
    assert (options.remote_signing_key, options.stats_log) == (str(other), "/l.jsonl")
    config.write_text('stats-log = "/from/config.jsonl"\n')
    assert resolve([f"--config={config}"], [], {}).stats_log == "/from/config.jsonl"
    defaults = resolve([], [], {"HOME": os.fspath(tmp_path)})
    assert (defaults.compression_level, defaults.local_compression_level) == (1, 1)
    config.write_text("local-compression-level = 3\n")
    assert resolve([f"--config={config}"], [], {}).local_compression_level == 3
    env = {"CACHED_DIST_LOCAL_COMPRESSION_LEVEL": "2"}
    assert resolve([f"--config={config}"], [], env).local_compression_level == 2
    assert resolve(["--local-compression-level=19"], [], {}).local_compression_level == 19
