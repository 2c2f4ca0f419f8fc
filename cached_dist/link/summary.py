"""The one line a link prints at the end, and the counts behind it."""


class Summary:
    __slots__ = ("compiled", "fallback", "hits", "jobs")

    def __init__(self, jobs: int, hits: int = 0, compiled: int = 0, fallback: int = 0) -> None:
        self.jobs = jobs
        self.hits = hits
        self.compiled = compiled  # including those compiled locally after the runner failed
        self.fallback = fallback

    def line(self, elapsed: float) -> str:
        return (
            f"{self.jobs} jobs: {self.hits} hits, {self.compiled - self.fallback} compiled, "
            f"{self.fallback} fallback, {elapsed:.2f} s"
        )
