"""One machine of the history replay: a build directory of its own, built by the project's
own makefile at each commit, and linked once per cache configuration.

The makefile is driven only through the variables it offers (Lua's: ``CC``, ``MYCFLAGS``,
``MYLDFLAGS``, ``AR``, ``RANLIB``), each read from that commit's makefile and extended:
``-flto=thin`` on the compiles, LLD and the configuration's DTLTO flags on the link. The
front end (the ``.o`` files and the archive) is built once per commit and machine; then
``make PROGRAM`` relinks the program once per configuration, so every configuration links
the same bitcode the same way, and make's own dependencies decide what a commit recompiles.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .harness.configs import BY_KEY, LLVM_BIN, parallelism

EMULATION = Path(__file__).parent / "ccache_emulation.py"
# The makefile variables the replay sets (from the makefile's own value) and reads.
FLAG_VARIABLES = ("CC", "MYCFLAGS", "MYLDFLAGS", "AR", "RANLIB")
TARGET_VARIABLES = ("CORE_T", "LUA_O", "LUA_T")  # the archive, the main object, the program


@dataclass(frozen=True)
class HistoryConfig:
    key: str
    label: str
    cached_dist: bool  # its summary line is cached-dist's


CONFIGS = [
    HistoryConfig("a", "LLD 22's cache (--thinlto-cache-dir)", cached_dist=False),
    HistoryConfig("b", "cached-dist, local cache", cached_dist=True),
    HistoryConfig("c", "cached-dist, local cache + shared Redis tier", cached_dist=True),
    HistoryConfig("d", "raw index-shard keys (ccache 4.13 emulation)", cached_dist=False),
]
BY_LETTER = {c.key: c for c in CONFIGS}


def link_flags(key: str, cache: Path, wrapper: Path, remote: str) -> list[str]:
    """A configuration's DTLTO link flags; ``fresh`` is an uncached link (the byte reference)
    and ``verify-b``/``verify-c`` relink (b)/(c) with ``--verify-hits=1``. Every
    configuration compiles through ``wrapper``, the counting remote compiler."""
    remote_tier = (f"-Xthinlto-distributor=--remote-storage={remote},"
                   "--remote-connect-timeout=5,--remote-timeout=60")  # fmt: skip
    if key == "a":  # the bare distributor behind LLD's own cache
        return BY_KEY["c"].flags(cache, wrapper)
    if key in ("b", "verify-b"):  # cached-dist's own runner
        verify = ["-Xthinlto-distributor=--verify-hits=1"] if key == "verify-b" else []
        return [*BY_KEY["e"].flags(cache, wrapper), *verify]
    if key in ("c", "verify-c"):
        verify = ["-Xthinlto-distributor=--verify-hits=1"] if key == "verify-c" else []
        return [*BY_KEY["e"].flags(cache, wrapper), remote_tier, *verify]
    if key == "d":
        return [f"-fthinlto-distributor={sys.executable}",
                f"-Xthinlto-distributor={EMULATION},--cache-dir={cache},--jobs={parallelism()}",
                f"-Wl,--thinlto-remote-compiler={wrapper}"]  # fmt: skip
    if key == "fresh":
        return BY_KEY["b"].flags(cache, wrapper)
    raise ValueError(key)


# -- the makefile ------------------------------------------------------------------------


class Unbuildable(Exception):
    """A commit that cannot be built as asked: recorded and skipped, never hidden."""


def makefile_variables(text: str) -> dict[str, str]:
    """The right-hand sides of the makefile's simple assignments (``NAME= value``,
    ``NAME = value``, ``:=``), unexpanded, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    found: dict[str, str] = {}
    for line in joined.splitlines():
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\s*:?=(.*)$", line)
        if m and m.group(1) not in found:
            found[m.group(1)] = " ".join(m.group(2).split("#", 1)[0].split())
    return found


def make_arguments(variables: dict[str, str], ldflags: list[str], thin: bool = False) -> list[str]:
    """The command-line variables of one make run: the makefile's own values with clang,
    ThinLTO and ``ldflags`` added (make expands the ``$(...)`` the values still hold).
    ``thin``: the archive is a thin one (``T`` added to the makefile's ``AR`` flags)."""
    missing = [v for v in (*FLAG_VARIABLES, *TARGET_VARIABLES) if v not in variables]
    if missing:
        raise Unbuildable(f"its makefile sets no {', '.join(missing)}")
    ar = variables["AR"].split()
    if ar and ar[0].endswith("ar"):
        ar[0] = "llvm-ar"
    if thin:
        if len(ar) < 2 or ar[1].startswith("-"):
            raise Unbuildable(f"its AR ({variables['AR']}) takes no operation letters to add T to")
        ar[1] += "" if "T" in ar[1] else "T"
    for flag in ldflags:
        if " " in flag:
            raise ValueError(f"a link flag holds a space: {flag!r}")
    return [
        "CC=clang",
        f"MYCFLAGS={variables['MYCFLAGS']} -flto=thin",
        f"MYLDFLAGS={' '.join([variables['MYLDFLAGS'], '-fuse-ld=lld', '-flto=thin', *ldflags])}",
        f"AR={' '.join(ar)}",
        "RANLIB=llvm-ranlib",
    ]


# -- what a link did -----------------------------------------------------------------------

CACHED_DIST = re.compile(
    r"cached-dist: (\d+) jobs: (\d+) hits(?: \(([^)]*)\))?, (\d+) compiled(.*)"
)
EMULATED = re.compile(
    r"ccache emulation: (\d+) jobs: (\d+) hits \((\d+) with the shard path in the key\), "
    r"(\d+) compiled"
)


def parse_summary(stderr: str) -> dict[str, int]:
    """The distributor's own summary line: jobs, hits and what else it names."""
    m = CACHED_DIST.search(stderr)
    if m:
        out = {"jobs": int(m[1]), "hits": int(m[2]), "compiled": int(m[4])}
        remote = re.search(r"(\d+) from the remote", m[3] or "")
        out["remote_hits"] = int(remote[1]) if remote else 0
        verified = re.search(r"(\d+) verified \((\d+) mismatches\)", m[5])
        if verified:
            out |= {"verified": int(verified[1]), "mismatches": int(verified[2])}
        return out
    m = EMULATED.search(stderr)
    if m:
        return {"jobs": int(m[1]), "hits": int(m[2]), "hits_with_shard_path": int(m[3]),
                "compiled": int(m[4])}  # fmt: skip
    return {}


@dataclass
class Link:
    """One link of the program by one configuration on one machine."""

    config: str
    ok: bool
    seconds: float
    compiles: int  # backend compilations, counted by the remote compiler
    compile_real_s: float  # their wall times, summed
    compile_cpu_s: float  # their user + system times, summed
    distributor_jobs: int | None  # the jobs the bare distributor was handed (LLD's misses)
    summary: dict[str, int]
    digest: str = ""
    smoke_ok: bool = False
    killed_attempts: int = 0  # earlier attempts whose distributor was killed (counted in)
    warnings: list[str] = field(default_factory=list)
    error: str = ""

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items()
                if v not in ("", [], None) and not (k == "killed_attempts" and v == 0)}  # fmt: skip


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


class Machine:
    """A build directory at a path of its own, its caches, and its links."""

    def __init__(self, name: str, every: int, tree: Path, state: Path, thin: bool = False) -> None:
        self.name = name
        self.every = every  # builds every Nth commit of the replayed range
        self.tree = tree  # its clone of the repository
        self.state = state  # its caches, counts and linked programs
        self.thin = thin  # a thin archive instead of the makefile's regular one

    def cache(self, key: str) -> Path:
        return self.state / "caches" / key

    def clone(self, repo: Path) -> None:
        shutil.rmtree(self.tree, ignore_errors=True)
        self.tree.parent.mkdir(parents=True, exist_ok=True)
        _git(["clone", "-q", "--shared", "--no-checkout", str(repo), str(self.tree)], repo)

    def checkout(self, sha: str) -> None:
        """Only files the commit changes get a new time: make rebuilds just what they feed."""
        _git(["-c", "advice.detachedHead=false", "checkout", "-q", "--detach", sha], self.tree)

    def variables(self) -> dict[str, str]:
        makefile = self.tree / "makefile"
        if not makefile.exists():
            makefile = self.tree / "Makefile"
        if not makefile.exists():
            raise Unbuildable("no makefile at this commit")
        return makefile_variables(makefile.read_text(errors="replace"))

    def objects(self) -> dict[str, int]:
        """Every object and archive in the tree, with its modification time."""
        return {p.name: p.stat().st_mtime_ns for p in self.tree.iterdir()
                if p.suffix in (".o", ".a")}  # fmt: skip

    def build(self, variables: dict[str, str], env: dict[str, str]) -> dict[str, Any]:
        """The front end: ``make -jN ARCHIVE MAIN_OBJECT``; what it recompiled."""
        before = self.objects()
        begin = time.perf_counter()
        cmd = ["make", f"-j{parallelism()}", *make_arguments(variables, [], self.thin),
               variables["CORE_T"], variables["LUA_O"]]  # fmt: skip
        done = subprocess.run(cmd, cwd=self.tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            errors = [ln for ln in done.stderr.splitlines() if " error: " in ln]
            raise Unbuildable(f"make failed: {errors[0] if errors else _tail(done.stderr)}")
        after = self.objects()
        rebuilt = sorted(n for n, t in after.items() if n.endswith(".o") and before.get(n) != t)
        return {"seconds": time.perf_counter() - begin, "recompiled": rebuilt}

    def link(
        self,
        key: str,
        variables: dict[str, str],
        flags: list[str],
        env: dict[str, str],
        smoke: Callable[[Path], bool],
    ) -> Link:
        """``make PROGRAM`` with ``flags``; the program is kept as ``state/out/KEY``."""
        counts = self.state / "counts"
        counts.mkdir(parents=True, exist_ok=True)
        count, jobs = counts / f"{key}.count", counts / f"{key}.jobs"
        for f in (count, jobs):
            f.unlink(missing_ok=True)
        program = self.tree / variables["LUA_T"]
        program.unlink(missing_ok=True)
        cmd = ["make", *make_arguments(variables, flags, self.thin), variables["LUA_T"]]
        begin = time.perf_counter()
        env = {**env, "BENCH_COUNT": str(count), "BENCH_JOBS_LOG": str(jobs)}
        done = subprocess.run(cmd, cwd=self.tree, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - begin
        lines = [line.split() for line in _lines(count)]
        link = Link(
            config=key,
            ok=done.returncode == 0 and program.exists(),
            seconds=seconds,
            compiles=len(lines),
            compile_real_s=round(sum(float(w[1]) for w in lines if len(w) == 4), 3),
            compile_cpu_s=round(sum(float(w[2]) + float(w[3]) for w in lines if len(w) == 4), 3),
            distributor_jobs=sum(int(n) for n in _lines(jobs)) if jobs.exists() else None,
            summary=parse_summary(done.stderr),
            warnings=[
                ln
                for ln in done.stderr.splitlines()
                if ": warning: " in ln and ln.startswith(("cached-dist", "ld.lld"))
            ],
        )
        if not link.ok:
            link.error = _tail(done.stderr or done.stdout)
            return link
        out = self.state / "out" / key
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(program, out)
        link.digest = digest(out)
        link.smoke_ok = smoke(out)
        return link

    def program(self, key: str) -> Path:
        return self.state / "out" / key


def _git(args: list[str], cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {_tail(done.stderr)}")
    return done.stdout


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# -- checks of what was linked -----------------------------------------------------------


def smoke_command(binary: Path, args: list[str]) -> list[str]:
    return [str(binary), *args]


def run_suite(tree: Path, binary: Path, env: dict[str, str]) -> dict[str, Any]:
    """Lua's own test suite, ``testes/all.lua``, as far as an ordinary build runs it in a
    bounded time on a loaded machine: ``_port=true``, the suite's portable part. That is
    every test file at full length (not ``_soft``) but for what the suite itself marks
    non-portable: the standalone interpreter's tests (main.lua, whose Ctrl-C test races a
    background process against ``echo $!`` and failed under load), C libraries loaded at
    run time, a seek on stdin, locales. The internal tests that need the ``ltests`` build
    (``T``) are skipped by the suite itself on an ordinary build."""
    testes = tree / "testes"
    if not (testes / "all.lua").exists():
        return {"ran": False, "reason": "no testes/all.lua in this tree"}
    begin = time.perf_counter()
    command = [str(binary), "-e", "_port=true", "all.lua"]
    try:
        done = subprocess.run(command, cwd=testes, env=env, input="", capture_output=True,
                              text=True, timeout=1800)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"ran": True, "ok": False, "reason": "timed out after 1800 s"}
    ok = done.returncode == 0 and "final OK" in done.stdout
    result: dict[str, Any] = {"ran": True, "ok": ok, "seconds": time.perf_counter() - begin}
    if not ok:
        result["output"] = _tail(done.stdout + done.stderr, 12)
    return result


def toolchain_env(work: Path) -> dict[str, str]:
    """The environment of every make run: LLVM 22 first on PATH, and no cached-dist
    configuration but the flags' (no user config file, no CACHED_DIST_* variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHED_DIST_")}
    config = work / "xdg-config"
    config.mkdir(parents=True, exist_ok=True)
    return {**env, "PATH": f"{LLVM_BIN}:/usr/bin:/bin", "XDG_CONFIG_HOME": str(config)}
