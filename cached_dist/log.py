"""Messages on stderr, every one prefixed ``cached-dist:`` so a link log shows who spoke."""

import sys

PREFIX = "cached-dist"


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


def _write(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr closed: nothing sensible left to do
