"""A whole link: check the job file, then serve it through the cache or without it."""

from __future__ import annotations

import time

from ..jobfile import members
from ..jobfile.checks import check_inputs, check_output_dirs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..jobfile import JobFile
    from ..log import Log
    from ..options import Options


def run(job_file: JobFile, options: Options, log: Log) -> int:
    """The whole distributor for one link; returns the exit status."""
    started = time.monotonic()
    check_inputs(job_file)
    check_output_dirs(job_file)
    try:
        if options.disable:
            from .dispatch import run_plain

            summary = run_plain(job_file, options, log)
        else:
            from .cached import run_cached

            summary = run_cached(job_file, options, log)
    finally:
        if members.stale_dirs:  # archive members a killed link left behind
            from .extracted import sweep

            sweep()
    log.info(summary.line(time.monotonic() - started))
    return 0
