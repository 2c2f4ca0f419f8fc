"""``python -m cached_dist``."""

import sys

from .cli import main

sys.exit(main())
