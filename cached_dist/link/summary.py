"""The one line a link prints at the end, and the counts behind it."""


class Summary:
    __slots__ = ("compiled", "fallback", "hits", "jobs", "remote")

    def __init__(self, jobs: int, hits: int = 0, compiled: int = 0, fallback: int = 0) -> None:
        self.jobs = jobs
        self.hits = hits  # from any tier
        self.remote = 0  # of those, served by a remote tier (--remote-storage)
        self.compiled = compiled  # including those compiled locally after the runner failed
        self.fallback = fallback

    def line(self, elapsed: float) -> str:
        return (
            f"{self.jobs} jobs: {self.hits} hits{self._remote()}, "
            f"{self.compiled - self.fallback} compiled, "
            f"{self.fallback} fallback, {elapsed:.2f} s"
        )

    def _remote(self) -> str:
        return f" ({self.remote} from the remote)" if self.remote else ""
