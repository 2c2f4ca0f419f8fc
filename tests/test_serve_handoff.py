"""The Handoff: what a warm server's child holds back until its client says go."""

import contextlib
import io
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cached_dist.serve.handoff import FallBack, Handoff, _Held

from .servers import requires_redis, start_redis


@contextlib.contextmanager
def streams() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """Standard streams of the test's own (inside the test: pytest resets them between a
    fixture and the test)."""
    saved = sys.stdout, sys.stderr
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved


def test_a_commit_prints_what_was_held_back() -> None:
    child, client = socket.socketpair()
    with child, client, streams() as (out, err):
        handoff = Handoff(child)
        print("said before the commit")
        print("a warning", file=sys.stderr)
        assert out.getvalue() == err.getvalue() == ""
        client.sendall(b"G")
        handoff.commit(True)
        assert client.recv(1) == b"R" and handoff.committed
        assert out.getvalue() == "said before the commit\n"
        assert err.getvalue() == "a warning\n"
        print("and after")
        assert out.getvalue().endswith("and after\n")
        handoff.commit(False)  # committed: nothing more to decide


def test_not_a_full_hit_or_a_client_gone_hands_back() -> None:
    child, client = socket.socketpair()
    with child, client, streams() as (out, _):
        handoff = Handoff(child)
        print("held")
        with pytest.raises(FallBack, match="--disable"):
            handoff.commit(False, "--disable")
        client.close()  # the client gave up waiting
        with pytest.raises(FallBack, match="gave up"):
            handoff.commit(True)
        handoff.discard()
        assert not handoff.committed and sys.stdout is out
        assert out.getvalue() == ""  # the client's cached-dist says it instead


def test_held_streams_say_whether_they_are_terminals() -> None:
    master, slave = os.openpty()
    with open(slave, "w") as terminal, open(os.devnull, "w") as null:
        assert _Held(terminal).isatty() and not _Held(null).isatty()
    os.close(master)
    with open(os.devnull, "w") as closed:
        pass
    assert not _Held(closed).isatty()  # closed: ValueError, read as no terminal


class Refused:
    """A warm server's Handoff for a link that is not a full local hit."""

    committed = False
    standby = None

    def commit(
        self, full_hit: bool, why: str = "not a full hit from the local cache", failed: str = ""
    ) -> None:
        if not full_hit:
            raise FallBack(why, failed)
        self.committed = True


def _keys_in(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"*1\r\n$6\r\nDBSIZE\r\n")
        return int(s.recv(64).strip().lstrip(b":"))


def _two_big_shards(where: Path) -> Any:
    """A job file whose two shards (random bytes: decoded, not canonical) are over 1 MB, so
    a link asks its remote tier for their digests first."""
    from cached_dist import jobfile

    jobs = []
    for i in range(2):
        (where / f"m{i}.o").write_bytes(os.urandom(1000))
        (where / f"s{i}.bc").write_bytes(os.urandom(700_000))
        jobs.append({"args": [f"m{i}.o", f"-fthinlto-index=s{i}.bc", "-o", f"o{i}.o"],
                     "inputs": [f"m{i}.o", f"s{i}.bc"], "outputs": [f"o{i}.o"]})  # fmt: skip
    doc = {"common": {"linker_output": "app", "args": ["/bin/true", "-c"]}, "jobs": jobs}
    return jobfile.parse(doc, str(where / "app.dist-file.json"))


@requires_redis
def test_a_link_handed_back_leaves_nothing_on_the_remote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before it knows whether the link is its own, a child may ask the remote tier for shard
    digests, but shares what it decoded only afterwards: a link handed back leaves no trace
    for the client's own run to find."""
    from cached_dist.link.cached import run_cached
    from cached_dist.log import Log
    from cached_dist.options import Options

    redis = start_redis(tmp_path / "redis")
    try:
        monkeypatch.chdir(tmp_path)
        jf = _two_big_shards(tmp_path)
        options = Options(jobs=2, cache_dir=str(tmp_path / "cache"),
                          remote_storage=(redis.url,))  # fmt: skip
        with streams(), pytest.raises(FallBack):
            run_cached(jf, options, Log(), None, Refused())  # type: ignore[arg-type]
        assert _keys_in(redis.port) == 0
        assert not (tmp_path / "o0.o").exists()
    finally:
        redis.stop()


class SharedMemo:
    def __init__(self) -> None:
        self.shared: list[tuple[str, str]] = []

    def memo_many(self, namespace: str, keys: object) -> dict[str, str]:
        return {}

    def memo_share(self, namespace: str, items: list[tuple[str, str]]) -> None:
        self.shared += items


class LocalMemo:
    def memo_get_many(self, namespace: str, keys: object) -> dict[str, str]:
        return {}

    def memo_put_many(self, namespace: str, items: object) -> None:
        pass


def test_decoded_shard_digests_wait_for_share_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cached_dist.keys.digests import Digests
    from cached_dist.keys.shard_key import ShardKeys

    monkeypatch.chdir(tmp_path)
    jf = _two_big_shards(tmp_path)
    shared = SharedMemo()
    keys = ShardKeys(LocalMemo(), shared, hold=True)  # type: ignore[arg-type]
    keys.prepare(jf.jobs, Digests())
    assert keys.decoded == 2 and shared.shared == [] and len(keys.held) == 2
    keys.share_held()
    assert len(shared.shared) == 2 and keys.held == []
    at_once = SharedMemo()  # a process of its own shares them as soon as they are decoded
    ShardKeys(LocalMemo(), at_once).prepare(jf.jobs, Digests())  # type: ignore[arg-type]
    assert at_once.shared == shared.shared


def test_a_link_handed_back_gives_the_early_worker_no_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The early worker places outputs only on an order, and the order comes only after the
    commit: a link handed back (here every job but one is cached) has it place nothing."""
    from cached_dist.jobfile import JobFile
    from cached_dist.keys import shard_key, toolchain
    from cached_dist.keys.compute import compute_keys
    from cached_dist.keys.key import KEY_FORMAT
    from cached_dist.link.cached import output_roles, run_cached
    from cached_dist.log import Log
    from cached_dist.options import Options
    from cached_dist.serve import early as early_worker
    from store import Store
    from store.placing import place_order

    from .test_shard_keys import DictMemo, examined, write_link

    monkeypatch.chdir(tmp_path)
    jobs = write_link(tmp_path, early_worker.EARLY_MIN_JOBS)
    jf = JobFile(str(tmp_path / "app.json"), "lld", "app", None, ("/bin/true", "-c"), (),
                 tuple(jobs))  # fmt: skip
    store = Store(tmp_path / "cache")
    keyed = compute_keys(jf, toolchain.NoMemo(), shard_key.ShardKeys(DictMemo()))
    for k in keyed[1:]:  # all but one: not a full hit
        assert k.key is not None
        Path(k.job.outputs[0]).write_bytes(b"object %d" % k.job.index)
        store.put(k.key, output_roles(k.job), duration=0.1, toolchain=k.toolchain,
                  key_version=KEY_FORMAT, meta={})  # fmt: skip
        os.unlink(k.job.outputs[0])
    assert store.lookup([k.key for k in keyed if k.key]).keys() == {k.key for k in keyed[1:]}
    early = early_worker.start_early(jobs, 2, place_order)
    assert early is not None
    orders: list[object] = []

    def order(value: object) -> bool:
        orders.append(value)
        return False

    monkeypatch.setattr(early.worker, "order", order)
    options = Options(jobs=2, cache_dir=str(tmp_path / "cache"))
    try:
        with streams(), pytest.raises(FallBack):
            run_cached(jf, options, Log(), examined(jobs), Refused(), early)  # type: ignore[arg-type]
    finally:
        early.cancel()
    assert orders == []
    assert not any(Path(j.outputs[0]).exists() for j in jobs)
