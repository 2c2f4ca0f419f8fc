"""cached-dist: a caching distributor for LLVM DTLTO."""

__version__ = "0.1.0"
