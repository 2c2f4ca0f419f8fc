"""Scenarios: what happens to a build between two links, and how each configuration fares.

Within a scenario every round links once with each configuration, in a rotating order, so
machine drift hits all alike. Backend jobs are counted by the bare distributor of (b), which
sees every job; compilations by the counting remote compiler. In-process ThinLTO (a) has no
remote compiler and no cache: its compilations are its backend jobs.
"""

import filecmp
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sources import ensure_packages
from .codebases import ENV, Build, CodeBase, Edit
from .configs import CONFIGS, Config, counting_wrapper

SUMMARY = re.compile(r"cached-dist: (\d+) jobs: (\d+) hits[^,]*, (\d+) compiled[^\n]*")

SCENARIOS = {
    "cold": "first link, empty caches",
    "relink": "identical relink",
    "touch": "`touch` every source, rebuild, relink",
    "edit-leaf": "one-line body edit in a leaf module",
    "edit-hub": "one-line body edit in a module many others import from",
    "O3": "link with -O3 instead of -O2",
    "copy": "relink in a copy of the build directory",
    "second-dir": "a second build directory, built from scratch, sharing the cache",
    "concurrent-2": "2 concurrent links sharing one empty cache",
    "concurrent-4": "4 concurrent links sharing one empty cache",
}
WARM = ("relink", "touch", "edit-leaf", "edit-hub", "copy", "second-dir")


@dataclass
class Outcome:
    """One configuration in one scenario: one entry per round."""

    times: list[float] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)
    compilations: list[int] = field(default_factory=list)
    identical: list[bool] = field(default_factory=list)
    smoke_ok: list[bool] = field(default_factory=list)
    cached_dist: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        jobs, comp = sum(self.jobs), sum(self.compilations)
        times = sorted(self.times)
        return {
            "times_s": self.times,
            "median_s": times[len(times) // 2] if len(times) % 2 else
                        sum(times[len(times) // 2 - 1 : len(times) // 2 + 1]) / 2,
            "jobs": self.jobs,
            "compilations": self.compilations,
            "hit_rate": (jobs - comp) / jobs if jobs else None,
            "identical_to_b": all(self.identical) if self.identical else None,
            "smoke_ok": all(self.smoke_ok),
            "cached_dist_summary": self.cached_dist,
        }  # fmt: skip


@dataclass
class Link:
    seconds: float
    compilations: int
    jobs_logged: int
    stderr: str


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class Bench:
    """Runs every scenario of one code base in ``work`` and collects the outcomes."""

    def __init__(
        self,
        codebase: CodeBase,
        work: Path,
        rounds: int,
        cold_rounds: int,
        concurrency: list[int],
        progress: Callable[[str], None],
        scenarios: list[str] | None = None,
        uncached_rounds: int | None = None,
    ) -> None:
        self.cb = codebase
        self.work = work
        self.rounds = rounds
        self.cold_rounds = cold_rounds
        self.concurrency = concurrency
        self.say = progress
        self.uncached_rounds = uncached_rounds
        self.scenarios = scenarios or [s for s in SCENARIOS if not s.startswith("concurrent")]
        self.wrapper = counting_wrapper(work / "bin")
        self.counts = work / "counts"
        self.build_cache = work / "build-cache"
        self.results: dict[str, dict[str, Any]] = {}
        self.info: dict[str, Any] = {}

    def cache(self, cfg: Config, shared: str = "caches") -> Path:
        return self.work / shared / cfg.key

    def reset_caches(self, shared: str = "caches") -> None:
        shutil.rmtree(self.work / shared, ignore_errors=True)
        (self.work / shared).mkdir(parents=True)

    # -- one link ------------------------------------------------------------------------

    def start(
        self, build: Build, cfg: Config, out: str, cache: Path, opt: str, tag: str
    ) -> tuple[subprocess.Popen[str], Path, Path]:
        self.counts.mkdir(parents=True, exist_ok=True)
        count, jobs = self.counts / f"{tag}.count", self.counts / f"{tag}.jobs"
        for f in (count, jobs):
            f.unlink(missing_ok=True)
        env = {**ENV, "BENCH_COUNT": str(count), "BENCH_JOBS_LOG": str(jobs)}
        cmd = build.command(out, cfg.flags(cache, self.wrapper), opt)
        proc = subprocess.Popen(cmd, cwd=build.cwd, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        return proc, count, jobs

    def links(self, build: Build, cfg: Config, outs: list[str], cache: Path, opt: str) -> Link:
        """Runs ``len(outs)`` links at once, all with ``cache``; times the whole batch."""
        begin = time.perf_counter()
        started = [
            self.start(build, cfg, o, cache, opt, f"{cfg.key}-{i}") for i, o in enumerate(outs)
        ]
        errors = []
        for proc, _, _ in started:
            _, err = proc.communicate()
            errors.append(err)
            if proc.returncode != 0:
                raise RuntimeError(f"link {cfg.key} of {self.cb.name} failed:\n{err[-3000:]}")
        seconds = time.perf_counter() - begin
        return Link(
            seconds=seconds,
            compilations=sum(len(_lines(c)) for _, c, _ in started),
            jobs_logged=sum(int(n) for _, _, j in started for n in _lines(j)),
            stderr="".join(errors),
        )

    # -- a scenario ----------------------------------------------------------------------

    def scenario(
        self,
        name: str,
        build: Build,
        rounds: int,
        prepare: Callable[[int], None] | None = None,
        opt: str = "-O2",
        parallel: int = 1,
    ) -> None:
        outcomes = {c.key: Outcome() for c in CONFIGS}
        caches = "caches" if parallel == 1 else f"caches-{name}"
        for r in range(rounds):
            if prepare is not None:
                prepare(r)
            if parallel > 1:
                self.reset_caches(caches)
            order = CONFIGS[r % len(CONFIGS) :] + CONFIGS[: r % len(CONFIGS)]
            if self.uncached_rounds is not None and r >= self.uncached_rounds:
                order = [c for c in order if c.cached]  # their links would be the same
            got: dict[str, Link] = {}
            for cfg in order:
                self.say(f"[{self.cb.name}] {name} round {r + 1}/{rounds}: ({cfg.key}) {cfg.label}")
                outs = [f"{self.cb.name}-bench-{cfg.key}-{i}" for i in range(parallel)]
                got[cfg.key] = self.links(build, cfg, outs, self.cache(cfg, caches), opt)
            # (b)'s distributor sees every job; a round without (b) has the jobs of the
            # last (its output, the byte reference, is then from another round: no compare)
            jobs = got["b"].jobs_logged if "b" in got else outcomes["b"].jobs[-1]
            reference = build.cwd / f"{self.cb.name}-bench-b-0"
            for cfg in order:
                link, out = got[cfg.key], outcomes[cfg.key]
                out.times.append(link.seconds)
                out.jobs.append(jobs)
                out.compilations.append(link.compilations if cfg.counted else jobs)
                out.cached_dist += [m.group(0) for m in SUMMARY.finditer(link.stderr)]
                for i in range(parallel):
                    binary = build.cwd / f"{self.cb.name}-bench-{cfg.key}-{i}"
                    if cfg.cached and "b" in got:
                        out.identical.append(filecmp.cmp(binary, reference, shallow=False))
                    if r == 0:
                        out.smoke_ok.append(self.smoke(binary, build))
        self.results[name] = {
            "description": SCENARIOS[name],
            "rounds": rounds,
            "parallel_links": parallel,
            "configs": {k: o.as_json() for k, o in outcomes.items()},
        }
        b = self.results[name]["configs"]
        self.say(f"[{self.cb.name}] {name}: " + ", ".join(
            f"({k}) {v['median_s']:.2f} s {sum(v['compilations'])}/{sum(v['jobs'])} compiled"
            for k, v in b.items()))  # fmt: skip

    def smoke(self, binary: Path, build: Build) -> bool:
        done = subprocess.run(self.cb.smoke(binary, build), cwd=build.cwd, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        if done.returncode != 0:
            self.say(f"[{self.cb.name}] SMOKE TEST FAILED for {binary.name}: {done.stderr[-500:]}")
        return done.returncode == 0

    # -- the whole code base -------------------------------------------------------------

    def edit_rounds(
        self, build: Build, edit: Edit
    ) -> tuple[Callable[[int], None], Callable[[], None]]:
        original: list[str] = []

        def prepare(r: int) -> None:
            file = build.root / edit.path
            if not original:
                original.append(file.read_text())
            file.write_text(original[0])
            edit.apply(build.root, r + 1)
            self.say(f"[{self.cb.name}] rebuilding after edit {r + 1} of {edit.path}")
            self.cb.rebuild(build, self.build_cache)

        def revert() -> None:
            if original:
                (build.root / edit.path).write_text(original[0])
                self.cb.rebuild(build, self.build_cache)

        return prepare, revert

    def run(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        self.wrapper = counting_wrapper(self.work / "bin")
        ensure_packages(self.cb.packages)
        self.say(f"[{self.cb.name}] building with {self.cb.build_system}")
        begin = time.perf_counter()
        build = self.cb.build(self.work / "build", self.build_cache)
        self.info["build_s"] = time.perf_counter() - begin
        self.info["link_command"] = list(build.link)
        self.reset_caches()
        for name in self.scenarios:
            if name.startswith("concurrent"):
                continue
            self.one(name, build)
        for k in self.concurrency:
            self.scenario(f"concurrent-{k}", build, self.cold_rounds, parallel=k)

    def one(self, name: str, build: Build) -> None:
        if name == "cold":
            self.scenario(name, build, self.cold_rounds, prepare=lambda r: self.reset_caches())
        elif name == "relink":
            self.scenario(name, build, self.rounds)
        elif name == "touch":

            def touch(r: int) -> None:
                if r == 0:
                    n = self.cb.touch(build)
                    self.say(f"[{self.cb.name}] touched {n} files, rebuilding")
                    self.cb.rebuild(build, self.build_cache)

            self.scenario(name, build, self.rounds, prepare=touch)
        elif name in ("edit-leaf", "edit-hub"):
            prepare, revert = self.edit_rounds(
                build, self.cb.leaf if name == "edit-leaf" else self.cb.hub
            )
            try:
                self.scenario(name, build, self.rounds, prepare=prepare)
            finally:
                revert()
        elif name == "O3":
            snapshot = self.work / "caches-before-O3"
            shutil.rmtree(snapshot, ignore_errors=True)
            shutil.copytree(self.work / "caches", snapshot, symlinks=True)

            def restore(r: int) -> None:
                if r > 0:
                    shutil.rmtree(self.work / "caches")
                    shutil.copytree(snapshot, self.work / "caches", symlinks=True)

            self.scenario(name, build, self.cold_rounds, prepare=restore, opt="-O3")
            shutil.rmtree(snapshot)
        elif name == "copy":
            top = self.work / "copy"
            shutil.rmtree(top, ignore_errors=True)
            shutil.copytree(build.top, top, symlinks=True)
            self.scenario(name, build.moved(top), self.rounds)
            shutil.rmtree(top)
        elif name == "second-dir":
            self.say(f"[{self.cb.name}] building a second build directory")
            second = self.cb.build(self.work / "second", self.build_cache)
            self.scenario(name, second, self.rounds)
            shutil.rmtree(second.top)
        else:
            raise ValueError(f"unknown scenario {name}")

    def as_json(self) -> dict[str, Any]:
        return {
            "codebase": self.cb.name,
            "package": self.cb.package,
            "language": self.cb.language,
            "build_system": self.cb.build_system,
            "program": self.cb.program,
            "edits": {"leaf": self.cb.leaf.path, "hub": self.cb.hub.path},
            **self.info,
            "scenarios": self.results,
        }


def tool_versions() -> dict[str, str]:
    """The first line of each tool's --version, saved beside the figures."""
    from .configs import LLVM_BIN, cached_dist

    versions = {}
    for name, cmd in {
        "clang": [str(LLVM_BIN / "clang"), "--version"],
        "ld.lld": [str(LLVM_BIN / "ld.lld"), "--version"],
        "cached-dist": [cached_dist(), "--version"],
        "cmake": ["cmake", "--version"],
        "make": ["make", "--version"],
    }.items():
        try:
            done = subprocess.run(cmd, capture_output=True, text=True)
            versions[name] = (done.stdout or done.stderr).splitlines()[0]
        except (OSError, IndexError):
            versions[name] = "unavailable"
    return versions
