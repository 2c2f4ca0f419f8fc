"""Rooms that say what they hold: the job file's walk through a link stays shallow.

Followed from ``link/flow.py`` ``run`` through the calls a link makes, the job file (or its
jobs) enters each module at most three times: a call from another module that passes it as
an argument, counted once per caller and callee. A module entered more often holds a piece
of work that belongs with another, or the other way round (issue 41: the shard key was
entered 7 times, the cached link 9, with the early worker's plumbing in ``keys/``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from .toolchain import build, cached_dist_exe, requires_toolchain

CAPTURE = Path(__file__).parent / "capture_jobfile.py"
PROJECT = ("cached_dist", "store", "procs")
MOST = 3


def walked(link: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Runs ``link`` (which calls link.flow.run once); returns, per module, the calls from
    other modules that passed the job file or its jobs (``caller -> callee``)."""
    from cached_dist.link import flow

    real = flow.run
    edges: set[tuple[str, str, str]] = set()  # (callee's module, caller, callee)

    def run(job_file: Any, *args: Any, **kw: Any) -> Any:
        carried = {id(job_file), id(job_file.jobs)}

        def profile(frame: FrameType, event: str, arg: object) -> None:
            if event != "call":
                return
            module = frame.f_globals.get("__name__", "")
            caller = frame.f_back
            if caller is None or not module.startswith(PROJECT):
                return
            if caller.f_globals.get("__name__", "") == module:
                return
            code = frame.f_code
            names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            if any(id(frame.f_locals.get(name)) in carried for name in names):
                by = f"{caller.f_globals.get('__name__')}.{caller.f_code.co_qualname}"
                edges.add((module, by, code.co_qualname))

        edges.add(("cached_dist.link.flow", "(the link)", "run"))
        sys.setprofile(profile)
        try:
            return real(job_file, *args, **kw)
        finally:
            sys.setprofile(None)

    monkeypatch.setattr(flow, "run", run)
    link()
    entered: dict[str, list[str]] = {}
    for module, caller, callee in sorted(edges):
        entered.setdefault(module, []).append(f"{caller} -> {callee}")
    return entered


def too_often(entered: dict[str, list[str]]) -> dict[str, list[str]]:
    return {module: calls for module, calls in entered.items() if len(calls) > MOST}


@pytest.fixture
def captured(tmp_path: Path) -> Path:
    """A real link of shapes (a thin archive), its job file and every input kept."""
    project = build("shapes", tmp_path / "p", "thin")
    done = project.link("app", distributor=sys.executable, distributor_args=[
        str(CAPTURE), str(tmp_path / "saved"), cached_dist_exe(),
        f"--cache-dir={tmp_path / 'first'}", "--quiet"])  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tmp_path / "saved"


@requires_toolchain
@pytest.mark.e2e
@pytest.mark.parametrize("how", ["compiled", "full hit"])
def test_a_link_s_job_file_enters_no_module_more_than_three_times(
    captured: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    from cached_dist import cli

    cache = tmp_path / ("cache" if how == "compiled" else "first")
    monkeypatch.chdir(captured)
    entered = walked(lambda: cli.main([f"--cache-dir={cache}", "job.json"]), monkeypatch)
    assert {"cached_dist.link.cached", "cached_dist.keys.compute"} <= entered.keys()
    if how == "compiled":
        assert "cached_dist.link.dispatch" in entered  # the walk reached the runner
    assert too_often(entered) == {}


def test_a_served_link_s_job_file_enters_no_module_more_than_three_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its early worker (a warm server's child, a link of many archive members)."""
    from cached_dist import cli
    from cached_dist.serve import early
    from cached_dist.serve.handoff import FallBack

    from .test_shard_keys import write_job_file, write_link

    monkeypatch.chdir(tmp_path)
    write_job_file(tmp_path / "app.json",
                   write_link(tmp_path, early.EARLY_MIN_JOBS + 22))  # fmt: skip

    class Handoff:
        committed = False
        standby = None
        early_started = False

        def commit(self, full_hit: bool, why: str = "", failed: str = "") -> None:
            raise FallBack(why)  # not a hit (an empty cache): handed back, as a server would

    def link() -> None:
        with pytest.raises(FallBack):
            cli.main(["--cache-dir=cache", "--jobs=2", "app.json"], Handoff())  # type: ignore[arg-type]

    entered = walked(link, monkeypatch)
    assert "cached_dist.serve.early" in entered  # the early worker was started
    assert too_often(entered) == {}
