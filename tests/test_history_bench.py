"""The history benchmark's machinery on a tiny synthetic history of three commits.

The real replay (`python -m benchmarks history`) builds 200 commits of Lua; this replays a
generated Lua-shaped project (its makefile offers the same variables) with both machines,
all four configurations and a real redis-server, so a broken replay shows up in CI.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import ccache_emulation, history, history_report
from benchmarks.harness import report
from benchmarks.harness.configs import BARE, LLVM_BIN
from benchmarks.history_machine import (
    CONFIGS,
    Unbuildable,
    link_flags,
    make_arguments,
    makefile_variables,
    parse_summary,
)
from tests.servers import start_redis
from tests.test_bench_harness import SOURCES as HARNESS_SOURCES

pytestmark = pytest.mark.skipif(
    not (LLVM_BIN / "clang").exists(), reason="/usr/lib/llvm-22/bin/clang is missing"
)
ROOT = Path(__file__).parent.parent

MAKEFILE = """\
# Shaped like Lua's own makefile: the variables the replay sets, an archive and a program.
CWARNS= -Wall
LOCAL= $(CWARNS)
MYCFLAGS= $(LOCAL) -std=c99
MYLDFLAGS= -Wl,-E
MYLIBS= -lm
CC= gcc
CFLAGS= -O2 $(MYCFLAGS)
AR= ar rc
RANLIB= ranlib

CORE_T=	libtoy.a
CORE_O=	util.o shapes.o text.o
LUA_T=	toy
LUA_O=	main.o

all:	$(CORE_T) $(LUA_T)

$(CORE_T): $(CORE_O)
\t$(AR) $@ $?
\t$(RANLIB) $@

$(LUA_T): $(LUA_O) $(CORE_T)
\t$(CC) -o $@ $(MYLDFLAGS) $(LUA_O) $(CORE_T) $(MYLIBS)

$(CORE_O) $(LUA_O): makefile util.h
"""
#: tests/test_bench_harness.py's toy sources; this program prints its name first.
SOURCES = {
    **HARNESS_SOURCES,
    "main.c": HARNESS_SOURCES["main.c"].replace('printf("%d', 'printf("toy %d'),
}
TOY = history.Project("toy", (), "toy 12 4")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}  # fmt: skip
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


def toy_history(repo: Path) -> None:
    """Three commits: the project; a one-line body edit in main.c (a leaf: only its own
    backend job changes); a syntax error in text.c (the commit does not build)."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    (repo / "makefile").write_text(MAKEFILE)
    for name, text in SOURCES.items():
        (repo / name).write_text(text)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "the toy project")
    main_c = SOURCES["main.c"].replace(
        "int main(void) {", 'int main(void) {\n  __asm__ volatile("# edit");'
    )
    (repo / "main.c").write_text(main_c)
    git(repo, "commit", "-q", "-am", "a leaf edit")
    (repo / "text.c").write_text(SOURCES["text.c"].replace("return n;", "return n"))
    git(repo, "commit", "-q", "-am", "a commit that does not build")


def test_a_three_commit_history_on_two_machines(tmp_path: Path) -> None:
    toy_history(tmp_path / "origin")
    work = tmp_path / "work"
    history.clone(tmp_path / "origin", work / "repository")
    replayed = history.commits(work / "repository", None, 3, "master")
    assert [c.subject for c in replayed] == ["the toy project", "a leaf edit",
                                             "a commit that does not build"]  # fmt: skip
    assert [c.files for c in replayed] == [6, 1, 1]
    messages: list[str] = []
    redis = start_redis(tmp_path / "redis")
    try:
        plan = history.Plan(developer_every=2, verify_every=2, suite_every=1)
        replay = history.Replay(TOY, work / "repository", work, plan, messages.append, redis.url)
        rows = [replay.commit(i, c) for i, c in enumerate(replayed)]
    finally:
        redis.stop()
    assert replay.machines[0].tree != replay.machines[1].tree  # two absolute paths
    # A second replay in the same place starts from empty caches again.
    again = history.Replay(TOY, work / "repository", work, plan, messages.append, redis.url)
    assert not again.machines[0].cache("b").exists()
    assert [sorted(r["builds"]) for r in rows] == [["CI", "developer"], ["CI"],
                                                  ["CI", "developer"]]  # fmt: skip

    def compiles(row: dict[str, Any], machine: str) -> dict[str, int]:
        return {k: v["compiles"] for k, v in row["builds"][machine]["links"].items()}

    # The first commit: every cache of the CI machine is empty; the developer's are too,
    # but for the shared tier, which CI has just filled.
    first = rows[0]["builds"]
    assert compiles(rows[0], "CI") == {"a": 4, "b": 4, "c": 4, "d": 4}
    assert compiles(rows[0], "developer") == {"a": 4, "b": 4, "c": 0, "d": 4}
    assert first["developer"]["links"]["c"]["summary"]["remote_hits"] == 4
    assert first["CI"]["front_end"]["recompiled"] == ["main.o", "shapes.o", "text.o", "util.o"]
    # The leaf edit: one object recompiled and one backend job, except where the index
    # shard's raw bytes are the key: a regular archive's member names change every link.
    assert rows[1]["builds"]["CI"]["front_end"]["recompiled"] == ["main.o"]
    assert compiles(rows[1], "CI") == {"a": 1, "b": 1, "c": 1, "d": 4}
    for row in rows[:2]:
        for build in row["builds"].values():
            assert build["status"] == "built" and build["identical"], build
            for key, link in build["links"].items():
                assert link["ok"] and link["smoke_ok"], (key, link)
            assert build["links"]["a"]["distributor_jobs"] == build["links"]["a"]["compiles"]
            assert build["links"]["d"]["summary"]["hits_with_shard_path"] == 0
            timed = build["links"]["d"]
            assert timed["compile_cpu_s"] > 0 and timed["compile_real_s"] > 0
    # The commit that does not build is recorded, on both machines, and skipped.
    for build in rows[2]["builds"].values():
        assert build["status"] == "skipped" and "make failed" in build["reason"], build
        assert "text.c" in build["reason"]
    assert any("SKIPPED: make failed" in m for m in messages)
    # Verification: the reference is (d)'s link, which compiled everything; cached-dist's
    # hits recompiled and compared, none different.
    for machine in ("CI", "developer"):
        verified = first[machine]["verification"]
        assert verified["reference"].startswith("(d)")
        assert verified["identical_to_reference"] == dict.fromkeys("abcd", True)
        checked = verified["verify_hits"]
        assert checked["config"] == ("b" if machine == "CI" else "c")
        assert checked["verified"] == 4 and checked["mismatches"] == 0 and checked["identical"]
        assert first[machine]["suite"]["a"] == {"digest": first[machine]["links"]["a"]["digest"],
                                                "ran": False,
                                                "reason": "no testes/all.lua in this tree"}  # fmt: skip

    # The report: totals, the docs block, the chart.
    results = {"configs": {c.key: c.label for c in CONFIGS}, "commits": rows,
               "plan": plan.__dict__, "date": "today", "command": "python -m benchmarks history",
               "machine": {"usable_cpus": 2}, "tools": {},
               "repository": {"range": "a^..b", "first": "2026-01-01", "last": "2026-01-02",
                              "branch": "master"},
               "wall_s": 1.0}  # fmt: skip
    totals = history_report.totals(results)
    assert totals["CI"]["b"]["compiles"] == 5 and totals["CI"]["b"]["jobs"] == 8
    assert totals["CI"]["b"]["hit_rate"] == pytest.approx(3 / 8)
    assert totals["developer"]["c"]["hit_rate"] == 1.0
    assert totals["CI"]["d"]["hit_rate"] == 0.0
    text = history_report.markdown(results, "chart.png")
    assert "| (c) cached-dist, local cache + shared Redis tier | 5 / 8 | 37.5% |" in text
    assert "compiled 0 backend jobs, against 4 with LLD's cache (a) (0.0%)." in text
    assert "#3 " in text and "byte-identical" in text and "0 mismatches" in text
    assert "(b) compiled different numbers of jobs: none." in text
    # One more compile in (a) at the second commit is named, as a reader must see it.
    rows[1]["builds"]["CI"]["links"]["a"]["compiles"] += 1
    assert history_report.differences(results) == ["CI #2 (a 2, b 1)"]
    rows[1]["builds"]["CI"]["links"]["a"]["compiles"] -= 1
    docs = tmp_path / "docs" / "benchmarks.md"
    docs.parent.mkdir()
    docs.write_text(f"# B\n\n{history_report.BEGIN}\nSTALE\n{history_report.END}\n\n## Next\n")
    thin = {**results, "command": "python -m benchmarks history --thin-archive"}
    history_report.write(results, thin, docs, tmp_path / "history-chart.png")
    assert (tmp_path / "history-chart.png").stat().st_size > 1000
    written = docs.read_text()
    assert "STALE" not in written and "](../history-chart.png)" in written
    assert written.endswith("## Next\n") and report.BEGIN not in written
    assert "With a thin archive (`python -m benchmarks history --thin-archive`" in written
    assert "compiled more than cached-dist (b): CI at 1 of its builds (#2)." in written
    json.dumps(results)


def test_the_makefile_is_driven_through_its_own_variables() -> None:
    variables = makefile_variables(MAKEFILE + "LONG= a \\\n  b # comment\n")
    assert variables["MYCFLAGS"] == "$(LOCAL) -std=c99"
    assert variables["CORE_T"] == "libtoy.a" and variables["LONG"] == "a b"
    args = make_arguments(variables, ["-fthinlto-distributor=/d"])
    assert args == ["CC=clang", "MYCFLAGS=$(LOCAL) -std=c99 -flto=thin",
                    "MYLDFLAGS=-Wl,-E -fuse-ld=lld -flto=thin -fthinlto-distributor=/d",
                    "AR=llvm-ar rc", "RANLIB=llvm-ranlib"]  # fmt: skip
    assert "AR=llvm-ar rcT" in make_arguments(variables, [], thin=True)
    del variables["MYLDFLAGS"]
    with pytest.raises(Unbuildable, match="its makefile sets no MYLDFLAGS"):
        make_arguments(variables, [])


def test_summary_lines_are_read() -> None:
    line = ("cached-dist: 33 jobs: 30 hits (30 from the remote), 3 compiled, "
            "30 verified (0 mismatches), 1.20 s")  # fmt: skip
    assert parse_summary(f"x\n{line}\n") == {"jobs": 33, "hits": 30, "compiled": 3,
                                             "remote_hits": 30, "verified": 30,
                                             "mismatches": 0}  # fmt: skip
    emulated = "ccache emulation: 4 jobs: 2 hits (0 with the shard path in the key), 2 compiled"
    assert parse_summary(emulated) == {"jobs": 4, "hits": 2, "hits_with_shard_path": 0,
                                       "compiled": 2}  # fmt: skip
    assert parse_summary("nothing") == {}


@pytest.mark.parametrize("archive", ["none", "thin", "regular"])
def test_the_ccache_emulation_hits_only_when_the_shard_bytes_repeat(
    tmp_path: Path, archive: str
) -> None:
    """Two identical links: the emulation hits on the second unless LLD's per-link names
    are in the shards (a regular archive's members), as docs/shards.md measured."""
    for name, text in SOURCES.items():
        (tmp_path / name).write_text(text)
    clang = str(LLVM_BIN / "clang")
    objects = [f"{n[:-2]}.o" for n in SOURCES if n.endswith(".c")]
    for source in SOURCES:
        if source.endswith(".c"):
            subprocess.run([clang, "-O2", "-flto=thin", "-c", source], cwd=tmp_path, check=True)
    inputs = objects
    if archive != "none":
        flags = "rcT" if archive == "thin" else "rc"
        lib = [o for o in objects if o != "main.o"]
        subprocess.run([str(LLVM_BIN / "llvm-ar"), flags, "libtoy.a", *lib], cwd=tmp_path,
                       check=True)  # fmt: skip
        inputs = ["main.o", "libtoy.a"]
    cache = tmp_path / "cache"
    summaries = []
    for out in ("one", "two"):
        done = subprocess.run(
            [clang, "-O2", "-flto=thin", "-fuse-ld=lld", "-o", out, *inputs,
             f"-fthinlto-distributor={sys.executable}",
             f"-Xthinlto-distributor={ccache_emulation.__file__},--cache-dir={cache}"],
            cwd=tmp_path, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        summaries.append(parse_summary(done.stderr))
        assert subprocess.run([f"./{out}"], cwd=tmp_path, capture_output=True,
                              text=True).stdout == "toy 12 4\n"  # fmt: skip
    assert summaries[0] == {"jobs": 4, "hits": 0, "hits_with_shard_path": 0, "compiled": 4}
    hits = 0 if archive == "regular" else 4
    assert summaries[1] == {"jobs": 4, "hits": hits, "hits_with_shard_path": 0,
                            "compiled": 4 - hits}  # fmt: skip
    assert (tmp_path / "one").read_bytes() == (tmp_path / "two").read_bytes()


def test_the_command_line(tmp_path: Path) -> None:
    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "benchmarks", "history", *args],
                              cwd=ROOT, capture_output=True, text=True)  # fmt: skip

    done = bench("--help")
    assert done.returncode == 0 and "--developer-every" in done.stdout and "--quick" in done.stdout
    missing = tmp_path / "nowhere.bundle"
    done = bench("--repo", str(missing), "--work", str(tmp_path / "work"))
    assert done.returncode == 2
    assert done.stderr == (f"python -m benchmarks history: error: repository not found: "
                           f"{missing} (give --repo PATH)\n")  # fmt: skip
    toy_history(tmp_path / "origin")
    done = bench("--repo", str(tmp_path / "origin"), "--work", str(tmp_path / "work"),
                 "--range", "no-such-branch")  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith(
        "python -m benchmarks history: error: no such commits: no-such-branch ("
    )
    assert "Traceback" not in done.stderr
    done = bench("--configs", "b,x", "--repo", str(missing))
    assert done.returncode == 2 and done.stderr == (
        "python -m benchmarks history: error: --configs takes letters among a,b,c,d, not 'b,x'\n"
    )
    done = bench("--developer-every", "0")
    assert done.returncode == 2 and done.stderr == (
        "python -m benchmarks history: error: --developer-every must be at least 1, not 0\n"
    )
    assert shutil.which("git")


def test_a_link_whose_distributor_is_killed_is_linked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL of the distributor from outside (seen on a shared machine): linked again, the
    compiles of both attempts counted, the attempt recorded."""
    toy_history(tmp_path / "origin")
    work = tmp_path / "work"
    history.clone(tmp_path / "origin", work / "repository")
    first = history.commits(work / "repository", None, 3, "master")[0]
    marker = tmp_path / "killed-once"
    dying = tmp_path / "dying-distributor"
    dying.write_text(  # compiles everything, then dies by SIGKILL the first time
        f'#!/bin/sh\n{sys.executable} {BARE} "$@" || exit 1\n'
        f"[ -e {marker} ] || {{ touch {marker}; kill -KILL $$; }}\n"
    )
    dying.chmod(0o755)

    def flags(key: str, cache: Path, wrapper: Path, remote: str) -> list[str]:
        if key != "a":
            return link_flags(key, cache, wrapper, remote)
        return [f"-fthinlto-distributor={dying}", f"-Wl,--thinlto-remote-compiler={wrapper}"]

    monkeypatch.setattr("benchmarks.history.link_flags", flags)
    messages: list[str] = []
    replay = history.Replay(TOY, work / "repository", work, history.Plan(), messages.append, "")
    ci = replay.machines[0]
    ci.checkout(first.sha)
    variables = ci.variables()
    ci.build(variables, replay.env)
    link = replay.link(ci, "a", variables)
    assert link.ok and link.smoke_ok and link.killed_attempts == 1
    assert link.compiles == 8  # 4 in the killed attempt, 4 in the next
    assert messages == ["[CI] (a): the distributor was killed (SIGKILL); linking again"]
    assert link.as_json()["killed_attempts"] == 1
    assert "killed_attempts" not in replay.link(ci, "a", variables).as_json()
