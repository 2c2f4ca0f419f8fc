"""``python -m cached_dist``."""

from .cli import run

run()
