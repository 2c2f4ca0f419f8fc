"""--stats-log: one JSON line per link appended to a file (ccache's stats_log).

For a dashboard, and for a user who wants to see that every link of a build came through
cached-dist (a build tool that drops the distributor flag for some links, as libtool does
for shared libraries, shows up as a link missing from the log). Written by hand with
``_json``'s string encoder: the ``json`` package costs a full hit ~10 ms to import.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..jobfile import JobFile
    from ..log import Log
    from ..options import Options
    from .summary import Summary


def record(
    options: Options, job_file: JobFile, summary: Summary, elapsed: float
) -> dict[str, object]:
    """What the line says of one link."""
    runner = "inner" if options.inner else "dask" if options.dask_scheduler else "local"
    remote = summary.remote
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cwd": os.getcwd(),
        "output": job_file.linker_output,
        "jobs": summary.jobs,
        "hits": summary.hits,
        "local_hits": summary.hits - summary.remote_hits,
        "remote_hits": summary.remote_hits,
        "waited": summary.waited,
        "compiled": summary.compiled - summary.fallback,
        "runner": "disabled" if options.disable else runner,
        "compiled_remotely": summary.compiled_remotely,
        "fallback": summary.fallback,
        "verified": summary.verified,
        "mismatches": summary.mismatches,
        "bytes_served": summary.bytes_served,
        "remote_tier_hits": summary.remote_tier_hits,
        "remote_misses": remote.get("remote_misses", 0),
        "remote_errors": remote.get("remote_errors", 0),
        "remote_rejected": remote.get("remote_rejected", 0),
        "bytes_downloaded": remote.get("remote_bytes_downloaded", 0),
        "bytes_uploaded": remote.get("remote_bytes_uploaded", 0),
        "seconds": round(elapsed, 4),
    }


def line(fields: dict[str, object]) -> str:
    """One JSON object on one line (values: str, int, float or a list of ints)."""
    from _json import encode_basestring_ascii as quote

    parts = []
    for name, value in fields.items():
        if isinstance(value, str):
            text = quote(value)
        elif isinstance(value, list):
            text = "[" + ",".join(str(int(v)) for v in value) + "]"
        else:
            text = repr(value)
        parts.append(f"{quote(name)}:{text}")
    return "{" + ",".join(parts) + "}\n"


def append(options: Options, job_file: JobFile, summary: Summary, elapsed: float, log: Log) -> None:
    """Appends the link's line in one write (O_APPEND: lines of concurrent links do not
    mix); a file that cannot be written is a warning, never a failed link."""
    data = line(record(options, job_file, summary, elapsed)).encode()
    try:
        fd = os.open(options.stats_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                     0o666)  # fmt: skip
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as e:
        log.warn(f"cannot write the stats log {options.stats_log}: {e.strerror}")
