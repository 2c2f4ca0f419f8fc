"""What the user sees of a link: the summary line, per-job lines and the progress line."""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..log import Log

_PROGRESS_AFTER = 2.0  # seconds before a link shows progress at all
_TERMINAL_EVERY = 0.1  # at most this often on a terminal
_PLAIN_EVERY = 5.0  # at most this often as plain lines (--progress on a pipe)


def duration(seconds: float) -> str:
    """``1.52 s``, or ``37 ms`` below a second (a full hit's time, which ``0.04 s`` blurs)."""
    return f"{seconds:.2f} s" if seconds >= 1 else f"{1000 * seconds:.0f} ms"


class Summary:
    """Counts by kind of work; ``line`` names only the kinds that happened."""

    __slots__ = ("bytes_served", "compiled", "compiled_remotely", "fallback", "hits", "jobs",
                 "mismatches", "remote", "remote_hits", "remote_tier_hits", "verified",
                 "wait_seconds", "waited")  # fmt: skip

    def __init__(self, jobs: int, hits: int = 0, compiled: int = 0, fallback: int = 0) -> None:
        self.jobs = jobs
        self.hits = hits  # every job served from a cache (any tier), including after waiting
        self.remote_hits = 0  # of those, served by a remote tier (--remote-storage)
        self.waited = 0  # of those, served after waiting for another link's compile
        self.wait_seconds = 0.0
        self.compiled = compiled  # including those compiled locally after the runner failed
        self.fallback = fallback
        self.compiled_remotely = 0  # of those compiled, how many on other machines (Dask workers)
        self.verified = 0  # hits recompiled by --verify-hits
        self.mismatches = 0
        self.bytes_served = 0  # the hits' objects, in bytes
        #: What the remote tiers did (link/tiers.py's counters), and the hits of each tier.
        self.remote: dict[str, int] = {}
        self.remote_tier_hits: list[int] = []

    def line(self, elapsed: float) -> str:
        how = []
        if self.remote_hits:
            how.append(f"{self.remote_hits} from the remote")
        if self.waited:
            how.append(f"{self.waited} after waiting {self.wait_seconds:.1f} s for other links")
        hits = f"{self.hits} hits" + (f" ({', '.join(how)})" if how else "")
        compiled = f"{self.compiled - self.fallback} compiled"
        if self.compiled_remotely:
            compiled += f" ({self.compiled_remotely} remotely)"
        parts = [f"{self.jobs} jobs: {hits}", compiled]
        if self.fallback:
            parts.append(f"{self.fallback} fallback")
        if self.verified:
            parts.append(f"{self.verified} verified ({self.mismatches} mismatches)")
        return ", ".join(parts) + ", " + duration(elapsed)


class Progress:
    """Jobs done out of all, for links that take more than a couple of seconds: one line
    rewriting itself on a terminal, an occasional plain line when asked (``--progress``)
    on anything else, nothing with --quiet."""

    __slots__ = ("enabled", "last", "log", "started", "summary", "terminal")

    def __init__(self, summary: Summary, log: Log, *, terminal: bool, asked: bool) -> None:
        self.summary = summary
        self.log = log
        self.terminal = terminal
        self.enabled = not log.quiet and (terminal or asked)
        self.started = time.monotonic()
        self.last = 0.0  # the first update after _PROGRESS_AFTER always shows

    def update(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        every = _TERMINAL_EVERY if self.terminal else _PLAIN_EVERY
        if now - self.started < _PROGRESS_AFTER or now - self.last < every:
            return
        self.last = now
        s = self.summary
        done = s.hits + s.compiled
        remote = f", {s.compiled_remotely} remotely" if s.compiled_remotely else ""
        text = (f"{done}/{s.jobs} jobs done ({s.hits} hits, {s.compiled} compiled{remote}), "
                f"{now - self.started:.0f} s")  # fmt: skip
        if self.terminal:
            self.log.status(text)
        else:
            self.log.info(text)

    def finish(self) -> None:
        if self.enabled and self.terminal:
            self.log.end_status()
