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
        from ..options import BY_FLAG

        spec = BY_FLAG.get(job_file)
        if spec is not None and spec.convert is not None:  # `cached-dist --cache-dir`
            raise UsageError(f"option {job_file} needs a value ({spec.metavar})")
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


def _print_and_finish(text: str) -> int:
    """``--help``, ``--version``: quiet on a closed pipe, one error line on a full disk."""
    from .pipe import die_on_closed_pipe, finish_output

    die_on_closed_pipe()
    print(text)
    finish_output()
    return 0


def _first_word(args: Sequence[str]) -> int | None:
    """Where the first word is that is neither an option nor an option's value (``stats`` in
    ``cached-dist -v --cache-dir X stats``), before any ``--``: the command's place, if it
    names one. Global options may come before a command, as with git or ccache."""
    from ..options import BY_FLAG

    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return None
        if not word.startswith("-") or word == "-":
            return i
        spec = BY_FLAG.get(word)
        if spec is not None and spec.convert is not None:
            i += 1  # its value: `--cache-dir stats` names a directory called stats
        i += 1
    return None


def _not_a_job_file(word: str) -> None:
    """Raises a usage error when the job-file position holds what is plainly not one: an
    unknown option, or a mistyped command (no such file, close to a command's name)."""
    if os.path.lexists(word):
        return
    if word.startswith("-"):
        raise UsageError(f"unknown option {word!r} (see cached-dist --help)")
    if word == "help":  # as `git help`
        raise UsageError("unknown command 'help' (did you mean '--help'?)")
    _not_a_command(word)


def _not_a_command(word: str) -> None:
    """Raises a usage error for a word close to a command's name that names no file."""
    if os.sep in word or "." in word or os.path.lexists(word):
        return
    import difflib

    close = difflib.get_close_matches(word, SUBCOMMANDS, n=1, cutoff=0.6)
    if close:
        raise UsageError(f"unknown command {word!r} (did you mean {close[0]!r}?)")


def _main(args: list[str], handoff: Handoff | None = None) -> int:
    at = _first_word(args)
    if at is not None and args[at] in SUBCOMMANDS:
        from .commands import run_command

        return run_command(args[at], [*args[:at], *args[at + 1 :]])
    before_inner = args[: args.index("--")] if "--" in args else args
    if "-h" in before_inner or "--help" in before_inner:
        return _print_and_finish(help_text())
    if "--version" in before_inner:
        return _print_and_finish(f"cached-dist {__version__}")
    if at is not None and at < len(before_inner) - 1:
        # A word before the job file's place: a mistyped command (`stat --cache-dir=X`)
        # is told as one, not as the option after it.
        _not_a_command(args[at])
    flags, inner, job_file_path = split_invocation(args)
    _not_a_job_file(job_file_path)
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
