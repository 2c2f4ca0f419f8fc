"""usage: cached-dist verify [--cache-dir DIR]

Re-hashes every stored blob, drops corrupt ones and the entries that refer to them, and
reports what it found. Exits 1 when it found damage."""

from . import human_size, open_store, options_for


def main(args: list[str]) -> int:
    options, log = options_for(args)
    store = open_store(options, log)
    report = store.verify()
    store.close()
    print(
        f"checked {report.blobs_checked} blobs ({human_size(report.bytes_checked)}) and "
        f"{report.entries_checked} entries: {report.blobs_corrupt} corrupt blobs removed, "
        f"{report.entries_dropped} entries dropped"
    )
    return 1 if report.blobs_corrupt or report.entries_dropped else 0
