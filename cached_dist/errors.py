"""Errors that reach the user as one line and an exit status."""


class CachedDistError(Exception):
    """A problem the user must fix; ``exit_status`` is what the process returns."""

    exit_status = 2


class UsageError(CachedDistError):
    """Bad command line, environment variable or config file."""


class JobFileError(CachedDistError):
    """A job file that is missing, unreadable, or not of either schema."""


class InputError(CachedDistError):
    """A job names an input that does not exist or an output it cannot write."""


class JobsFailedError(CachedDistError):
    """Backend jobs failed (or left outputs missing) and nothing could make up for it."""

    exit_status = 1
