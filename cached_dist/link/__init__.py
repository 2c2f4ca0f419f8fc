"""One link through cached-dist: the flow from a job file to every output on disk.

``flow`` checks the job file and picks the path; ``cached`` serves hits and stores what the
runners compile; ``dispatch`` hands jobs to a runner and falls back; ``verify`` recompiles a
sample of hits; ``summary`` is what the user sees at the end.
"""
