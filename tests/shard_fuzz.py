"""Differential mutation fuzzing of the native shard decoder against the Python reference.

Run as a program so that a crash or a hang of the C code cannot take the test runner with
it (tests/test_native_shard.py runs it with a timeout; ``make sanitize`` runs it with an
AddressSanitizer/UBSan build of the extension):

    python -m tests.shard_fuzz capture DIR          # real shards from clang-22/ld.lld-22 links
    python -m tests.shard_fuzz run DIR [--mutations N] [--seed S] [--extension PATH.so]

``run`` damages the corpus shards (truncations, bit flips, byte insertions and deletions,
VBR blowups, overwritten length words, spliced chunks) and checks on every one that the
native decoder gives the reference's answer (the same digest and exactness), or hands the
shard back to the reference (values over 64 bits); that no call takes more than a second;
and that no damaged shard gets the canonical digest of a different corpus shard. It prints
one JSON line of counts and exits 1 on the first disagreement.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import xxhash

from cached_dist.bitcode.shard import canonical_shard
from cached_dist.bitcode.tags import CANON_TAG, RAW_TAG

Lookup = Callable[[str], str | None]


def lookup_for(table: dict[str, str], cwd: str) -> Lookup:
    """The module_digest a caller builds (as shardgen.CapturedJob.module_digest does)."""

    def lookup(path: str) -> str | None:
        found = table.get(path)
        if found is None:
            found = table.get(os.path.normpath(os.path.join(cwd, path)))
        return found

    return lookup


def capture(dest: Path) -> int:
    """Writes real shards (C, C++, regular and thin archives, a generated program) to dest."""
    from tests import shardgen

    dest.mkdir(parents=True, exist_ok=True)
    entries = []
    programs: list[tuple[str, dict[str, str], bool, bool]] = [
        ("c", shardgen.C_PROGRAM, False, False),
        ("c-thin", shardgen.C_PROGRAM, True, False),
        ("cxx", shardgen.CXX_PROGRAM, False, True),
        ("gen", shardgen.many_module_program(24), False, False),
        ("gen-thin", shardgen.many_module_program(24), True, False),
    ]
    for name, sources, thin, cxx in programs:
        d = dest / "build" / name
        shardgen.write_sources(d, sources)
        objs = shardgen.compile_thin(d, [s for s in sources if not s.endswith(".h")])
        main = "main.o"
        lib = shardgen.archive(d, "libx.a", [o for o in objs if o != main], thin=thin)
        cap = shardgen.dtlto_capture(d, [main, lib], d / "cap", cxx=cxx)
        for i, job in enumerate(cap.jobs):
            shard = dest / f"{name}-{i}.bc"
            shard.write_bytes(job.shard)
            table: dict[str, str] = {}
            for path, digest in job.digests.items():
                table[path] = digest
                table[os.path.normpath(os.path.join(job.cwd, path))] = digest
            entries.append({"shard": shard.name, "table": table, "cwd": job.cwd})
    (dest / "corpus.json").write_text(json.dumps(entries))
    return len(entries)


def load_corpus(directory: Path) -> list[tuple[bytes, Lookup, dict[str, str]]]:
    """Each shard, its module_digest and the table behind it (path -> digest)."""
    entries = json.loads((directory / "corpus.json").read_text())
    return [((directory / e["shard"]).read_bytes(), lookup_for(e["table"], e["cwd"]),
             e["table"]) for e in entries]  # fmt: skip


def load_extension(path: str | None) -> ModuleType:
    if path is None:
        from cached_dist.bitcode import _shard  # type: ignore[attr-defined]

        return _shard  # type: ignore[no-any-return]
    loader = importlib.machinery.ExtensionFileLoader("cached_dist.bitcode._shard", path)
    spec = importlib.util.spec_from_file_location("cached_dist.bitcode._shard", path,
                                                  loader=loader)  # fmt: skip
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random kind of damage (sometimes two)."""
    b = bytearray(data)
    for _ in range(1 + (rng.random() < 0.25)):
        if not b:
            break
        kind = rng.randrange(8)
        i = rng.randrange(len(b))
        if kind == 0:  # truncate (often to a 4-byte boundary, which passes the size check)
            cut = rng.randrange(len(b))
            b = b[: cut - cut % 4] if rng.random() < 0.7 else b[:cut]
        elif kind == 1:  # flip 1-4 bits
            for _ in range(rng.randint(1, 4)):
                j = rng.randrange(len(b))
                b[j] ^= 1 << rng.randrange(8)
        elif kind == 2:  # insert bytes (4 keeps the size a multiple of 4)
            n = 4 if rng.random() < 0.6 else rng.randint(1, 3)
            b[i:i] = bytes(rng.randrange(256) for _ in range(n))
        elif kind == 3:  # delete bytes
            n = 4 if rng.random() < 0.6 else rng.randint(1, 3)
            del b[i : i + n]
        elif kind == 4:  # VBR blowup: continuation bits everywhere
            n = rng.randint(1, 16)
            b[i : i + n] = b"\xff" * len(b[i : i + n])
        elif kind == 5:  # overwrite a 32-bit word (block lengths, counts) with a big value
            j = i - i % 4
            b[j : j + 4] = rng.choice([0xFFFFFFFF, 0x7FFFFFFF, 0x10000, rng.getrandbits(32)]
                                      ).to_bytes(4, "little")  # fmt: skip
        elif kind == 6:  # splice: duplicate a chunk elsewhere
            j, n = rng.randrange(len(b)), rng.randint(4, 64)
            b[i:i] = b[j : j + n]
        else:  # set a byte to a boundary value
            b[i] = rng.choice([0, 1, 0x7F, 0x80, 0xFE, 0xFF])
    return bytes(b)


def reference(data: bytes, lookup: Lookup) -> tuple[str, bool]:
    r = canonical_shard(data, lookup)
    return r.digest, r.exact


def native(
    ext: ModuleType, data: bytes, lookup: Lookup, table: dict[str, str] | None = None
) -> tuple[str, bool] | None:
    """The extension's answer; with ``table``, it takes the digests of the table's paths from
    the table itself (``own`` and ``known``) and asks ``lookup`` only for other paths."""
    if table is None:
        body = ext.canonical_body(data, lookup)
    else:
        body = ext.canonical_body(data, lookup, frozenset(table), table)
    if type(body) is bytes:
        return xxhash.xxh3_128_hexdigest(CANON_TAG + body), True
    if body is None:
        return None
    assert isinstance(body, str) and body, body
    return xxhash.xxh3_128_hexdigest(RAW_TAG + data), False


def run(directory: Path, mutations: int, seed: int, extension: str | None) -> dict[str, int]:
    ext = load_extension(extension)
    corpus = load_corpus(directory)
    counts = {"corpus": len(corpus), "mutations": 0, "same_canonical": 0, "same_raw": 0,
              "handed_back": 0, "max_ms": 0}  # fmt: skip
    digests: list[str] = []  # canonical digest of each corpus shard
    for i, (data, lookup, table) in enumerate(corpus):
        want = reference(data, lookup)
        got = native(ext, data, lookup)
        if got != want or not want[1] or native(ext, data, lookup, table) != want:
            raise SystemExit(f"corpus shard {i}: native {got} reference {want}")
        digests.append(want[0])
    known = set(digests)
    rng = random.Random(seed)
    for n in range(mutations):
        source = rng.randrange(len(corpus))
        data, lookup, table = corpus[source]
        damaged = mutate(data, rng)
        started = time.perf_counter()
        with_table = n % 2 == 1  # both ways of asking
        got = native(ext, damaged, lookup, table if with_table else None)
        took = time.perf_counter() - started
        counts["max_ms"] = max(counts["max_ms"], round(took * 1000))
        if took > 1.0:
            raise SystemExit(f"mutation {n}: native decoder took {took:.1f} s")
        want = reference(damaged, lookup)
        counts["mutations"] += 1
        if got is None:
            counts["handed_back"] += 1
        elif got != want:
            (directory / "mismatch.bc").write_bytes(damaged)
            raise SystemExit(f"mutation {n} of shard {source}: native {got} reference {want} "
                             f"(own paths from the table: {with_table}; saved as mismatch.bc)")  # fmt: skip
        else:
            counts["same_canonical" if want[1] else "same_raw"] += 1
        if want[1] and want[0] in known and want[0] != digests[source]:
            raise SystemExit(f"mutation {n} of shard {source} has the digest of shard "
                             f"{digests.index(want[0])}")  # fmt: skip
    return counts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.shard_fuzz")
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture")
    cap.add_argument("directory", type=Path)
    fuzz = sub.add_parser("run")
    fuzz.add_argument("directory", type=Path)
    fuzz.add_argument("--mutations", type=int, default=3000)
    fuzz.add_argument("--seed", type=int, default=14)
    fuzz.add_argument("--extension")
    args = parser.parse_args(argv)
    if args.command == "capture":
        print(json.dumps({"shards": capture(args.directory)}))
        return 0
    print(json.dumps(run(args.directory, args.mutations, args.seed, args.extension)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
