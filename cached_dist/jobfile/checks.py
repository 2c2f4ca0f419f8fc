"""Up-front checks of a job file against the file system, before anything on disk is touched.

A job file written by hand or by a buggy wrapper can name an input as an output (the link
would delete the user's file before compiling), two jobs with one output (one object
silently overwrites the other), a FIFO or a device as an input (reading it never ends), an
output that is a directory, or a command that writes a file its job does not declare (read as
clang reads it: writes.py). Each is refused here with one line naming the job and the path,
using ``os.stat`` only: nothing is opened, created or removed until every check has passed.

The work is one ``stat`` per distinct input and per output, and a set of output names; the
per-directory lookups are memoized, so a 100,000-job file is checked in well under a second.
"""

import os
import stat

from ..errors import InputError
from . import Job, JobFile
from .writes import MODES, Found, driver_mode, program_mode, read

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))  # fmt: skip


def kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_input(path: str, examined: dict[str, os.stat_result] | None = None) -> str | None:
    """Why ``path`` cannot be an input, or None when it is a regular file (whose ``stat`` goes
    into ``examined``: the key reads it with this stat, see keys/digests.py).

    Only ``stat``: opening a FIFO blocks until a writer comes, and reading a device such as
    /dev/zero never ends. An archive member LLD 21 names but does not write,
    ``ARCHIVE(MEMBER at OFFSET)``, is an input too: it is read from the archive (an
    InputError if the archive holds no such member there).
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        from .members import named_member  # only LLD 21 names files that do not exist

        return None if named_member(path) is not None else "not found"
    except OSError as e:
        return f"cannot be examined ({e.strerror})"
    if stat.S_ISREG(st.st_mode):
        if examined is not None:
            examined[path] = st
        return None
    return f"is {kind(st.st_mode)}, not a regular file"


def _where(job: Job) -> str:
    return f"job {job.index}, module {job.module}"


class _Outputs:
    """Output paths by the directory they are in (resolved once per directory) and name."""

    def __init__(self, protected: tuple[str, ...]) -> None:
        self.real_dirs: dict[str, str] = {}
        self.owner: dict[tuple[str, str], int] = {}
        # The cache's directory resolved, not its parts: one of them replaced by a symbolic
        # link leads elsewhere (the store then refuses to use the cache, a warning), and
        # must not make outputs there look like the cache's own files.
        self.protected = tuple(os.path.join(os.path.realpath(os.path.dirname(p)),
                                            os.path.basename(p)) for p in protected)  # fmt: skip

    def real_dir(self, directory: str) -> str:
        found = self.real_dirs.get(directory)
        if found is None:
            found = self.real_dirs[directory] = os.path.realpath(directory or ".")
        return found


def check_job_file(job_file: JobFile, protected: tuple[str, ...] = ()) -> dict[str, os.stat_result]:
    """Raises InputError for the first defect; returns only if the link may touch the disk,
    with the ``stat`` of every input examined (reused by the key: one ``stat`` per input per
    link, not two).

    ``protected`` are directories no output may be inside (the cache's own).
    """
    examined: dict[str, os.stat_result] = {}
    input_names = _check_inputs(job_file, examined)
    _check_outputs(job_file, input_names, _Outputs(protected))
    return examined


def _check_inputs(job_file: JobFile, examined: dict[str, os.stat_result]) -> set[str]:
    """Every input a regular file; returns the set of input paths, as written and normalized."""
    names: set[str] = set()
    for path in job_file.common_inputs:
        if path not in names:
            problem = check_input(path, examined)
            if problem is not None:
                raise InputError(_input_message(path, problem, "common.inputs"))
            names.add(path)
    for job in job_file.jobs:
        for path in job.inputs:
            if path in names:
                continue
            problem = check_input(path, examined)
            if problem is not None:
                raise InputError(_input_message(path, problem, _where(job)))
            names.add(path)
    # A path without a separator (a non-empty one) is its own normal form: on a large link
    # of archive members, nearly every path (~0.4 ms for 900 of them).
    names.update([os.path.normpath(p) for p in names if "/" in p])
    return names


def _input_message(path: str, problem: str, where: str) -> str:
    if problem == "not found":
        return f"input not found: {path} ({where})"
    return f"input {path} {problem} ({where})"


def _check_outputs(job_file: JobFile, input_names: set[str], outputs: _Outputs) -> None:
    input_ids: set[tuple[int, int]] | None = None  # computed only if some output exists
    commands = _Commands(job_file.common_args)
    for job in job_file.jobs:
        for path in job.outputs:
            if path in input_names or ("/" in path and os.path.normpath(path) in input_names):
                raise InputError(f"output {path} is also an input ({_where(job)}): "
                                 "refusing to overwrite it")  # fmt: skip
            head, sep, name = path.rpartition("/")  # os.path.split, minus its cost per job
            directory = head or sep
            real = outputs.real_dir(directory)
            if not name:
                raise InputError(f"output {path} names a directory ({_where(job)})")
            slot = (real, name)
            other = outputs.owner.get(slot)
            if other is not None:
                whose = "twice by this job" if other == job.index else f"also by job {other}"
                raise InputError(f"output {path} is named {whose} ({_where(job)})")
            outputs.owner[slot] = job.index
            for root in outputs.protected:
                if real == root or real.startswith(root + os.sep):
                    raise InputError(f"output {path} is inside the cache's own files {root} "
                                     f"({_where(job)})")  # fmt: skip
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # the usual case: a fresh name; its directory is checked below
            except OSError as e:
                raise InputError(f"output {path} cannot be examined: {e.strerror} "
                                 f"({_where(job)})") from None  # fmt: skip
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"output {path} is {kind(st.st_mode)}, not a regular file "
                                 f"({_where(job)})")  # fmt: skip
            if input_ids is None:
                input_ids = _identities(input_names)
            if (st.st_dev, st.st_ino) in input_ids:
                raise InputError(f"output {path} is also an input, by another name "
                                 f"({_where(job)}): refusing to overwrite it")  # fmt: skip
        _check_writes(job, commands)
    for directory in sorted(outputs.real_dirs):
        shown = directory or "."
        if not os.path.isdir(shown):
            raise InputError(f"output directory does not exist: {shown}")
        if not os.access(shown, os.W_OK | os.X_OK):
            raise InputError(f"cannot write to output directory: {shown}")


class _Commands:
    """The jobs' command lines (``common.args + args``), the part they share read once per
    link (cached_dist/jobfile/writes.py): what each writes, in the driver mode its program
    runs in."""

    def __init__(self, common: tuple[str, ...]) -> None:
        self.common = common
        self.program = common[0] if common else ""
        self.mode = driver_mode(self.program, common[1:])
        # A clang (or gcc) without an output option names the object itself.
        self.driver = (program_mode(self.program) is not None
                       or "clang" in os.path.basename(self.program))  # fmt: skip
        self.shared = read(common[1:], self.mode) if self.mode in MODES else None
        shared = self.shared
        # The common part names no file and leaves no option waiting for its value.
        self.quiet = (shared is not None and shared.clean and not shared.objects
                      and not shared.files and shared.refused is None
                      and self.mode != "cl")  # fmt: skip

    def plain(self, job: Job) -> bool:
        """Whether the job writes only its declared object, seen without a scan: after a
        quiet common part, its own arguments are files, ``-fthinlto-index=SHARD`` and
        ``-o OUTPUT`` (LLD's ``MODULE -fthinlto-index=SHARD -o OUTPUT``, or a design
        template's): ~1 us a job, where a scan takes ~10 us."""
        if not self.quiet:
            return False
        args, outputs = job.args, job.outputs
        named, k, end = False, 0, len(args)
        while k < end:
            arg = args[k]
            if arg == "-o":
                if k + 1 == end or args[k + 1] not in outputs:
                    return False
                named, k = True, k + 2
                continue
            if arg[:1] in ("", "-", "@") and not arg.startswith("-fthinlto-index="):
                return False
            k += 1
        return named

    def writes(self, job: Job) -> tuple[str, Found]:
        """The job's driver mode and what its command writes (nothing is read in a mode
        not in MODES: the caller refuses it)."""
        shared = self.shared
        if shared is None or not shared.clean or not self.common or any(
                a.startswith("--driver-mode=") for a in job.args):  # fmt: skip
            command = [*self.common, *job.args]
            program = command[0] if command else ""
            mode = driver_mode(program, command[1:])
            return mode, read(command[1:], mode) if mode in MODES else Found()
        return self.mode, shared.then(read(job.args, self.mode))


def _check_writes(job: Job, commands: _Commands) -> None:
    """Every file a job's command names for clang to write, its object (in each spelling
    clang reads: ``-o F``, ``-oF``, ``--output=F``, ``--output F``, clang-cl's ``/FoF``...)
    or another (``-MJ F``...), must be one of the job's outputs; a directory or prefix for
    files clang names itself (``-dumpdir``), and arguments read from elsewhere (``@FILE``),
    are refused. A clang without an output option names the object itself (``-c a.o``
    overwrites a.o). Files clang names after the object or the module (``-ftime-trace``,
    ``-save-temps``) are a user's debugging request: let through, never cached (docs/keys.md).
    """
    if commands.plain(job):
        return
    mode, found = commands.writes(job)
    if mode not in MODES:
        raise InputError(f"the command runs clang in --driver-mode={mode}, whose options "
                         f"the job file checks do not read ({_where(job)})")  # fmt: skip
    if found.refused is not None:
        shown, why = found.refused
        raise InputError(f"the command has {shown}, {why} ({_where(job)})")
    if not found.objects and commands.driver:
        raise InputError(f"the command has no {'/Fo' if mode == 'cl' else '-o'}: the compiler "
                         f"would name the object itself, perhaps after an input "
                         f"({_where(job)})")  # fmt: skip
    declared: set[str] | None = None
    for shown, path in (*found.objects, *found.files):
        if path in job.outputs:
            continue
        if declared is None:
            declared = {os.path.normpath(o) for o in job.outputs}
        if not path or os.path.normpath(path) not in declared:
            named = shown if shown.endswith(path) else f"{shown} ({path})"
            raise InputError(f"the command writes {named}, which is not one of the job's "
                             f"outputs ({_where(job)})")  # fmt: skip


def _identities(paths: set[str]) -> set[tuple[int, int]]:
    ids = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        ids.add((st.st_dev, st.st_ino))
    return ids
