"""Up-front checks of a job file against the file system, so errors name the real culprit."""

import os

from ..errors import InputError
from . import JobFile
from .members import named_member


def check_inputs(job_file: JobFile) -> None:
    """Every input must exist before anything runs: a compiler error about it would be obscure."""
    for path in job_file.common_inputs:
        if not os.path.exists(path) and named_member(path) is None:
            raise InputError(f"input not found: {path} (common.inputs)")
    seen: set[str] = set()
    for job in job_file.jobs:
        for path in job.inputs:
            if path in seen:
                continue
            if not os.path.exists(path) and named_member(path) is None:
                raise InputError(f"input not found: {path} (job {job.index}, {job.primary_output})")
            seen.add(path)


def check_output_dirs(job_file: JobFile) -> None:
    """Outputs go next to each other; one unwritable directory would fail every job in it."""
    dirs = {os.path.dirname(out) or "." for job in job_file.jobs for out in job.outputs}
    for d in sorted(dirs):
        if not os.path.isdir(d):
            raise InputError(f"output directory does not exist: {d}")
        if not os.access(d, os.W_OK | os.X_OK):
            raise InputError(f"cannot write to output directory: {d}")
