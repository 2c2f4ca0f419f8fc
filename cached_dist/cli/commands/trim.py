"""usage: cached-dist trim [--max-size SIZE] [--cache-dir DIR]

Evicts least recently used entries until the cache holds at most SIZE (default: the
configured limit)."""

from . import human_size, open_store, options_for


def main(args: list[str]) -> int:
    options, log = options_for(args)
    store = open_store(options, log)
    freed = store.trim(options.max_size)
    size = store.stats()["size"]
    store.close()
    log.info(f"freed {human_size(freed)}; {human_size(size)} left in {options.cache_dir}")
    return 0
