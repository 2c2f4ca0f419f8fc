"""Backend compiles across a real commit history: Lua's own repository, replayed commit by
commit on a CI machine and a developer machine, with four caches that persist across commits.

    python -m benchmarks history [--repo PATH] [--range REVS | --last N] [--quick]

The repository (a git bundle or repository; default ``../shared/data/lua-history.bundle``
beside the main checkout) is cloned into benchmarks/work/history; the commits are the
first-parent history of ``--range`` (default: the last 200 commits of master; ``--quick``:
20), oldest first. Two machines, each a clone at a path of its own: "CI" builds every commit,
"developer" every 5th (it pulls once a week). Each builds a commit with its own makefile
(history_machine.py), then links the program once per configuration, each with caches that
persist across the commits:

- (a) LLD 22's own cache, ``--thinlto-cache-dir``, one per machine;
- (b) cached-dist with a local cache per machine;
- (c) cached-dist with local caches and one Redis tier both machines read and write (a
  redis-server the benchmark starts on loopback);
- (d) keys from the raw bytes of the index shard, as ccache 4.13 keys backend compiles (an
  emulation: ccache_emulation.py), one cache per machine.

Backend compiles are counted, and timed, by the remote compiler all four compile through.
Every linked program runs a small script; the four programs of a commit must be
byte-identical; every ``--verify-every``-th commit they are compared with a program whose
every object was compiled in its own link, and (b) on CI, (c) on the developer's machine
relink with ``--verify-hits=1``; every ``--suite-every``-th commit each distinct program runs
Lua's own test suite (testes/all.lua). A commit that does not build is recorded and skipped.
Results: benchmarks/results/history.json (``--quick``: history.quick.json;
``--thin-archive``, a thin liblua.a: history-thin.json); a full run also draws
docs/history-chart.png and rewrites the generated block of the history section of
docs/benchmarks/history.md (``--report``: only that, from saved results).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .harness.codebases import LUA_SCRIPT
from .harness.configs import counting_wrapper
from .history_machine import (
    BY_LETTER,
    Link,
    Machine,
    Unbuildable,
    link_flags,
    run_suite,
    toolchain_env,
)
from .sources import WORK

ROOT = Path(__file__).parent.parent
KILLED = "distributor execution failed: Killed"  # LLD's words when its distributor got SIGKILL
RESULTS = ROOT / "benchmarks" / "results"


class UsageError(Exception):
    """A bad option or repository: one line, exit status 2."""


@dataclass(frozen=True)
class Project:
    """What the replay needs to know of the project beyond its makefile."""

    name: str
    smoke_args: tuple[str, ...]  # the program runs with these and must print smoke_expect
    smoke_expect: str


LUA = Project("lua", ("-e", LUA_SCRIPT), "lua ok")


@dataclass(frozen=True)
class Commit:
    sha: str
    date: str
    subject: str
    files: int  # files the commit changes (against its first parent)


@dataclass(frozen=True)
class Plan:
    developer_every: int = 5
    verify_every: int = 20
    suite_every: int = 20
    configs: tuple[str, ...] = ("a", "b", "c", "d")
    thin_archive: bool = False


def default_repo() -> Path:
    """``../shared/data/lua-history.bundle`` beside the main checkout (from a worktree, the
    checkout that holds the git directory)."""
    done = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
                          cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    main = Path(done.stdout.strip()).parent if done.returncode == 0 else ROOT
    return main.parent / "shared" / "data" / "lua-history.bundle"


def clone(repo: Path, dest: Path) -> None:
    if not repo.exists():
        raise UsageError(f"repository not found: {repo} (give --repo PATH)")
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["git", "clone", "-q", "--no-checkout", str(repo), str(dest)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise UsageError(f"cannot clone {repo}: {done.stderr.strip().splitlines()[-1:]}")


def commits(repo: Path, revisions: str | None, last: int, branch: str) -> list[Commit]:
    """The first-parent commits of ``revisions`` (or the last ``last`` of ``branch``),
    oldest first."""
    spec = [revisions] if revisions else ["-n", str(last), f"origin/{branch}"]
    fmt = "--format=%H%x00%cI%x00%s"
    done = subprocess.run(["git", "log", "--first-parent", "--reverse", fmt, *spec, "--"],
                          cwd=repo, capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise UsageError(f"no such commits: {' '.join(spec)} ({done.stderr.strip()[-200:]})")
    found = []
    for line in done.stdout.splitlines():
        sha, date, subject = line.split("\0", 2)
        files = subprocess.run(["git", "diff-tree", "--no-commit-id", "--name-only", "-r", "-m",
                                "--first-parent", "--root", sha],
                               cwd=repo, capture_output=True, text=True).stdout  # fmt: skip
        found.append(Commit(sha, date, subject, len(files.split())))
    if not found:
        raise UsageError(f"no commits in {' '.join(spec)}")
    return found


class Replay:
    """The two machines, their caches and the shared Redis tier, commit after commit."""

    def __init__(
        self,
        project: Project,
        repo: Path,
        work: Path,
        plan: Plan,
        say: Callable[[str], None],
        remote_url: str,
    ) -> None:
        self.project = project
        self.work = work
        self.plan = plan
        self.say = say
        self.remote = remote_url
        self.env = toolchain_env(work)
        # The instrumentation (the counting remote compiler) is the same file for both
        # machines, as /usr/bin/clang is on real ones.
        self.wrapper = counting_wrapper(work / "bin", timed=True)
        self.machines = [
            Machine("CI", 1, work / "ci" / "build" / project.name, work / "state" / "ci",
                    plan.thin_archive),
            Machine("developer", plan.developer_every,
                    work / "home" / "developer" / "src" / project.name,
                    work / "state" / "developer", plan.thin_archive),
        ]  # fmt: skip
        for m in self.machines:
            shutil.rmtree(m.state, ignore_errors=True)  # every cache starts empty
            m.clone(repo)
        self.suites: dict[str, dict[str, Any]] = {}  # by program digest

    def smoke(self, binary: Path) -> bool:
        try:
            done = subprocess.run([str(binary), *self.project.smoke_args], capture_output=True,
                                  text=True, timeout=120)  # fmt: skip
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0 and self.project.smoke_expect in done.stdout

    def commit(self, index: int, commit: Commit) -> dict[str, Any]:
        row: dict[str, Any] = {"index": index, "sha": commit.sha, "date": commit.date,
                               "subject": commit.subject, "files": commit.files,
                               "builds": {}}  # fmt: skip
        for m in self.machines:
            if index % m.every == 0:
                row["builds"][m.name] = self.build(m, index, commit)
        return row

    def build(self, m: Machine, index: int, commit: Commit) -> dict[str, Any]:
        tag = f"[{index + 1} {commit.sha[:8]} {m.name}]"
        m.checkout(commit.sha)
        try:
            variables = m.variables()
            front = m.build(variables, self.env)
        except Unbuildable as e:
            self.say(f"{tag} SKIPPED: {e}")
            return {"status": "skipped", "reason": str(e)}
        result: dict[str, Any] = {"status": "built", "front_end": front, "links": {}}
        links: dict[str, Link] = {}
        for key in self.plan.configs:
            links[key] = self.link(m, key, variables)
            result["links"][key] = links[key].as_json()
        failed = [k for k, link in links.items() if not link.ok]
        digests = {link.digest for link in links.values() if link.ok}
        result["identical"] = len(digests) == 1 and not failed
        if failed:  # all: the commit's own program does not link; some: a tool's problem
            result["status"] = "link failed" if len(failed) == len(links) else "links differ"
        self.say(f"{tag} {len(front['recompiled'])} objects recompiled; backend compiles "
                 + ", ".join(f"({k}) {link.compiles}" for k, link in links.items())
                 + ("" if result["identical"] else "; PROGRAMS DIFFER OR FAILED"))  # fmt: skip
        if failed:
            self.say(f"{tag} LINK FAILED: " + "; ".join(f"({k}) {links[k].error}" for k in failed))
        if index % self.plan.verify_every == 0 and not failed:
            result["verification"] = self.verify(m, variables, links, tag)
        if index % self.plan.suite_every == 0 and not failed:
            result["suite"] = self.suite(m, links, tag)
        return result

    def link(self, m: Machine, key: str, variables: dict[str, str]) -> Link:
        """One link; linked again (at most twice) if its distributor was killed by SIGKILL,
        which no configuration does to itself (on the shared machine this ran on, something
        outside the replay did). The compiles of every attempt are counted: they were done."""
        flags = link_flags(key, m.cache(key.removeprefix("verify-")), self.wrapper, self.remote)
        attempts: list[Link] = []
        while True:
            link = m.link(key, variables, flags, self.env, self.smoke)
            if key in ("c", "verify-c"):
                _settle(m.cache("c"))
            if link.ok or KILLED not in link.error or len(attempts) == 2:
                break
            attempts.append(link)
            self.say(f"[{m.name}] ({key}): the distributor was killed (SIGKILL); linking again")
        for killed in attempts:
            link.killed_attempts += 1
            link.compiles += killed.compiles
            link.compile_real_s = round(link.compile_real_s + killed.compile_real_s, 3)
            link.compile_cpu_s = round(link.compile_cpu_s + killed.compile_cpu_s, 3)
            link.seconds += killed.seconds
        return link

    def verify(
        self, m: Machine, variables: dict[str, str], links: dict[str, Link], tag: str
    ) -> dict[str, Any]:
        """The commit's programs against an uncached link's, and cached-dist's hits
        recompiled (--verify-hits=1) in an extra link that is not counted: (b)'s on the CI
        machine, (c)'s on the developer's (whose hits there came from the shared tier)."""
        out: dict[str, Any] = {}
        emulated = links["d"].summary if "d" in links else {}
        if emulated.get("jobs") and emulated.get("hits") == 0 and emulated.get("compiled"):
            reference = links["d"]  # every job of (d)'s link was compiled in it
            out["reference"] = "(d), whose link compiled every job"
        else:
            reference = self.link(m, "fresh", variables)
            out["reference"] = "an uncached link (the bare distributor)"
        out["identical_to_reference"] = {k: link.digest == reference.digest
                                         for k, link in links.items()}  # fmt: skip
        preferred = ("b", "c") if m.every == 1 else ("c", "b")
        ours = [k for k in preferred if k in links]
        if not ours:
            return out
        key = f"verify-{ours[0]}"
        checked = self.link(m, key, variables)
        out["verify_hits"] = {"config": key[-1], "ok": checked.ok, **checked.summary,
                              "identical": checked.digest == reference.digest}  # fmt: skip
        if not checked.ok:
            out["verify_hits"]["error"] = checked.error
            self.say(f"{tag} ({key}) LINK FAILED: {checked.error}")
        bad = [k for k, same in out["identical_to_reference"].items() if not same]
        v = out["verify_hits"]
        self.say(f"{tag} verified: " + (f"DIFFERS FROM THE REFERENCE: {bad}" if bad else
                 "all four programs equal the reference") + f"; --verify-hits=1 on "
                 f"({v['config']}): {v.get('verified', 0)} hits recompiled, "
                 f"{v.get('mismatches', 0)} mismatches")  # fmt: skip
        return out

    def suite(self, m: Machine, links: dict[str, Link], tag: str) -> dict[str, Any]:
        """Lua's test suite, once per distinct program (equal bytes run alike)."""
        out: dict[str, Any] = {}
        for key, link in links.items():
            if link.digest not in self.suites:
                self.say(f"{tag} running the test suite with ({key})'s program")
                self.suites[link.digest] = run_suite(m.tree, m.program(key), self.env)
            out[key] = {"digest": link.digest, **self.suites[link.digest]}
        first = next(iter(out.values()))
        self.say(f"{tag} test suite: " + ("passed" if first.get("ok") else
                 first.get("reason") or "FAILED"))  # fmt: skip
        return out


def _settle(cache: Path) -> None:
    """Waits for the promotion of remote hits that runs behind a link (store/behind.py), so
    the machine's next link sees them, as a developer's next build a day later would."""
    from store import Store

    if cache.exists():
        Store(cache).settle()


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} [history] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from . import history_report
    from .__main__ import cpu_model
    from .harness.runner import tool_versions
    from .remote import Redis
    from .sources import machine

    configs = tuple(args.configs.split(",")) if args.configs else Plan.configs
    unknown = [k for k in configs if k not in BY_LETTER]
    if unknown or not configs:
        raise UsageError(f"--configs takes letters among a,b,c,d, not {args.configs!r}")
    out = result_path(args.quick, args.thin_archive)
    if args.report:
        if not out.exists():
            raise UsageError(f"no saved results to report: {out}")
        history_report.write(json.loads(out.read_text()), thin=_saved(result_path(False, True)))
        return 0
    last = args.last or (20 if args.quick else 200)
    work = Path(args.work)
    repo = Path(args.repo) if args.repo else default_repo()
    clone(repo, work / "repository")
    replayed = commits(work / "repository", args.range, last, args.branch)
    plan = Plan(args.developer_every, args.verify_every, args.suite_every, configs,
                args.thin_archive)  # fmt: skip
    results: dict[str, Any] = {
        "benchmark": "history",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": "python -m benchmarks " + " ".join(sys.argv[1:] or ["history"]),
        "machine": {**machine(), "cpu": cpu_model()},
        "tools": tool_versions(),
        "code": code_commit(),
        "repository": {
            "path": str(repo),
            "branch": args.branch,
            "range": f"{replayed[0].sha[:10]}^..{replayed[-1].sha[:10]}",
            "first": replayed[0].date,
            "last": replayed[-1].date,
        },
        "plan": plan.__dict__,
        "configs": {k: BY_LETTER[k].label for k in configs},
        "archive": "thin" if args.thin_archive else "regular",
        "file": out.name,
        "machines": {"CI": 1, "developer": plan.developer_every},
        "complete": False,
        "commits": [],
    }
    say(f"replaying {len(replayed)} commits of {repo.name} ({results['repository']['range']})")
    begin = time.perf_counter()
    redis = Redis(work / "redis")
    try:
        replay = Replay(LUA, work / "repository", work, plan, say, redis.url)
        for i, commit in enumerate(replayed):
            results["commits"].append(replay.commit(i, commit))
            results["wall_s"] = time.perf_counter() - begin
            _write(out, results)
    finally:
        redis.stop()
    results["complete"] = True
    _write(out, results)
    print(history_report.table(results), flush=True)
    if not args.quick:  # the docs show the default run, and a thin-archive run beside it
        main_results = results if not args.thin_archive else _saved(result_path(False, False))
        if main_results is not None:
            history_report.write(main_results, thin=_saved(result_path(False, True)))
    return 0


def code_commit() -> str:
    """The commit of this checkout the replay measures (``+`` if it has local changes)."""
    head = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return f"{head}{'+' if dirty else ''}" or "unknown"


def result_path(quick: bool, thin: bool) -> Path:
    return RESULTS / f"history{'-thin' if thin else ''}{'.quick' if quick else ''}.json"


def _saved(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _write(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(results, indent=1) + "\n")
    temporary.replace(path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", help="a git bundle or repository (default: "
                   "../shared/data/lua-history.bundle beside the main checkout)")  # fmt: skip
    p.add_argument("--branch", default="master", help="the branch --last counts back from")
    p.add_argument("--range", help="the commits, as git revisions (A..B); first-parent")
    p.add_argument("--last", type=int, help="the last N commits of --branch (default 200)")
    p.add_argument("--quick", action="store_true", help="the last 20 commits; no docs or chart")
    p.add_argument(
        "--developer-every",
        type=int,
        default=5,
        metavar="N",
        help="the developer machine builds every Nth commit (default 5)",
    )
    p.add_argument(
        "--verify-every",
        type=int,
        default=20,
        metavar="N",
        help="compare with an uncached link, --verify-hits=1 (default 20)",
    )
    p.add_argument(
        "--suite-every",
        type=int,
        default=20,
        metavar="N",
        help="run Lua's test suite every Nth commit (default 20)",
    )
    p.add_argument("--thin-archive", action="store_true",
                   help="link a thin liblua.a (T added to the makefile's AR flags); results "
                   "in history-thin.json")  # fmt: skip
    p.add_argument("--configs", help="only these configurations, e.g. b,d (default a,b,c,d)")
    p.add_argument("--work", default=str(WORK / "history"), help=argparse.SUPPRESS)
    p.add_argument("--report", action="store_true",
                   help="only redraw the chart and the docs block from saved results")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    for name in ("last", "developer_every", "verify_every", "suite_every"):
        value = getattr(args, name)
        if value is not None and value < 1:
            print(f"python -m benchmarks history: error: --{name.replace('_', '-')} must be "
                  f"at least 1, not {value}", file=sys.stderr)  # fmt: skip
            return 2
    try:
        return run(args)
    except UsageError as e:
        print(f"python -m benchmarks history: error: {e}", file=sys.stderr)
        return 2
