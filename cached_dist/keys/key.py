"""The cache key of a backend job: everything that determines its outputs, nothing else.

Ingredients (see docs/keys.md for why each is there):
- the key-format version, so a new recipe never meets old entries;
- the toolchain identity (compiler executable and its LLVM libraries), the name the compiler
  is run by (clang picks its driver mode from it: ``clang-cl`` reads options differently)
  and, when the job file has one, the linker version;
- the command line after the compiler, with every path of the job's own files replaced by
  its role, so LLD's per-link names (``t1.1.2427.native.o``) never enter the key;
- for any other argument naming an existing file (itself or after any ``=``, as in
  ``-mllvm=-codegen-data-use-path=FILE``; ``DIR/default.profdata`` for ``-fprofile-use=DIR``
  and ``default.profdata`` for a bare ``-fprofile-use``): its content, and the working
  directory when that path is relative;
- the content of the module, of each module it imports from, of extra and common inputs;
- the summary index shard, through :func:`shard_digest`.

A job whose options write files beside the object, or make the object depend on its own
path, has no key at all (:mod:`.side_outputs`).
"""

from __future__ import annotations

import os

import xxhash

from ..jobfile import Job, JobFile
from .digests import Digests
from .side_outputs import command_side_output_reason, side_output_reason

# 2: canonical summary shards; 3: entries hold the compiler's diagnostics; 4: the compiler's
# program name, files after a second '=' and implied profiles
KEY_FORMAT = 4

TYPE_CHECKING = False  # collections.abc imports collections: ~1.5 ms of a full hit
if TYPE_CHECKING:
    from collections.abc import Callable

    ShardDigest = Callable[[Job, Digests], str]


class NotCacheableError(Exception):
    """The job's outputs are not determined by what a key can name; the message says why."""


def raw_shard_digest(job: Job, digests: Digests) -> str:
    """The shard's bytes as they are: right, but per-link names inside make it miss more."""
    return "raw:" + (digests.of(job.shard) if job.shard is not None else "none")


def role(job_file: JobFile, job: Job | None, path: str) -> str | None:
    """The role ``path`` plays among the job's own files (the first, in LLD's order: module,
    shard, imports, extra inputs, common inputs, outputs), or None if it is none of them.
    With ``job`` None, only the roles every job shares (the common inputs)."""
    if job is None:
        common = job_file.common_inputs
        return f"<common{common.index(path)}>" if path in common else None
    if path == job.module:
        return "<module>"
    if path == job.shard:
        return "<shard>"
    for name, paths in (("import", job.imports), ("extra", job.extra_inputs),
                        ("common", job_file.common_inputs), ("output", job.outputs)):  # fmt: skip
        if path in paths:
            return f"<{name}{paths.index(path)}>"
    return None


def job_key(
    job_file: JobFile,
    job: Job,
    digests: Digests,
    toolchain: str,
    shard_digest: ShardDigest = raw_shard_digest,
) -> str:
    """The key as a hex string; OSError if an input cannot be read, NotCacheableError if
    the job must always be compiled."""
    return Recipe(job_file, digests).key(job, toolchain, shard_digest)


class Recipe:
    """The key recipe for the jobs of one job file. What they share (the shared arguments,
    the files those name, the common inputs) is worked out once, not once per job; a job
    one of whose own paths is also a shared argument gets the whole recipe, since that
    argument then stands for its role (the same key either way)."""

    def __init__(self, job_file: JobFile, digests: Digests) -> None:
        self.job_file = job_file
        self.digests = digests
        common = job_file.common_args
        self.shared = common[1:]  # common_args[0] is the compiler: the toolchain identity
        self.from_job = 0 if common else 1  # where a job's arguments start in argv[1:]
        self.shared_parts: list[str] = []
        self.shared_files: list[str] = []
        _arg_parts(job_file, None, self.shared, digests, self.shared_parts, self.shared_files)
        # A job path equal to any of these would give a shared argument a role in that job.
        self.names = {*self.shared, *(a.partition("=")[2] for a in self.shared)}
        self.head = [f"cached-dist key {KEY_FORMAT}", "", "", job_file.linker_version or "-",
                     "argv"]  # fmt: skip
        # The name the compiler is run by (design-schema jobs name their own compiler).
        self.program = program_name(common[0]) if common else None
        # Jobs whose own arguments are LLD's (lld_arguments) skip the scans of them: their
        # side-output reason is the shared arguments' alone, unless those end in a flag
        # whose value is the job's first argument.
        self.lld = bool(common) and common[-1] not in ("-mllvm", "-Xclang")
        self.shared_reason = side_output_reason(common) if self.lld else None

    def key(self, job: Job, toolchain: str, shard_digest: ShardDigest = raw_shard_digest) -> str:
        """:func:`job_key` of ``job``."""
        return self.finish(self.prefix(job, toolchain), shard_digest(job, self.digests))

    @staticmethod
    def finish(prefix: bytes, shard: str) -> str:
        """The key of :meth:`prefix` and the shard's digest, the last ingredient."""
        return xxhash.xxh3_128_hexdigest(prefix + shard.encode("utf-8", "surrogateescape"))

    def prefix(self, job: Job, toolchain: str) -> bytes:
        """What the key hashes but the shard's digest, which may come later (from a worker
        decoding the shard); raises as :meth:`key` does."""
        job_file, digests = self.job_file, self.digests
        lld = self.lld and lld_arguments(job_file, job)
        if lld:
            reason = self.shared_reason
        else:
            reason = command_side_output_reason(job_file.common_args, job.args)
        if reason is not None:
            raise NotCacheableError(reason)
        parts = list(self.head)
        parts[1] = toolchain
        parts[2] = self.program if self.program is not None else program_name(job.args[0])
        names = self.names
        if names.isdisjoint(job.inputs) and names.isdisjoint(job.outputs):
            parts += self.shared_parts
            others = list(self.shared_files)
        else:
            others = []
            _arg_parts(job_file, job, self.shared, digests, parts, others)
        if lld:
            parts += LLD_PARTS
        else:
            _arg_parts(job_file, job, job.args[self.from_job :], digests, parts, others)
        if others:
            parts.append("files")
            for path in others:
                parts += [path, digests.of(path)]
            if any(not os.path.isabs(p) for p in others):
                parts += ["cwd", os.getcwd()]
        parts += ["module", digests.of(job.module), "imports"]
        parts += digests.of_each(job.imports)
        parts.append("extra")
        parts += digests.of_each(job.extra_inputs)
        parts.append("common")
        parts += digests.of_each(job_file.common_inputs)
        parts += ["shard", ""]  # the shard's digest goes after this separator
        return "\0".join(parts).encode("utf-8", "surrogateescape")


#: What _arg_parts gives for the arguments LLD writes for every job (lld_arguments).
LLD_PARTS = ("<module>", "-fthinlto-index=<shard>", "-o", "<output0>")


_FLAGGED = ("-", "@")  # what starts an option or a response file: never a plain path to clang


def program_name(compiler: str) -> str:
    """The name ``compiler`` is run by, which clang reads (as its ``argv[0]``) for its driver
    mode: ``clang-cl`` and ``clang`` are one executable that reads one command line
    differently (LLVM issue 220379), so the identity, which follows symbolic links, is not
    enough. Its directory does not matter, and neither does a Windows ``.exe``."""
    name = compiler.replace("\\", "/").rpartition("/")[2]
    return name[:-4] if name.lower().endswith(".exe") else name


def lld_arguments(job_file: JobFile, job: Job) -> bool:
    """Whether the job's own arguments are the ones LLD writes, ``[module,
    -fthinlto-index=shard, -o, output]``, so that :func:`_arg_parts` would give
    :data:`LLD_PARTS` and no file, and no side-output reason would come of them.

    That holds when no path of the job is spelled like another of these arguments (a role
    is the first path an argument equals, in :func:`role`'s order), and neither the module
    nor the output looks like a flag or a response file. Each condition is a comparison or a
    scan in C, where the role lookups are loops in Python (~3.4 us a job of 25 imports, a
    third of the key).
    """
    args = job.args
    if len(args) != 4:
        return False
    module, index, dash_o, out = args
    shard = job.shard
    outputs = job.outputs
    if (shard is None or module != job.module or dash_o != "-o" or out != outputs[0]
            or index != "-fthinlto-index=" + shard or module[:1] in _FLAGGED
            or out[:1] in _FLAGGED
            or module in (shard, index, out) or shard in (dash_o, out)):  # fmt: skip
        return False
    for paths in (job.imports, job.extra_inputs, job_file.common_inputs):
        if index in paths or dash_o in paths or out in paths:
            return False
    return index not in outputs and dash_o not in outputs


def _arg_parts(
    job_file: JobFile, job: Job | None, args: tuple[str, ...], digests: Digests,
    parts: list[str], others: list[str],
) -> None:  # fmt: skip
    """Appends each argument (a path of the job's own files as its role) to ``parts``, and
    each existing file another argument names (:func:`named_files`) to ``others`` (its
    content counts)."""
    for arg in args:
        flag, eq, value = arg.partition("=")
        if (named := role(job_file, job, arg)) is not None:
            parts.append(named)
        elif eq and (named := role(job_file, job, value)) is not None:
            parts.append(f"{flag}={named}")
        else:
            parts.append(arg)
            others += [path for path in named_files(arg) if digests.is_file(path)]


#: Options that read ``default.profdata`` from the working directory (clang's driver).
_DEFAULT_PROFILE = ("-fprofile-use", "-fprofile-instr-use")


def named_files(arg: str) -> list[str]:
    """The paths an argument may name a file by: itself, what follows each ``=`` (the value
    of ``-mllvm=-codegen-data-use-path=FILE`` is an option whose value is the file), and the
    profile clang's driver reads for ``-fprofile-use`` (``default.profdata``, or
    ``DIR/default.profdata`` for a directory). Those starting with ``-`` are options."""
    found = [] if arg[:1] == "-" else [arg]
    rest = arg
    while "=" in rest:
        rest = rest.partition("=")[2]
        if rest and rest[:1] != "-":
            found.append(rest)
    if arg in _DEFAULT_PROFILE:
        found.append("default.profdata")
    elif arg.startswith("-fprofile-use="):
        directory = arg.partition("=")[2]
        if directory and os.path.isdir(directory):
            found.append(os.path.join(directory, "default.profdata"))
    return found
