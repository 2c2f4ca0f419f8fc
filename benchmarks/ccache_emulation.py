#!/usr/bin/env python3
"""An emulation, written for the history benchmark, of how ccache 4.13 caches ThinLTO
backend compiles: a DTLTO distributor whose key for each job is built from the raw bytes of
its summary index shard, as ccache's is.

    ccache_emulation.py --cache-dir=DIR [--jobs=N] JOBFILE

ccache 4.13 (its PR #1683, "Added support for caching distributed ThinLTO for Clang") treats
``clang -c -fthinlto-index=SHARD MODULE -o OBJ`` as a compile of language ``ir``: no
preprocessing, so the result key is what ccache's preprocessor mode hashes (its direct mode
adds the input's path on top, and only finds results that key already names). This script
hashes, per job, what ccache 4.13's source (src/ccache/ccache.cpp: hash_common_info,
calculate_result_and_manifest_key, hash_profiling_related_data) hashes for such a compile:

- the language, ``ir``;
- the compiler as ``compiler_check = mtime`` (ccache's default) identifies it: its size and
  modification time, and its file name;
- every argument except the input module and ``-o OBJ``; ``-fthinlto-index=SHARD`` is left
  out, as ccache does when configured with ``ignore_options = -fthinlto-index=*``: by
  default ccache hashes that argument as written, and LLD names every shard after its own
  process id, so no job could ever hit across links;
- the environment variables ccache always hashes when set (``COMPILER_PATH``,
  ``GCC_COMPARE_DEBUG``, ``GCC_EXEC_PREFIX``, ``LANG``, ``LC_ALL``, ``LC_CTYPE``,
  ``LC_MESSAGES``); no working directory (ccache hashes it only with ``-g``);
- the index shard's bytes, then the input module's bytes.

The modules a job imports from are not hashed: the shard carries their module hashes. The
key with the shard's path left in (ccache's default options) is computed too, and only
counted: the summary line says how many jobs would have hit with it. Hits are copied out of
``DIR``; misses run ``common.args + job.args`` N at a time and are stored (written aside,
then renamed). One line on stderr per link:
``ccache emulation: 33 jobs: 0 hits (0 with the shard path in the key), 33 compiled``.
Standard library only: LLD starts it like any distributor.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ENVIRONMENT = ("COMPILER_PATH", "GCC_COMPARE_DEBUG", "GCC_EXEC_PREFIX",
               "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES")  # fmt: skip
INDEX = "-fthinlto-index="


def _field(h: hashlib.blake2b, name: str, value: bytes) -> None:
    """A named, length-delimited field, so no two sequences of fields hash alike."""
    h.update(f"{name}:{len(value)}:".encode())
    h.update(value)


def keys(common: list[str], job: dict[str, list[str]]) -> tuple[str, str]:
    """(key without the shard's path, key with it) of one job."""
    h = hashlib.blake2b(digest_size=20)
    _field(h, "emulates", b"ccache 4.13, preprocessor mode, language ir")
    compiler = common[0]
    st = os.stat(compiler)
    _field(h, "compiler", f"{st.st_size} {st.st_mtime_ns}".encode())
    _field(h, "cc_name", os.path.basename(compiler).encode())
    for name in ENVIRONMENT:
        if name in os.environ:
            _field(h, name, os.environ[name].encode())
    module, args = job["inputs"][0], [*common[1:], *job["args"]]
    kept, at = [], 0
    while at < len(args):
        if args[at] == "-o":
            at += 2
            continue
        if args[at] != module:
            kept.append(args[at])
        at += 1
    shard = next(a for a in kept if a.startswith(INDEX))
    shared = h.copy()
    for arg in kept:
        if not arg.startswith(INDEX):
            _field(shared, "arg", arg.encode())
    strict = h.copy()
    for arg in kept:
        _field(strict, "arg", arg.encode())
    for part in (shared, strict):
        _field(part, "thinlto-index", Path(shard[len(INDEX) :]).read_bytes())
        _field(part, "cpp", Path(module).read_bytes())
    return shared.hexdigest(), strict.hexdigest()


def _store(cache: Path, key: str, output: str) -> None:
    final = cache / "objects" / f"{key}.o"
    if final.exists():
        return
    temporary = final.with_name(f".{key}.{os.getpid()}.tmp")
    shutil.copyfile(output, temporary)
    os.replace(temporary, final)


def _compile(command: list[str]) -> tuple[int, str]:
    done = subprocess.run(command, capture_output=True, text=True)
    return done.returncode, done.stderr


def main(argv: list[str]) -> int:
    jobs, cache, rest = len(os.sched_getaffinity(0)), None, []
    for arg in argv:
        if arg.startswith("--jobs="):
            jobs = int(arg.split("=", 1)[1])
        elif arg.startswith("--cache-dir="):
            cache = Path(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if len(rest) != 1 or cache is None:
        print("usage: ccache_emulation.py --cache-dir=DIR [--jobs=N] JOBFILE", file=sys.stderr)
        return 2
    with open(rest[0]) as f:
        document = json.load(f)
    common = document["common"]["args"]
    (cache / "objects").mkdir(parents=True, exist_ok=True)
    (cache / "strict").mkdir(exist_ok=True)
    hits = strict_hits = 0
    misses: list[tuple[str, Path, dict[str, list[str]]]] = []
    for job in document["jobs"]:
        key, strict = keys(common, job)
        seen = cache / "strict" / strict  # a result exists under the stricter key
        strict_hits += seen.exists()
        cached = cache / "objects" / f"{key}.o"
        if cached.exists():
            shutil.copyfile(cached, job["outputs"][0])
            seen.touch()
            hits += 1
        else:
            misses.append((key, seen, job))
    failed = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        commands = [[*common, *job["args"]] for _, _, job in misses]
        for (key, seen, job), (status, stderr) in zip(
            misses, pool.map(_compile, commands), strict=True
        ):
            if stderr:
                sys.stderr.write(stderr)
            if status != 0:
                failed += 1
            else:
                _store(cache, key, job["outputs"][0])
                seen.touch()
    print(f"ccache emulation: {len(document['jobs'])} jobs: {hits} hits ({strict_hits} with "
          f"the shard path in the key), {len(misses)} compiled", file=sys.stderr)  # fmt: skip
    if failed:
        print(f"ccache emulation: {failed} backend jobs failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
