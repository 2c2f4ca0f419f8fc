"""Commands, one module each: stats, clear, trim, verify (the cache) and flags (link flags)."""

import os
from collections.abc import Sequence
from importlib import import_module
from typing import TYPE_CHECKING

from ...errors import UsageError
from ...log import Log
from ...options import Options, resolve

if TYPE_CHECKING:
    from store import Store


#: The command this process runs (run_command), named in the errors of its options.
running = ""


def options_for(args: Sequence[str]) -> tuple[Options, Log]:
    """The same options (and environment, config file) as a link; no job file, no inner."""
    if "--" in args:
        raise UsageError(f"{running or 'commands'}: takes no inner distributor")
    options = resolve(list(args), [], os.environ, running)
    return options, Log(quiet=options.quiet, verbose=options.verbose)


def open_store(options: Options, log: Log) -> "Store":
    from store import Store

    if not os.path.isdir(options.cache_dir):
        raise UsageError(f"no cache at {options.cache_dir}")
    return Store(
        options.cache_dir, max_size=options.max_size, group_shared=options.group_shared,
        warn=log.warn,
    )  # fmt: skip


def run_command(name: str, args: Sequence[str]) -> int:
    global running
    running = name
    if name != "serve":
        from ..pipe import die_on_closed_pipe

        die_on_closed_pipe()
    module = import_module(f".{name}", __name__)
    if "-h" in args or "--help" in args:
        print(module.__doc__)
        return 0
    status: int = module.main(list(args))
    return status


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
