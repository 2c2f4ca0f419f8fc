"""Output to a pipe whose reader may go away."""


def die_on_closed_pipe() -> None:
    """What prints for a reader that may stop early (``cached-dist stats | head -1``) ends as
    ``ls`` does then: quietly, killed by SIGPIPE. Python ignores SIGPIPE and would raise
    BrokenPipeError instead. Not for the server or a link, which write to pipes of others."""
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
