"""usage: cached-dist trim [--max-size SIZE] [--evict-older-than AGE] [--cache-dir DIR]

Evicts least recently used entries until the cache holds at most SIZE (default: the
configured limit); with --evict-older-than AGE (7d, 12h, 30m, 90s, 2w), first every entry
not used for that long (ccache's --evict-older-than). Also removes what no entry uses and
what killed writers left, and gives the databases' logs back to the file system."""

from . import check, human_size, open_store, options_for


def _age(args: list[str]) -> tuple[float | None, list[str]]:
    """(--evict-older-than's seconds or None, the other words)."""
    from ...errors import UsageError
    from ...options import parse_age

    age, rest = None, []
    words = iter(args)
    for word in words:
        if word == "--evict-older-than" or word.startswith("--evict-older-than="):
            text = word.partition("=")[2] if "=" in word else next(words, "")
            try:
                age = parse_age(text)
            except ValueError as e:
                raise UsageError(f"trim: option --evict-older-than: {e}") from None
        else:
            rest.append(word)
    return age, rest


def main(args: list[str]) -> int:
    age, rest = _age(args)
    options, log = options_for(rest)
    store = open_store(options, log, repair=True)
    freed = store.evict_older_than(age) if age is not None else 0
    check(store, "trim")
    freed += store.trim(options.max_size)
    check(store, "trim")
    size = store.stats()["size"]
    store.close()
    log.info(f"freed {human_size(freed)}; {human_size(size)} left in {options.cache_dir}")
    return 0
