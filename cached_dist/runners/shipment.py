"""What the link machine sends a remote worker for each job, when no file system is shared.

Every path a job names (its module, shard, imported modules, extra inputs and outputs) is
placed under a sandbox root at its path below the deepest directory that holds them all and
the link's working directory, and the job runs with the working directory re-rooted there:
relative paths, ``..`` included, resolve as they do here. Absolute paths on the command
line become relative to the working directory; the shard names modules by the paths LLD
saw, so a shard that names one by an absolute path is rewritten
(:mod:`cached_dist.bitcode.reroot`) to name it relatively, like the command line.
Each distinct content is sent once per link, however many jobs read it.
"""

from __future__ import annotations

import os

import xxhash

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from ..jobfile import Job, JobFile


class Shipment:
    """The contents to send (each once) and, per job, its spec or why it must stay here."""

    __slots__ = ("contents", "input_bytes", "refused", "specs")

    def __init__(self) -> None:
        self.contents: dict[str, bytes] = {}  # content key -> bytes
        self.specs: dict[int, tuple[dict[str, Any], list[str]]] = {}  # index -> (spec, keys)
        self.refused: dict[int, str] = {}  # index -> why the job compiles on this machine
        self.input_bytes = 0  # the inputs' sizes summed over every job (what naive shipping sends)

    @property
    def shipped_bytes(self) -> int:
        return sum(len(data) for data in self.contents.values())


class _Refused(Exception):
    pass


def content_key(data: bytes) -> str:
    return f"cached-dist-input-{xxhash.xxh3_128_hexdigest(data)}"


def plan(
    job_file: JobFile, jobs: Sequence[Job], identities: dict[str, str], cwd: str | None = None
) -> Shipment:
    """Specs for ``jobs``; ``identities`` maps each compiler to its toolchain identity."""
    shipment = Shipment()
    here = os.path.abspath(cwd or os.getcwd())
    files: dict[str, bytes | OSError] = {}  # absolute path -> contents, each read once

    def read(absolute: str) -> bytes:
        if absolute not in files:
            try:
                with open(absolute, "rb") as f:
                    files[absolute] = f.read()
            except OSError as e:
                files[absolute] = e
        found = files[absolute]
        if isinstance(found, OSError):
            raise _Refused(f"cannot read {absolute}: {found.strerror}")
        return found

    for job in jobs:
        try:
            spec, keys, size = _job_spec(job_file, job, identities, here, read, shipment)
        except _Refused as e:
            shipment.refused[job.index] = str(e)
            continue
        shipment.specs[job.index] = (spec, keys)
        shipment.input_bytes += size
    return shipment


def _job_spec(
    job_file: JobFile,
    job: Job,
    identities: dict[str, str],
    here: str,
    read: Any,
    shipment: Shipment,
) -> tuple[dict[str, Any], list[str], int]:
    command = job_file.command(job)
    compiler = command[0]
    if not compiler or compiler not in identities:
        raise _Refused(f"no toolchain identity for compiler {compiler!r}")
    if not os.path.isabs(compiler) and "/" in compiler:
        raise _Refused(f"the compiler {compiler!r} is named by a relative path")

    def absolute(path: str) -> str:
        return os.path.normpath(os.path.join(here, path))

    # Paths named absolutely become relative to the working directory, in the command line
    # and in the shard alike: the module's name on the command line must stay the name the
    # shard gives it, or the compiler would not recognise it as the module being compiled.
    named = (*job_file.common_inputs, *job.inputs, *job.outputs)
    rename = {p: os.path.relpath(p, here) for p in named if os.path.isabs(p)}
    named_by_shard = [p for p in (job.module, *job.imports) if os.path.isabs(p)]
    base = _sandbox_base(here, named)

    def in_sandbox(path: str) -> str:
        inside = os.path.relpath(absolute(path), base)
        return "" if inside == "." else inside

    sandbox_paths: list[str] = []
    keys: list[str] = []
    size = 0
    for path in dict.fromkeys((*job_file.common_inputs, *job.inputs)):
        data = read(absolute(path))
        if path == job.shard and named_by_shard:
            data = _reroot_shard(data, {p: rename[p] for p in named_by_shard})
        key = content_key(data)
        shipment.contents.setdefault(key, data)
        relative = in_sandbox(path)
        if relative in sandbox_paths:
            continue
        sandbox_paths.append(relative)
        keys.append(key)
        size += len(data)
    argv = [compiler, *(_renamed(arg, rename) for arg in command[1:])]
    spec = {
        "name": os.path.basename(job.module),  # for messages
        "compiler": compiler,
        "identity": identities[compiler],
        "argv": argv,
        "cwd": in_sandbox(here),
        "inputs": sandbox_paths,
        "outputs": [in_sandbox(p) for p in job.outputs],
    }
    return spec, keys, size


def _sandbox_base(here: str, named: Sequence[str]) -> str:
    """The deepest directory holding the working directory, every file the job names and
    every directory a relative path climbs through (``../..``): the sandbox recreates what is
    below it, so a job in a deep build tree costs the worker a few directories, not the
    tree's depth, and relative paths still resolve as they do here."""
    bases = [here]
    for path in named:
        normal = os.path.normpath(os.path.join(here, path))
        bases.append(normal)
        if not os.path.isabs(path):
            climbs = 0
            for part in os.path.normpath(path).split(os.sep):
                if part != "..":
                    break
                climbs += 1
            ancestor = here
            for _ in range(climbs):
                ancestor = os.path.dirname(ancestor)
            bases.append(ancestor)
    return os.path.commonpath(bases)


def _renamed(arg: str, rename: dict[str, str]) -> str:
    """``arg`` with a path it names (alone, or after ``-flag=``) renamed."""
    if arg in rename:
        return rename[arg]
    flag, eq, value = arg.partition("=")
    if eq and value in rename:
        return f"{flag}={rename[value]}"
    return arg


def _reroot_shard(data: bytes, rename: dict[str, str]) -> bytes:
    from ..bitcode.reroot import RerootError, rename_modules

    try:
        return rename_modules(data, rename)
    except RerootError as e:
        raise _Refused(f"the shard names modules by absolute paths and cannot be rewritten: "
                       f"{e}") from None  # fmt: skip
