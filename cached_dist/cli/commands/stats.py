"""usage: cached-dist stats [--json | --format text|json|prometheus] [--zero] [--cache-dir DIR]

Shows the cache's statistics, shared by every process that uses the directory: hits, misses,
hit rate, entries, size and limit, evictions, corruptions, the compile time of hits (the
sum of each hit's recorded compile time: on N cores a link saves about 1/N of it in wall
time), the wall time the hits replaced (each stored result records the share of its link's
wall time it accounted for; results stored before cached-dist recorded it count nothing) and
the compiled modules whose bitcode names their source file by absolute path (checkouts at
other paths do not share those: see `cached-dist flags --launcher`).

``--format prometheus`` prints them in Prometheus's text exposition format (for
node_exporter's textfile collector); ``--zero`` sets every counter back to 0 (not what the
cache holds now: entries, size) and prints nothing unless a format is asked for too, which
then shows the counts from before."""

import json
from collections.abc import Mapping

from . import CacheFailure, check, human_size, open_store, options_for

# Counters cached-dist keeps in the store beside the store's own (see link.cached.run_cached).
EXTRA = ("shards_decoded", "shards_memoized", "shards_not_canonical", "jobs_not_cacheable",
         "hits_verified", "modules_absolute_source",
         "hit_mismatches", "hits_unverifiable", "wall_saved_us",
         # the remote tier (link.tiers): hits counts both tiers, remote_hits the remote's share
         "remote_hits", "remote_misses", "remote_errors", "remote_corrupt", "remote_wrong_key",
         "remote_uploads", "remote_bytes_downloaded", "remote_bytes_uploaded",
         "remote_round_trips", "remote_memo_hits", "remote_memo_uploads",
         "remote_rejected",
         # REAPI (link.tiers.REAPI_COUNTERS, runners.reapi.COUNTERS): the REAPI tier's share
         # of the remote counters, and what the REAPI executor ran
         "reapi_hits", "reapi_misses", "reapi_uploads", "reapi_bytes_downloaded",
         "reapi_bytes_uploaded", "reapi_wrong_key", "reapi_corrupt", "reapi_executed",
         "reapi_exec_cached", "reapi_exec_failed", "reapi_exec_bytes_uploaded")  # fmt: skip
#: The figures that are a state, not a count since the counters were zeroed.
GAUGES = ("entries", "size", "max_size", "hit_rate", "compression_ratio")
FORMATS = ("text", "json", "prometheus")


def _command_args(args: list[str]) -> tuple[str, bool, bool, list[str]]:
    """(format, --zero, a format asked for, the rest: cached-dist options)."""
    from ...errors import UsageError

    fmt, zero, asked, rest = "text", False, False, []
    words = iter(args)
    for word in words:
        if word == "--json":
            fmt, asked = "json", True
        elif word == "--zero":
            zero = True
        elif word == "--format" or word.startswith("--format="):
            value = word.partition("=")[2] if "=" in word else next(words, "")
            if value not in FORMATS:
                raise UsageError(f"stats: --format takes {', '.join(FORMATS)}, not {value!r}")
            fmt, asked = value, True
        else:
            rest.append(word)
    return fmt, zero, asked, rest


def main(args: list[str]) -> int:
    fmt, zero, asked, rest = _command_args(args)
    options, log = options_for(rest)
    store = open_store(options, log)
    stats = dict(store.stats())
    zeroed = store.zero_stats() if zero else False
    store.close()
    check(store, "show the statistics of")
    if zero:
        if not zeroed:
            raise CacheFailure(f"could not zero the statistics of the cache at {store.root}")
        if not asked:
            print(f"statistics zeroed in {options.cache_dir}")
            return 0
    for name in EXTRA:
        stats.setdefault(name, 0)
    lookups = stats["hits"] + stats["misses"]
    stats["hit_rate"] = stats["hits"] / lookups if lookups else 0.0
    stats["wall_saved"] = stats.pop("wall_saved_us") / 1e6
    stats["local_hits"] = stats["hits"] - stats["remote_hits"]
    stats["cache_dir"] = options.cache_dir  # type: ignore[assignment]
    from ...bitcode.native import MISSING_NOTICE, NATIVE

    stats["shard_decoder"] = "native" if NATIVE else "python"  # type: ignore[assignment]
    stored, original = stats.get("bytes_stored", 0), stats.get("bytes_original", 0)
    stats["compression_ratio"] = original / stored if stored else 0.0
    if fmt == "json":
        print(json.dumps(stats, indent=1, sort_keys=True))
        return 0
    if fmt == "prometheus":
        print(prometheus(stats), end="")
        return 0
    rows = [
        ("cache directory", options.cache_dir),
        ("hits", stats["hits"]),
        ("misses", stats["misses"]),
        ("hit rate", f"{100 * stats['hit_rate']:.1f} %"),
        ("  local hits", stats["local_hits"]),
        ("  remote hits", stats["remote_hits"]),
        ("remote misses", stats["remote_misses"]),
        ("remote errors", stats["remote_errors"]),
        ("remote corrupt", stats["remote_corrupt"]),
        ("remote wrong key", stats["remote_wrong_key"]),
        ("remote uploads", stats["remote_uploads"]),
        ("bytes downloaded", human_size(stats["remote_bytes_downloaded"])),
        ("bytes uploaded", human_size(stats["remote_bytes_uploaded"])),
        ("REAPI hits", stats["reapi_hits"]),
        ("REAPI misses", stats["reapi_misses"]),
        ("REAPI uploads", stats["reapi_uploads"]),
        ("REAPI wrong key", stats["reapi_wrong_key"]),
        ("REAPI corrupt", stats["reapi_corrupt"]),
        ("REAPI downloaded", human_size(stats["reapi_bytes_downloaded"])),
        ("REAPI uploaded", human_size(stats["reapi_bytes_uploaded"])),
        ("REAPI executed", stats["reapi_executed"]),
        ("  from its cache", stats["reapi_exec_cached"]),
        ("REAPI exec failed", stats["reapi_exec_failed"]),
        ("REAPI exec uploaded", human_size(stats["reapi_exec_bytes_uploaded"])),
        ("entries", stats["entries"]),
        ("size", f"{human_size(stats['size'])} of {human_size(stats['max_size'])}"),
        ("stores", stats.get("stores", 0)),
        ("evictions", stats.get("evictions", 0)),
        ("corruptions", stats.get("corruptions", 0)),
        ("remote rejected", stats["remote_rejected"]),
        ("bytes stored", human_size(stored)),
        (
            "bytes original",
            f"{human_size(original)} ("
            + (
                f"{stats['compression_ratio']:.2f}x the bytes stored)" if stored else "none stored)"
            ),
        ),
        ("bytes served", human_size(stats.get("bytes_served", 0))),
        ("compile time of hits", f"{stats['time_saved']:.1f} s (sum over jobs, not wall time)"),
        ("wall time replaced", f"{stats['wall_saved']:.1f} s (by hits, where recorded)"),
        ("shards decoded", stats["shards_decoded"]),
        ("shards memoized", stats["shards_memoized"]),
        ("shards not canonical", stats["shards_not_canonical"]),
        ("jobs not cacheable", stats["jobs_not_cacheable"]),
        ("hits verified", stats["hits_verified"]),
        ("hit mismatches", stats["hit_mismatches"]),
        ("absolute sources", _absolute_sources(stats["modules_absolute_source"])),
        ("shard decoder", "native (C extension)" if NATIVE else f"pure Python: {MISSING_NOTICE}"),
    ]
    for name, value in rows:
        print(f"{name:<20} {value}")
    return 0


def prometheus(stats: Mapping[str, object]) -> str:
    """The numeric figures in Prometheus's text exposition format (version 0.0.4): counters as
    ``cached_dist_NAME_total``, states as gauges, seconds named so, the cache directory and the
    shard decoder as labels; one HELP and TYPE line each."""
    label = 'cache_dir="' + _escape(str(stats["cache_dir"])) + '"'
    out = [
        "# HELP cached_dist_info the cache and how it decodes shards",
        "# TYPE cached_dist_info gauge",
        f'cached_dist_info{{{label},shard_decoder="{stats["shard_decoder"]}"}} 1',
    ]
    for key in sorted(stats):
        value = stats[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        gauge = key in GAUGES
        name = "cached_dist_" + key + ("_seconds" if key in ("time_saved", "wall_saved") else "")
        name += "" if gauge else "_total"
        kind = "gauge" if gauge else "counter"
        out += [f"# HELP {name} cached-dist stats: {key.replace('_', ' ')}",
                f"# TYPE {name} {kind}", f"{name}{{{label}}} {value!r}"]  # fmt: skip
    return "\n".join(out) + "\n"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _absolute_sources(count: float) -> str:
    """Compiled modules named by absolute source path, and what to do about them."""
    if not count:
        return "0"
    from ...link.checkouts import REMEDY

    return (f"{count:.0f} compiled modules named their source by absolute path: checkouts "
            f"at other paths will not share them; {REMEDY}")  # fmt: skip
