"""Output of commands to a pipe whose reader may go away, or to a file that cannot take it."""

import sys
from typing import Any

from ..errors import CachedDistError


class OutputError(CachedDistError):
    """Standard output cannot be written (``cached-dist stats > /dev/full``): one error line
    and exit status 2, as ``ls`` then, not an internal error."""


def die_on_closed_pipe() -> None:
    """What prints for a reader that may stop early (``cached-dist stats | head -1``) ends as
    ``ls`` does then: quietly, killed by SIGPIPE. Python ignores SIGPIPE and would raise
    BrokenPipeError instead. Other write errors become an OutputError. Not for the server or
    a link, which write to pipes of others."""
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if not isinstance(sys.stdout, _Checked):
        sys.stdout = _Checked(sys.stdout)


def finish_output() -> None:
    """Writes out what is buffered, so that a write error is told while it can still be."""
    sys.stdout.flush()


class _Checked:
    """Standard output whose write errors are an OutputError."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except OSError as e:
            raise OutputError(f"cannot write the output: {e.strerror or e}") from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise OutputError(f"cannot write the output: {e.strerror or e}") from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
