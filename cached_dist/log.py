"""Messages on stderr, every one prefixed ``cached-dist:`` so a link log shows who spoke."""

import sys

PREFIX = "cached-dist"
_CLEAR = "\r\x1b[K"  # carriage return, erase to the end of the line


class Log:
    """Writes errors, warnings and progress to stderr according to --quiet/--verbose."""

    def __init__(self, *, quiet: bool = False, verbose: bool = False) -> None:
        self.quiet = quiet
        self.verbose = verbose and not quiet

    def error(self, message: str) -> None:
        _write(f"{PREFIX}: error: {message}")

    def warn(self, message: str) -> None:
        _write(f"{PREFIX}: warning: {message}")

    def info(self, message: str) -> None:
        """Progress and the per-link summary: silenced by --quiet."""
        if not self.quiet:
            _write(f"{PREFIX}: {message}")

    def detail(self, message: str) -> None:
        """Per-job detail: only with --verbose."""
        if self.verbose:
            _write(f"{PREFIX}: {message}")

    def passthrough(self, label: str, text: str) -> None:
        """Relays what a job printed, each line tagged with the job it came from."""
        lines = text.splitlines()
        if lines:
            _write("\n".join(f"{PREFIX}: [{label}] {line}" for line in lines))

    def status(self, message: str) -> None:
        """One line that rewrites itself on a terminal; the next message replaces it."""
        global _status_shown
        try:
            sys.stderr.write(f"{_CLEAR}{PREFIX}: {message}")
            sys.stderr.flush()
            _status_shown = True
        except (OSError, ValueError):
            pass

    def end_status(self) -> None:
        global _status_shown
        if _status_shown:
            _status_shown = False
            try:
                sys.stderr.write(_CLEAR)
                sys.stderr.flush()
            except (OSError, ValueError):
                pass


_status_shown = False


def _write(text: str) -> None:
    global _status_shown
    try:
        if _status_shown:
            text = _CLEAR + text
            _status_shown = False
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr closed: nothing sensible left to do
