"""Up-front checks of a job file against the file system, before anything on disk is touched.

A job file written by hand or by a buggy wrapper can name an input as an output (the link
would delete the user's file before compiling), two jobs with one output (one object
silently overwrites the other), a FIFO or a device as an input (reading it never ends), or an
output that is a directory. Each is refused here with one line naming the job and the path,
using ``os.stat`` only: nothing is opened, created or removed until every check has passed.

The work is one ``stat`` per distinct input and per output, and a set of output names; the
per-directory lookups are memoized, so a 100,000-job file is checked in well under a second.
"""

import os
import stat

from ..errors import InputError
from . import Job, JobFile

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
    common_dash_o = "-o" in job_file.common_args  # the design schema's template may end so
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
        _check_dash_o(job, job_file.command(job) if common_dash_o else job.args,
                      job_file.common_args)  # fmt: skip
    for directory in sorted(outputs.real_dirs):
        shown = directory or "."
        if not os.path.isdir(shown):
            raise InputError(f"output directory does not exist: {shown}")
        if not os.access(shown, os.W_OK | os.X_OK):
            raise InputError(f"cannot write to output directory: {shown}")


def _check_dash_o(job: Job, args: "tuple[str, ...] | list[str]", common: tuple[str, ...]) -> None:
    """A compile must say where its object goes, and there only: clang without ``-o`` names
    the object after its input (``-c a.o`` overwrites a.o), and a ``-o FILE`` that is not
    one of the job's outputs writes a file the job file does not declare. (Other tools,
    such as a design-schema template's, may name their output with flags of their own.)"""
    if "-o" not in args and "-o" not in common:
        if common and "clang" in os.path.basename(common[0]):
            raise InputError("the command has no -o: the compiler would name the object "
                             f"itself, perhaps after an input ({_where(job)})")  # fmt: skip
        return
    for k, arg in enumerate(args[:-1]):
        if arg == "-o":
            target = args[k + 1]
            if target not in job.outputs and os.path.normpath(target) not in {
                os.path.normpath(o) for o in job.outputs
            }:
                raise InputError(f"the command writes -o {target}, which is not one of the "
                                 f"job's outputs ({_where(job)})")  # fmt: skip


def _identities(paths: set[str]) -> set[tuple[int, int]]:
    ids = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        ids.add((st.st_dev, st.st_ino))
    return ids
