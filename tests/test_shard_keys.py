"""The shard ingredient of the key for a whole link: the per-link spelling table, the batched
memo, and the early worker of a served link (which must give exactly what one process gives)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cached_dist.jobfile import Job
from cached_dist.keys import shard_key
from cached_dist.keys.digests import Digests
from cached_dist.keys.shard_key import ModulePaths, ShardKeys, _table_lookup
from cached_dist.serve import early as early_worker
from tests.store.helpers import counting_forks
from tests.test_shard import G_FOO, G_GV, G_MAIN, make_shard


class DictMemo:
    def __init__(self) -> None:
        self.data: dict[tuple[str, str], str] = {}
        self.batches = 0

    def memo_get(self, namespace: str, key: str) -> str | None:
        return self.data.get((namespace, key))

    def memo_get_many(self, namespace: str, keys: Sequence[str]) -> dict[str, str]:
        self.batches += 1
        return {k: v for k in keys if (v := self.data.get((namespace, k))) is not None}

    def memo_put(self, namespace: str, key: str, value: str) -> None:
        self.data[(namespace, key)] = value

    def memo_put_many(self, namespace: str, items: Sequence[tuple[str, str]]) -> None:
        for key, value in items:
            self.data[(namespace, key)] = value


def member(i: int) -> str:
    """LLD 22's per-link name of a regular archive member."""
    return f"libm.a(m{i}.o at {100 + i}).{i + 2}.1F2E.o"


def write_link(root: Path, count: int, members: bool = True) -> list[Job]:
    """``count`` jobs, each with its module and a shard naming it and module 0 (imported)."""
    root.mkdir(parents=True, exist_ok=True)
    name = member if members else (lambda i: f"m{i}.o")
    jobs = []
    for i in range(count):
        module = name(i)
        (root / module).write_bytes(b"module %d" % i)
        ids = {1: G_MAIN, 2: G_FOO, 3: G_GV}
        records = [(5, [1, 0, 96, 6, 64, 0, 1, 1, 0, 3, 2, 8]), (6, [3, 1, 96, 1])]
        shard = root / f"{module}.thinlto.bc"
        paths = [(0, module)] if i == 0 else [(0, module), (1, name(0))]
        shard.write_bytes(make_shard(paths, ids, records[: 1 + i % 2]))
        imports = () if i == 0 else (name(0),)
        jobs.append(Job(i, (), module, str(shard.name), imports, (), (f"{module}.native.o",)))
    return jobs


def prepared(jobs: list[Job], memo: DictMemo | None = None) -> ShardKeys:
    keys = ShardKeys(memo or DictMemo())
    keys.prepare(jobs, Digests())
    return keys


def examined(jobs: list[Job]) -> dict[str, os.stat_result]:
    """What the job-file checks would hand the key: each input's stat."""
    return {p: os.stat(p) for j in jobs for p in (j.module, j.shard or "", *j.imports)}


def count_decodes_here(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the shards this process decodes from now on (a worker forked before keeps the
    real function)."""
    calls: list[str] = []
    real = shard_key._decode

    def counted(data: bytes, *args: object) -> tuple[str, bool]:
        calls.append("decode")
        return real(data, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(shard_key, "_decode", counted)
    return calls


@pytest.fixture
def in_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("members", [True, False])
def test_a_link_without_an_early_worker_decodes_every_shard_here(
    in_dir: Path, members: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a warm server's child (no early worker) every shard is decoded in this
    process, however many: a fork to split them paid for nothing (docs/design.md, "What
    still pays")."""
    count = early_worker.EARLY_MIN_JOBS + 22
    jobs = write_link(in_dir, count, members)
    forks = counting_forks(monkeypatch)
    here = count_decodes_here(monkeypatch)
    digests = Digests()
    keys = ShardKeys(DictMemo())
    keys.prepare(jobs, digests)
    assert forks == [] and len(here) == count
    assert keys.decoded == count and keys.inexact == 0 and len(keys.digests) == count
    assert all(d.startswith("canon:") for d in keys.digests.values())
    assert {j.module for j in jobs} <= dict(digests.since(0)).keys()


def test_unreadable_shards_and_modules_leave_their_jobs_out(in_dir: Path) -> None:
    jobs = write_link(in_dir, early_worker.EARLY_MIN_JOBS + 10)
    os.unlink(in_dir / jobs[5].shard)  # type: ignore[operator]
    os.unlink(in_dir / jobs[8].module)
    keys = prepared(jobs)
    assert 5 not in keys.digests and 8 not in keys.digests
    assert len(keys.digests) == len(jobs) - 2
    with pytest.raises(OSError, match="could not be read"):
        keys(jobs[5], Digests())


def test_memo_is_asked_once_per_link(in_dir: Path) -> None:
    jobs = write_link(in_dir, 40, members=False)  # thin-archive style: memoizable shards
    memo = DictMemo()
    first = prepared(jobs, memo)
    assert (first.decoded, first.memoized, memo.batches) == (40, 0, 1)
    second = prepared(jobs, memo)
    assert (second.decoded, second.memoized, memo.batches) == (0, 40, 2)
    assert second.digests == first.digests


def test_spelling_table_answers_as_each_jobs_own_table(in_dir: Path) -> None:
    (in_dir / "sub").mkdir()
    for name in ("a.o", "b.o", "sub/c.o"):
        (in_dir / name).write_bytes(name.encode())
    jobs = [
        Job(0, (), "a.o", None, ("sub/c.o",), (), ("x",)),
        Job(1, (), "./b.o", None, ("sub/../a.o",), (), ("y",)),
        Job(2, (), str(in_dir / "sub/c.o"), None, ("b.o",), (), ("z",)),
    ]
    paths = ModulePaths(Digests())
    asked = ["a.o", "./a.o", "b.o", "./b.o", "sub/c.o", "sub//c.o", str(in_dir / "a.o"),
             str(in_dir / "b.o"), str(in_dir / "sub/c.o"), "sub/../a.o", "c.o", "nope.o"]  # fmt: skip
    for job in jobs:
        (fast, own), table = paths.lookup(job), _table_lookup(job, Digests(), os.getcwd())
        assert [fast(p) for p in asked] == [table(p) for p in asked], job
        # What the native decoder takes for a path of the job's own, without asking fast
        assert own == frozenset((job.module, *job.imports))
        assert [paths.digests.known[p] for p in own] == [table(p) for p in own], job
    assert not paths.ambiguous
    assert paths.lookup(jobs[0])[0]("b.o") is None  # another job's module, not this one's


@pytest.mark.parametrize("cwd", ["/", "/w", "/w/x y", "/w/../v", "/w/./v", "/w/", "//w", "w"])
@pytest.mark.parametrize("path", ["a.o", "lib.a(m0.o at 8).2.7B59.o", ".a", "...", ".", "..",
                                  "", "a/b.o", "/a.o", "./a.o", "a//b", "a\\b"])  # fmt: skip
def test_one_component_paths_are_spelled_as_normpath_spells_them(cwd: str, path: str) -> None:
    """The shortcut for a path without a separator, taken only for a cwd in normal form,
    gives exactly the spellings normpath gives."""
    normal = os.path.normpath(cwd) == cwd
    assert shard_key.spellings(path, cwd, normal) == shard_key.spellings(path, cwd)


def test_paths_that_spell_alike_but_differ_fall_back_to_each_jobs_table(in_dir: Path) -> None:
    """``link/../a.o`` normalizes to ``a.o`` but, through a symbolic link, is another file."""
    (in_dir / "a.o").write_bytes(b"top")
    (in_dir / "deep/real").mkdir(parents=True)
    (in_dir / "deep/a.o").write_bytes(b"deep")
    os.symlink("deep/real", in_dir / "link")
    jobs = [
        Job(0, (), "a.o", None, (), (), ("x",)),
        Job(1, (), "link/../a.o", None, (), (), ("y",)),
    ]
    paths = ModulePaths(Digests())
    first, own = paths.lookup(jobs[0])
    assert not paths.ambiguous and own == frozenset(("a.o",))
    second, own = paths.lookup(jobs[1])
    assert paths.ambiguous and own is None  # no shortcut past the table
    deep = Digests().of("link/../a.o")
    assert second("link/../a.o") == deep == second("a.o")  # the job's own table: its file
    again, own = paths.lookup(jobs[0])
    assert own is None and again("a.o") == first("a.o") == Digests().of("a.o") != deep


def test_an_early_worker_gives_what_one_process_gives(
    in_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started as the job file is loaded (a warm server's child), a worker decodes two in
    three of the per-link shards while the link checks its job file; prepare() decodes the
    rest."""
    count = early_worker.EARLY_MIN_JOBS + 22
    jobs = write_link(in_dir, count)
    alone = prepared(jobs)
    forks = counting_forks(monkeypatch)
    early = early_worker.start_early(jobs, 2)
    assert early is not None and len(forks) == 1
    assert len(early.share) == sum(1 for i in range(count) if i % 3 < 2)
    here = count_decodes_here(monkeypatch)
    keys = ShardKeys(DictMemo(), early=early)
    digests = Digests(examined(jobs))
    keys.prepare(jobs, digests)
    assert len(forks) == 1  # no other worker
    assert len(here) == count - len(early.share)  # the worker's results were taken
    assert keys.digests == alone.digests and keys.decoded == count
    assert {j.module for j in jobs} <= dict(digests.since(0)).keys()
    early.cancel()  # taken already: nothing to stop


def test_an_early_worker_s_module_digests_spare_this_process_reading_modules(
    in_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker sends the digest of every module the jobs name before it decodes: this
    process then reads only the shards it decodes itself, and no module."""
    from cached_dist.keys import digests as digests_module

    count = early_worker.EARLY_MIN_JOBS + 22
    jobs = write_link(in_dir, count)
    alone = prepared(jobs)
    early = early_worker.start_early(jobs, 2)
    assert early is not None
    read: list[str] = []
    real = digests_module.read_regular

    def counted(path: str, seen: os.stat_result | None = None) -> bytes:
        read.append(path)
        return real(path, seen)

    monkeypatch.setattr(digests_module, "read_regular", counted)
    keys = ShardKeys(DictMemo(), early=early)
    keys.prepare(jobs, Digests(examined(jobs)))
    assert keys.digests == alone.digests
    theirs = {job.index for job in early.share}
    assert sorted(read) == sorted(str(j.shard) for j in jobs if j.index not in theirs)
    early.cancel()


def test_an_early_worker_that_died_leaves_its_share_here(in_dir: Path) -> None:
    import signal

    jobs = write_link(in_dir, early_worker.EARLY_MIN_JOBS + 3)
    alone = prepared(jobs)
    early = early_worker.start_early(jobs, 2)
    assert early is not None
    os.kill(early.worker.pid, signal.SIGKILL)
    keys = ShardKeys(DictMemo(), early=early)
    keys.prepare(jobs, Digests())
    assert keys.digests == alone.digests and keys.decoded == len(jobs)


def test_no_early_worker_when_it_would_not_pay(in_dir: Path) -> None:
    enough = early_worker.EARLY_MIN_JOBS
    assert early_worker.start_early(write_link(in_dir / "few", enough - 1), 2) is None
    assert early_worker.start_early(write_link(in_dir / "thin", enough, members=False), 2) is None
    assert early_worker.start_early(write_link(in_dir / "j1", enough), 1) is None


def test_an_early_worker_is_stopped_when_the_job_file_is_refused(in_dir: Path) -> None:
    """A link refused by the job-file checks (here an output that is also an input) stops
    the worker it started and leaves no process behind."""
    import psutil

    from cached_dist.errors import InputError
    from cached_dist.jobfile import JobFile
    from cached_dist.link import flow
    from cached_dist.log import Log
    from cached_dist.options import Options

    jobs = write_link(in_dir, early_worker.EARLY_MIN_JOBS)
    bad = jobs[0].replace(args=jobs[0].args, outputs=(jobs[1].module,))
    jf = JobFile(str(in_dir / "app.json"), "lld", "app", None, ("clang", "-c", "-o"),
                 (), (bad, *jobs[1:]))  # fmt: skip
    before = {p.pid for p in psutil.Process().children()}

    class Handoff:
        committed = False
        standby = None

        def commit(self, full_hit: bool, why: str = "", failed: str = "") -> None:
            raise AssertionError("never reached")

    with pytest.raises(InputError, match="also an input"):
        flow.run(jf, Options(jobs=2, cache_dir=str(in_dir / "cache")), Log(),
                 Handoff())  # type: ignore[arg-type]  # fmt: skip
    assert {p.pid for p in psutil.Process().children()} == before


def test_a_file_replaced_after_the_early_worker_read_it_is_keyed_as_checked(
    in_dir: Path,
) -> None:
    """The early worker reads before the job-file checks: a module (or shard) replaced in
    between must not be keyed by the content the worker saw. Its results count only for
    files the checks found as it read them."""
    import select

    jobs = write_link(in_dir, early_worker.EARLY_MIN_JOBS + 22)
    early = early_worker.start_early(jobs, 2)
    assert early is not None
    victim = jobs[1]  # the worker's (1 % 3 < 2), and imported by none
    assert victim.index in {j.index for j in early.share}
    # The worker has read it once its first message, every module's digest, is on its way.
    assert select.select([early.worker.read_fd], [], [], 60)[0]
    (in_dir / "new").write_bytes(b"module changed")
    os.replace(in_dir / "new", in_dir / victim.module)
    checked = examined(jobs)
    keys, digests = ShardKeys(DictMemo(), early=early), Digests(checked)
    keys.prepare(jobs, digests)
    alone, by_itself = ShardKeys(DictMemo()), Digests(checked)
    alone.prepare(jobs, by_itself)
    assert digests.of(victim.module) == by_itself.of(victim.module) == Digests().of(victim.module)
    assert keys.digests == alone.digests


def test_keys_of_jobs_decoded_here_come_before_the_early_worker_s_are_taken(
    in_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compute_keys hands on the keys of the jobs this process decoded (to be looked up)
    before it takes the early worker's results; then those of the worker's share. The keys
    are those of a link keyed in one process, in job order."""
    from cached_dist.jobfile import JobFile
    from cached_dist.keys import toolchain
    from cached_dist.keys.compute import Keyed, compute_keys

    monkeypatch.setattr(toolchain, "identity", lambda *a, **k: "tool")
    jobs = write_link(in_dir, early_worker.EARLY_MIN_JOBS + 22)
    jf = JobFile(str(in_dir / "app.json"), "lld", "app", None, ("clang", "-c"), (), tuple(jobs))
    alone = compute_keys(jf, toolchain.NoMemo(), ShardKeys(DictMemo()))
    early = early_worker.start_early(jobs, 2)
    assert early is not None
    theirs = {job.index for job in early.share}
    here = count_decodes_here(monkeypatch)
    keys = ShardKeys(DictMemo(), early=early)
    batches: list[list[int]] = []

    def on_keyed(keyed: list[Keyed]) -> None:
        batches.append([k.job.index for k in keyed])
        if len(batches) == 1:  # not taken yet: the worker's jobs have no shard digest here
            assert theirs.isdisjoint(keys.digests)

    together = compute_keys(jf, toolchain.NoMemo(), keys, examined=examined(jobs),
                            on_keyed=on_keyed)  # fmt: skip
    # The worker's results were taken (if not: how the worker ended, for the record).
    assert len(here) == len(jobs) - len(theirs), (early.lost, len(early.same),
                                                  vars(early.worker))  # fmt: skip
    assert batches == [[j.index for j in jobs if j.index not in theirs], sorted(theirs)]
    assert [(k.job.index, k.key) for k in together] == [(k.job.index, k.key) for k in alone]
    assert all(k.key for k in together)


def test_own_paths_looked_up_by_the_decoder_give_the_digests_module_digest_gives(
    in_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native decoder takes a job's own module digests from Digests.known
    (ModulePaths.lookup's ``own``): the shard digests are those of asking module_digest for
    every path."""
    jobs = write_link(in_dir, 40)
    shortcut = prepared(jobs)
    real = shard_key._decode

    def without(data: bytes, lookup: Any, own: Any = None, known: Any = None) -> Any:
        return real(data, lookup)

    monkeypatch.setattr(shard_key, "_decode", without)
    asked = prepared(jobs)
    assert shortcut.digests == asked.digests and len(asked.digests) == 40
    assert all(d.startswith("canon:") for d in asked.digests.values())


def test_a_job_that_only_imports_members_counts_as_naming_them(in_dir: Path) -> None:
    """main.o is not a member, but its shard names the members it imports by their per-link
    names: it is decoded on every link like theirs (never memoized: its memo key could not
    come again) and may go to the early worker."""
    count = early_worker.EARLY_MIN_JOBS + 22
    jobs = write_link(in_dir, count)
    ids = {1: G_MAIN, 2: G_FOO, 3: G_GV}
    (in_dir / "main.o").write_bytes(b"main")
    (in_dir / "main.thinlto.bc").write_bytes(
        make_shard([(0, "main.o"), (1, member(0))], ids, [(6, [3, 1, 96, 1])])
    )
    jobs.append(Job(count, (), "main.o", "main.thinlto.bc", (member(0),), (), ("main.n.o",)))
    memo = DictMemo()
    keys = prepared(jobs, memo)
    assert keys.decoded == count + 1 and memo.data == {}
    early = early_worker.start_early(jobs, 2)
    assert early is not None
    assert len(early.share) == sum(1 for i in range(count + 1) if i % 3 < 2)
    assert shard_key.named_modules(jobs) == {j.module for j in jobs}
    early.cancel()


def write_job_file(path: Path, jobs: list[Job]) -> bytes:
    """The job file LLD would write for ``jobs`` (as write_link makes them); its bytes."""
    import json

    path.write_text(json.dumps({
        "common": {"linker_output": "app", "args": ["clang", "-c"], "inputs": []},
        "jobs": [{"args": [j.module, f"-fthinlto-index={j.shard}", "-o", j.outputs[0]],
                  "inputs": [j.module, j.shard, *j.imports], "outputs": list(j.outputs)}
                 for j in jobs],
    }))  # fmt: skip
    return path.read_bytes()


def _standby(plan: Any = None) -> Any:
    from procs.forked import standby

    ready = standby(plan or (lambda m: early_worker.standby_plan(m, None)), lambda told: None,
                    first=True, then=False)  # fmt: skip
    assert ready is not None
    return ready


def test_a_told_standby_is_the_early_worker_and_gives_what_one_process_gives(
    in_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm server's spare forks the early worker before its link comes (a standby); told
    which job file the link read, it reads and parses it itself and decodes the same share a
    worker forked now would. No process is forked for the link."""
    from cached_dist import jobfile

    count = early_worker.EARLY_MIN_JOBS + 22
    write_link(in_dir, count)
    raw = write_job_file(in_dir / "app.json", write_link(in_dir, count))
    jobs = list(jobfile.load("app.json").jobs)
    alone = prepared(jobs)
    ready = _standby()
    forks = counting_forks(monkeypatch)
    assert ready.go(early_worker.standby_message(raw, "app.json", 2))
    early = early_worker.start_early(jobs, 2, None, ready)
    assert early is not None and early.worker is ready.worker and forks == []
    here = count_decodes_here(monkeypatch)
    keys = ShardKeys(DictMemo(), early=early)
    keys.prepare(jobs, Digests(examined(jobs)))
    assert not early.lost and len(here) == count - len(early.share)
    assert keys.digests == alone.digests and keys.decoded == count
    early.cancel()


@pytest.mark.parametrize("how", ["another file", "another directory", "another share"])
def test_a_standby_on_other_jobs_gives_nothing_and_the_link_does_the_work(
    in_dir: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The standby reads the job file after the link did: a file changed in between (its
    digest), a directory that is not the link's (its identity), or a share that is not the
    one the link works out (its job indices, sent first) - and nothing it sends is taken."""
    from cached_dist import jobfile

    count = early_worker.EARLY_MIN_JOBS + 22
    raw = write_job_file(in_dir / "app.json", write_link(in_dir, count))
    jobs = list(jobfile.load("app.json").jobs)
    alone = prepared(jobs)
    message: Any = early_worker.standby_message(raw, "app.json", 2)
    plan = None
    if how == "another file":
        write_job_file(in_dir / "app.json", jobs[:-1])
    elif how == "another directory":
        message = (message[0], [0, 0], *message[2:])
    else:  # another share: a plan of its own, on all jobs but the first

        def plan(m: Any) -> Any:
            rest = jobs[1:]
            first, work, learned = early_worker._early_work(rest, [j for j in rest if j.index % 2])
            return work, learned, first, None

    ready = _standby(plan)
    assert ready.go(message)
    early = early_worker.start_early(jobs, 2, None, ready)
    assert early is not None and early.worker is ready.worker
    here = count_decodes_here(monkeypatch)
    keys = ShardKeys(DictMemo(), early=early)
    keys.prepare(jobs, Digests(examined(jobs)))
    assert early.lost and len(here) == count  # every shard decoded here
    assert keys.digests == alone.digests
    early.cancel()


def test_a_served_link_tells_its_standby_and_forks_no_worker(
    in_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cli.main with a warm server's Handoff holding a standby: the job file's bytes go to it
    as they are read (flow.early_reader), and start_early takes it as the link's early
    worker; nothing is forked during the link. (Not a full hit here: it is handed back.)"""
    from cached_dist import cli
    from cached_dist.serve.handoff import FallBack
    from cached_dist.serve.server import _standby as spare_standby

    count = early_worker.EARLY_MIN_JOBS + 22
    write_job_file(in_dir / "app.json", write_link(in_dir, count))
    ready = spare_standby()
    assert ready is not None
    started: list[Any] = []
    real = early_worker.start_early

    def recorded(*args: Any) -> Any:
        early = real(*args)
        started.append((args[3] if len(args) > 3 else None, early))
        return early

    monkeypatch.setattr(early_worker, "start_early", recorded)
    forks = counting_forks(monkeypatch)

    class Handoff:
        committed = False
        standby = ready

        def commit(self, full_hit: bool, why: str = "", failed: str = "") -> None:
            assert not full_hit
            raise FallBack(why)

    with pytest.raises(FallBack):
        cli.main(["--cache-dir=cache", "--jobs=2", "app.json"], Handoff())  # type: ignore[arg-type]
    assert forks == []
    ((given, early),) = started
    assert given is ready and ready.told and early is not None and early.worker is ready.worker
    ready.cancel()


def test_a_small_served_link_leaves_its_standby_untold(in_dir: Path) -> None:
    """A job file with fewer jobs than an early worker needs is not told to the standby
    (early_worker.may_start_early, judged on the bytes before they are parsed): the standby
    would parse it for nothing, beside the link, on the link's processors."""
    from cached_dist import cli
    from cached_dist.serve.handoff import FallBack
    from cached_dist.serve.server import _standby as spare_standby

    least = early_worker.EARLY_MIN_JOBS
    write_job_file(in_dir / "small.json", write_link(in_dir, least - 1))
    raw = (in_dir / "small.json").read_bytes()
    assert raw.count(b'"outputs"') == least - 1 and not early_worker.may_start_early(raw)
    assert early_worker.may_start_early(raw + b'"outputs"')
    # as count() counts: '"outputs"outputs"' holds one, not two that share a quote
    assert not early_worker.may_start_early(b'"outputs"' * (least - 2) + b'"outputs"outputs"')
    assert early_worker.may_start_early(b'"outputs"' * least)
    assert not early_worker.may_start_early(b'"outputs"' * (least - 1) + b'"output"')
    ready = spare_standby()
    assert ready is not None

    class Handoff:
        committed = False
        standby = ready

        def commit(self, full_hit: bool, why: str = "", failed: str = "") -> None:
            raise FallBack(why)

    try:
        with pytest.raises(FallBack):
            cli.main(["--cache-dir=cache", "--jobs=2", "small.json"], Handoff())  # type: ignore[arg-type]
        assert not ready.told
    finally:
        ready.cancel()
