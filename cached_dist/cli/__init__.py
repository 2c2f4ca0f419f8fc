"""Entry point: ``cached-dist [OPTIONS] [-- INNER...] JOBFILE`` or ``cached-dist COMMAND``."""

from __future__ import annotations

import os
import sys

from .. import __version__
from ..errors import CachedDistError, UsageError
from ..log import Log
from ..options import SUBCOMMANDS, help_text, parse_bool

TYPE_CHECKING = False  # collections.abc imports collections: ~1.5 ms of a full hit
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..serve.handoff import Handoff

INTERNAL_ERROR = 3


def split_invocation(args: Sequence[str]) -> tuple[list[str], list[str], str]:
    """(option words, inner distributor command, job file): LLD always passes the job file last."""
    if not args:
        raise UsageError("missing JOBFILE (see cached-dist --help)")
    *head, job_file = args
    if job_file == "--" or (job_file.startswith("-") and job_file in _flag_words()):
        raise UsageError("missing JOBFILE: it must be the last argument")
    if "--" in head:
        cut = head.index("--")
        flags, inner = head[:cut], head[cut + 1 :]
        if not inner:
            raise UsageError("'--' must be followed by the inner distributor's command")
    else:
        flags, inner = head, []
    return flags, inner, job_file


def _flag_words() -> set[str]:
    from ..options import BY_FLAG

    return set(BY_FLAG) | {"-h", "--help", "--version"}


def _debug_requested(args: Sequence[str]) -> bool:
    if "--debug" in args:
        return True
    try:
        return parse_bool(os.environ.get("CACHED_DIST_DEBUG", ""))
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None, handoff: Handoff | None = None) -> int:
    """The whole program; ``handoff``: run by a warm server's child (cached_dist/serve)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = _debug_requested(args)
    try:
        return _main(args, handoff)
    except CachedDistError as e:
        Log().error(str(e))
        if debug:
            import traceback

            traceback.print_exc()
        return e.exit_status
    except KeyboardInterrupt:
        Log().error("interrupted")
        return 130
    except Exception as e:
        if debug:
            raise
        Log().error(f"internal error: {type(e).__name__}: {e} (run with --debug for a traceback)")
        return INTERNAL_ERROR


def _main(args: list[str], handoff: Handoff | None = None) -> int:
    if args and args[0] in SUBCOMMANDS:
        from .commands import run_command

        return run_command(args[0], args[1:])
    before_inner = args[: args.index("--")] if "--" in args else args
    if "-h" in before_inner or "--help" in before_inner:
        print(help_text())
        return 0
    if "--version" in before_inner:
        print(f"cached-dist {__version__}")
        return 0
    flags, inner, job_file_path = split_invocation(args)
    from ..options import resolve

    options = resolve(flags, inner, os.environ)
    log = Log(quiet=options.quiet, verbose=options.verbose)
    from .. import jobfile
    from ..link import flow

    job_file = jobfile.load(job_file_path, flow.early_reader(options, handoff, job_file_path))
    return flow.run(job_file, options, log, handoff)


def run() -> None:
    """The console script: ``main``, then an immediate exit.

    Everything that matters is on disk by then (outputs renamed into place, sqlite commits
    durable), so the interpreter's teardown, closing each database with a checkpoint, would
    only add milliseconds to every link.
    """
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
