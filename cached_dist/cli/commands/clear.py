"""usage: cached-dist clear [--cache-dir DIR]

Removes every entry and blob from the cache (statistics are kept)."""

from . import check, open_store, options_for


def main(args: list[str]) -> int:
    options, log = options_for(args)
    store = open_store(options, log, repair=True)
    store.clear()
    store.close()
    check(store, "clear")
    log.info(f"cleared {options.cache_dir}")
    return 0
