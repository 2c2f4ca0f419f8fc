"""usage: cached-dist verify [--cache-dir DIR]

Re-hashes every stored blob, drops corrupt ones and the entries that refer to them, repairs
damage to the cache's own files (a directory where a file belongs, a database that is not
one), and reports what it found. Exits 1 when it found damage, 4 when it could not check
everything."""

from . import check, human_size, open_store, options_for


def main(args: list[str]) -> int:
    options, log = options_for(args)
    store = open_store(options, log, repair=True)
    report = store.verify()
    store.close()
    print(
        f"checked {report.blobs_checked} blobs ({human_size(report.bytes_checked)}) and "
        f"{report.entries_checked} entries: {report.blobs_corrupt} corrupt blobs removed, "
        f"{report.entries_dropped} entries dropped, {report.repaired} damaged paths repaired"
    )
    check(store, "verify")
    return 1 if report.damaged else 0
