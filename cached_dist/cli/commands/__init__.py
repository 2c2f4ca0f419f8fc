"""Commands, one module each: stats, clear, trim, verify (the cache) and flags (link flags)."""

import os
from collections.abc import Sequence
from importlib import import_module
from typing import TYPE_CHECKING

from ...errors import CachedDistError, UsageError
from ...log import Log
from ...options import Options, resolve

if TYPE_CHECKING:
    from store import Store


#: The command this process runs (run_command), named in the errors of its options.
running = ""


class CacheFailure(CachedDistError):
    """A command that could not do its work on the cache (unusable, an error part-way)."""

    exit_status = 4


def options_for(args: Sequence[str]) -> tuple[Options, Log]:
    """The same options (and environment, config file) as a link; no job file, no inner."""
    if "--" in args:
        raise UsageError(f"{running or 'commands'}: takes no inner distributor")
    options = resolve(list(args), [], os.environ, running)
    return options, Log(quiet=options.quiet, verbose=options.verbose)


def open_store(options: Options, log: Log, repair: bool = False) -> "Store":
    """The cache at --cache-dir, for a command. A directory that holds none is refused, with
    nothing created in it: caches are made by links (store.layout says what marks one).
    ``repair`` (clear, trim, verify): a cache links refuse (one of its directories a link or a
    file) is given to the command, which removes that first."""
    from store import Store
    from store.layout import is_store

    path = options.cache_dir
    if not os.path.lexists(path):
        raise UsageError(f"no cache at {path}")
    if not os.path.isdir(path):
        raise UsageError(f"no cache at {path}: not a directory")
    if not is_store(path):
        raise UsageError(
            f"no cache at {path}: the directory holds none (no CACHEDIR.TAG of cached-dist, "
            "no index); left untouched"
        )
    warnings = _Held(log)
    store = Store(
        path, max_size=options.max_size, group_shared=options.group_shared, warn=warnings,
    )  # fmt: skip
    if not store.usable and not (repair and store.repairable):  # the error says it all
        raise CacheFailure(f"cannot use the cache at {path}: {store.failure}")
    warnings.release()
    return store


class _Held:
    """A warn hook that holds the store's warnings until released, then prints them."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.held: list[str] | None = []

    def __call__(self, message: str) -> None:
        if self.held is None:
            self.log.warn(message)
        else:
            self.held.append(message)

    def release(self) -> None:
        held, self.held = self.held or [], None
        for message in held:
            self.log.warn(message)


def check(store: "Store", what: str) -> None:
    """Raises CacheFailure if the store's last operation could not do its work."""
    if store.failure is not None:
        raise CacheFailure(f"could not {what} the cache at {store.root}: {store.failure}")


def run_command(name: str, args: Sequence[str]) -> int:
    global running
    running = name
    from ..pipe import die_on_closed_pipe, finish_output

    if name != "serve" or _SERVE_PRINTS & set(args):
        die_on_closed_pipe()
    module = import_module(f".{name}", __name__)
    if "-h" in args or "--help" in args:
        print(module.__doc__)
        finish_output()
        return 0
    status: int = module.main(list(args))
    finish_output()
    return status


#: What `serve` prints and ends (the server itself writes to links' pipes: not these rules).
_SERVE_PRINTS = {"-h", "--help", "--status", "--stop"}


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
