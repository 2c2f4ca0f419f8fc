"""A --group-shared cache used by two real users of one group, as docs/guide.md sets it up.

Every member links, misses and hits what the other stored, and runs stats, verify, trim and
clear, under a strict (077) and a loose (022) umask; everything in the cache keeps the modes
the guide promises. The users and the group are created here (CI runs as root). They run a
copy of the program in a directory any user can read, under Debian's interpreter of the same
version: the test's own interpreter may sit in a directory only root can enter (pyenv's, in
/root).
"""

from __future__ import annotations

import grp
import importlib
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from .toolchain import Project, build, requires_toolchain

pytestmark = [
    requires_toolchain,
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: creates two users and a group"),
]

GROUP = "cdist-team"
USERS = ("cdist-ann", "cdist-bob")
#: What a link needs at run time: the program and its dependencies (pyproject.toml).
PACKAGES = (
    "cached_dist",
    "store",
    "procs",
    "xxhash",
    "diskcache",
    "filelock",
    "psutil",
    "zstandard",
)
SUMMARY = re.compile(r"cached-dist: (\d+) jobs: (\d+) hits.*?, (\d+) compiled")


def _ensure_account(kind: str, name: str) -> None:
    lookup = grp.getgrnam if kind == "group" else pwd.getpwnam
    try:
        lookup(name)
        return
    except KeyError:
        pass
    if kind == "group":
        cmd = ["groupadd", name]
    else:
        cmd = ["useradd", "--no-create-home", "--no-user-group", "--gid", GROUP,
               "--shell", "/usr/sbin/nologin", name]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    try:
        lookup(name)  # another run may have made it meanwhile
    except KeyError:
        pytest.fail(f"cannot create {kind} {name}: {done.stderr.strip()}")


def _interpreter() -> str:
    """An interpreter of this version that any user can run (the venv's may be in /root)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (
        sys.executable,
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
    ):
        real = os.path.realpath(candidate)
        if os.path.exists(real) and _world_reachable(real):
            return real
    pytest.fail(f"no python{version} another user can run (install Debian's python{version})")


def _world_reachable(path: str) -> bool:
    """Whether every directory above ``path`` lets others through, and they may run it."""
    parts = Path(path).parents
    if not all(os.stat(p).st_mode & stat.S_IXOTH for p in parts):
        return False
    return bool(os.stat(path).st_mode & stat.S_IXOTH)


@dataclass
class Team:
    """Two users of one group, a program they can run, and a cache made as the guide says."""

    base: Path
    python: str
    program: Path  # the cached-dist command, for every user
    gid: int

    def home(self, user: str) -> Path:
        return self.base / user

    def run(
        self, user: str, umask: str, argv: Sequence[str | os.PathLike[str]],
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """``argv`` as ``user`` (in the group) with ``umask``, in a clean environment."""
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home(user)), "LANG": "C.UTF-8"}
        cmd = ["setpriv", f"--reuid={user}", f"--regid={GROUP}", "--init-groups",
               "sh", "-c", f'umask {umask} && exec "$@"', "sh", *map(str, argv)]  # fmt: skip
        return subprocess.run(cmd, cwd=cwd or self.home(user), env=env, capture_output=True,
                              text=True, timeout=600)  # fmt: skip

    def new_cache(self, name: str) -> Path:
        """As docs/guide.md: mkdir, chgrp to the group, chmod 2770."""
        cache = self.base / name
        cache.mkdir()
        os.chown(cache, 0, self.gid)
        cache.chmod(0o2770)
        return cache

    def project(self, user: str, program: str, where: str) -> Project:
        """``program`` compiled to bitcode in a directory of ``user``'s."""
        project = build(program, self.home(user) / where)
        for path in [project.dir, *project.dir.rglob("*")]:
            os.chown(path, pwd.getpwnam(user).pw_uid, self.gid)
        return project

    def link(
        self, user: str, umask: str, project: Project, out: str, cache: Path,
        extra: Sequence[str] = (),
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        args = [f"--cache-dir={cache}", "--group-shared", *extra]
        cmd = project.link_command(out, distributor=str(self.program), distributor_args=args)
        return self.run(user, umask, cmd, cwd=project.dir)

    def command(self, user: str, umask: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(user, umask, [self.program, *args])


@pytest.fixture(scope="module")
def team() -> Iterator[Team]:
    _ensure_account("group", GROUP)
    for user in USERS:
        _ensure_account("user", user)
    base = Path(tempfile.mkdtemp(prefix="cached-dist-team-", dir="/tmp"))
    try:
        base.chmod(0o755)
        lib = base / "lib"
        for name in PACKAGES:
            source = Path(importlib.import_module(name).__file__ or "").parent
            shutil.copytree(source, lib / name)
        python = _interpreter()
        program = base / "cached-dist"
        # PYTHONPATH in the environment: the detached writer (store/behind.py) needs it too.
        program.write_text(
            f"#!/bin/sh\nPYTHONPATH='{lib}' exec '{python}' -P -m cached_dist \"$@\"\n"
        )
        program.chmod(0o755)
        gid = grp.getgrnam(GROUP).gr_gid
        for user in USERS:
            home = base / user
            home.mkdir()
            os.chown(home, pwd.getpwnam(user).pw_uid, gid)
            home.chmod(0o700)
        yield Team(base, python, program, gid)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def counts(done: subprocess.CompletedProcess[str]) -> tuple[int, int, int]:
    """(jobs, hits, compiled) from a link's summary line."""
    found = SUMMARY.search(done.stderr)
    assert found is not None, done.stderr
    jobs, hits, compiled = (int(g) for g in found.groups())
    return jobs, hits, compiled


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """A command that succeeded and warned of nothing (a permission problem shows as one)."""
    assert done.returncode == 0, (done.args, done.stdout, done.stderr)
    assert "warning" not in done.stderr and "error" not in done.stderr, done.stderr
    return done


def odd_modes(cache: Path, gid: int) -> list[str]:
    """Everything in the cache whose mode or group is not what the guide promises:
    directories 2770, files 660 (claim markers 640: filelock never makes one writable by
    others), all of the cache's group."""
    odd = []
    for path in [cache, *cache.rglob("*")]:
        st = path.lstat()
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            want = 0o2770
        elif path.parent.name == "claims" and path.suffix == ".lock":
            want = 0o640
        else:
            want = 0o660
        if (
            mode != want
            or st.st_gid != gid
            or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode))
        ):
            odd.append(f"{path.relative_to(cache)} {oct(st.st_mode)} gid {st.st_gid}")
    return odd


@pytest.mark.parametrize("ann_umask, bob_umask", [("077", "022"), ("022", "077")])
def test_every_member_links_and_maintains_a_group_shared_cache(
    team: Team, ann_umask: str, bob_umask: str
) -> None:
    ann, bob = USERS
    umask = {ann: ann_umask, bob: bob_umask}
    cache = team.new_cache(f"cache-{ann_umask}-{bob_umask}")
    tag = f"{ann_umask}{bob_umask}"
    calc = {u: team.project(u, "calc", f"calc-{tag}") for u in USERS}
    shapes = {u: team.project(u, "shapes", f"shapes-{tag}") for u in USERS}
    steps = [  # (user, project, compiled: misses on both sides; hits of the other's objects)
        (ann, calc, 5),  # ann's misses
        (bob, calc, 0),  # every object ann stored
        (bob, shapes, 4),  # bob's misses
        (ann, shapes, 0),  # every object bob stored
    ]
    for user, projects, compiled in steps:
        project = projects[user]
        done = ok(team.link(user, umask[user], project, "app", cache))
        jobs, hits, got = counts(done)
        assert (hits, got) == (jobs - compiled, compiled), done.stderr
        assert project.run_program("app") == project.expected_output
        assert odd_modes(cache, team.gid) == []
    for user in USERS:
        stats = json.loads(ok(team.command(user, umask[user], "stats", "--json",
                                           f"--cache-dir={cache}", "--group-shared")).stdout)  # fmt: skip
        assert stats["entries"] == 9 and stats["hits"] == 9 and stats["misses"] == 9, stats
        verified = ok(team.command(user, umask[user], "verify", f"--cache-dir={cache}",
                                   "--group-shared"))  # fmt: skip
        assert "and 9 entries: 0 corrupt blobs removed, 0 entries dropped" in verified.stdout
        ok(team.command(user, umask[user], "trim", f"--cache-dir={cache}", "--group-shared"))
        assert odd_modes(cache, team.gid) == []
    ok(team.command(bob, umask[bob], "clear", f"--cache-dir={cache}", "--group-shared"))
    stats = json.loads(ok(team.command(ann, umask[ann], "stats", "--json", f"--cache-dir={cache}",
                                       "--group-shared")).stdout)  # fmt: skip
    assert stats["entries"] == 0 and stats["size"] == 0
    # After bob's clear, ann's misses are stored again, in directories bob made.
    again = ok(team.link(ann, umask[ann], calc[ann], "again", cache))
    assert counts(again)[2] == 5
    ok(team.command(ann, umask[ann], "clear", f"--cache-dir={cache}", "--group-shared"))
    assert odd_modes(cache, team.gid) == []


def test_members_linking_at_once_compile_each_job_once(team: Team) -> None:
    cache = team.new_cache("cache-at-once")
    projects = {u: team.project(u, "calc", "calc-at-once") for u in USERS}
    links = []
    for user in USERS:
        project = projects[user]
        args = [f"--cache-dir={cache}", "--group-shared"]
        cmd = project.link_command("app", distributor=str(team.program), distributor_args=args)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(team.home(user)), "LANG": "C.UTF-8"}
        links.append(subprocess.Popen(
            ["setpriv", f"--reuid={user}", f"--regid={GROUP}", "--init-groups", "sh", "-c",
             'umask 077 && exec "$@"', "sh", *cmd],
            cwd=project.dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
    done = []
    for user, link in zip(USERS, links, strict=True):
        out, err = link.communicate(timeout=600)
        done.append(ok(subprocess.CompletedProcess(link.args, link.returncode, out, err)))
        assert projects[user].run_program("app") == projects[user].expected_output
    # One claim per job across both users: whoever waits reads what the other stored.
    assert sum(counts(d)[2] for d in done) == 5, [d.stderr for d in done]
    assert odd_modes(cache, team.gid) == []


HOLD = """
import os, sys
from store import Store
store = Store(sys.argv[1], group_shared=True)
claim = store.claim(sys.argv[2], wait=0)
print(claim.acquired, flush=True)
os.kill(os.getpid(), 9)  # dies holding it: the marker stays
"""

TAKE = """
import sys
from store import Store
store = Store(sys.argv[1], group_shared=True)
with store.claim(sys.argv[2], wait=60) as claim:
    print(claim.acquired, claim.reason)
"""


def test_a_claim_left_by_a_killed_member_is_taken_over_by_another(team: Team) -> None:
    """Claim markers are 640 (filelock's rule): another member cannot write one, and takes
    over a dead member's marker by renames in the group-writable directory."""
    ann, bob = USERS
    cache = team.new_cache("cache-claims")
    key = "ab" * 16
    lib = str(team.base / "lib")
    held = team.run(ann, "077", ["env", f"PYTHONPATH={lib}", team.python, "-c", HOLD, cache, key])
    assert held.returncode == -signal.SIGKILL and held.stdout == "True\n", held
    marker = cache / "claims" / f"{key}.lock"
    assert marker.exists() and stat.S_IMODE(marker.stat().st_mode) == 0o640
    started = time.monotonic()
    taken = team.run(bob, "077", ["env", f"PYTHONPATH={lib}", team.python, "-c", TAKE, cache, key])
    assert taken.returncode == 0 and taken.stdout == "True acquired\n", taken
    assert time.monotonic() - started < 50  # taken over, not waited out (bound: 60 s)
    assert not marker.exists()


FORGE = """
import sys, tempfile
from store import Store
from store.manifest import Manifest
store = Store(sys.argv[1], group_shared=True)
forged = 0
for key, raw in list(store._index.entries()):
    manifest = Manifest.decode(key, raw)
    for role, (digest, size) in manifest.outputs.items():
        data = store._blobs.read_verified(digest, size)  # either form (plain, zstd)
        if data is not None and b"1+2*3" in data:
            with tempfile.NamedTemporaryFile(dir=sys.argv[2]) as f:
                f.write(data.replace(b"1+2*3", b"9+9*9"))
                f.flush()
                meta = manifest.meta
                forged += store.put(key, {role: f.name}, duration=meta["duration"],
                                    toolchain=meta["toolchain"], key_version=meta["key_version"])
print(forged)
"""


def test_a_member_can_change_what_another_gets_unless_hits_are_verified(team: Team) -> None:
    """The trust model of docs/guide.md: a member writing through the store API gives
    another a wrong binary; --verify-hits=1 gives the right one and says so."""
    ann, bob = USERS
    cache = team.new_cache("cache-trust")
    project = team.project(ann, "calc", "calc-trust")
    first = ok(team.link(ann, "022", project, "app", cache))
    assert counts(first)[2] == 5
    lib = str(team.base / "lib")
    forged = team.run(bob, "022", ["env", f"PYTHONPATH={lib}", team.python, "-c", FORGE, cache,
                                   team.home(bob)])  # fmt: skip
    assert forged.returncode == 0 and forged.stdout == "1\n", forged
    served = ok(team.link(ann, "022", project, "forged", cache))
    assert counts(served)[1] == 5
    assert project.run_program("forged").startswith("9+9*9 = 90\n")  # what bob put there
    checked = team.link(ann, "022", project, "checked", cache, ["--verify-hits=1"])
    assert checked.returncode == 0, checked.stderr
    assert "HIT MISMATCH" in checked.stderr and "5 verified (1 mismatches)" in checked.stderr
    assert project.run_program("checked") == project.expected_output
    assert (project.dir / "checked").read_bytes() == (project.dir / "app").read_bytes()


BEHIND = """
import sqlite3, sys
from store import Store
root = sys.argv[1]
Store(root, group_shared=True).close()
store = Store(root, group_shared=True)  # as a link opens it: the index read, not written
assert store.memo_get("ns", "k") is None
lock = sqlite3.connect(root + "/index/cache.db", isolation_level=None)
lock.execute("BEGIN IMMEDIATE")  # holds the detached writer up, as a concurrent writer would
store.write_behind([("ns", "k", "written behind")], [])
print(Store(root, group_shared=True).memo_get("ns", "k"))
lock.execute("ROLLBACK")
"""

SETTLE = """
import sys
from store import Store
store = Store(sys.argv[1], group_shared=True)
store.settle()
print(store.memo_get("ns", "k"))
"""


def test_a_member_s_detached_writer_stores_what_another_then_reads(team: Team) -> None:
    ann, bob = USERS
    cache = team.new_cache("cache-behind")
    lib = str(team.base / "lib")
    behind = team.run(ann, "077", ["env", f"PYTHONPATH={lib}", team.python, "-c", BEHIND, cache])
    assert behind.returncode == 0 and behind.stdout == "None\n", behind  # not written here
    settled = team.run(bob, "077", ["env", f"PYTHONPATH={lib}", team.python, "-c", SETTLE, cache])
    assert settled.returncode == 0 and settled.stdout == "written behind\n", settled
    assert os.listdir(cache / "tmp") == []  # the writer took its work file
    assert odd_modes(cache, team.gid) == []
