"""What the docs quote of the program's output is what the program prints.

Every ```` ```text output:NAME ```` block in docs/ holds example lines of scenario NAME, which
this test runs for real (clang-22, ld.lld-22, a real redis-server for the remote tier;
`cached-dist flags` with clang-22, Debian's clang-14 and clang-cl; a link of modules compiled
by absolute path; a cache one of whose directories is a symbolic link). Each
example must have the shape of a line the scenario printed (numbers, keys and module names
aside), and each summary line the scenario printed must have the shape of an example of its
block, so neither can drift from the other. The stats table of docs/reference.md must list
exactly the keys of ``cached-dist stats --json``, and its rows exactly the rows of
``cached-dist stats``.

Output quoted inline (in backticks, in a sentence or a table) is listed in FORMS: each form
must be in its file as written, and match a line its scenario printed, its placeholders
(``DIR``, ``N``, ``...``), sizes and absolute paths standing for any text or number.
Scenarios that need a REAPI server (buildbox-casd) or a Dask cluster run in tests of their
own; forms of messages no cheap scenario prints (another user's server, a client not built)
are matched against the program's own format strings (``code``: its Python and C string
literals).
"""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import docs_errors, docs_scenarios
from .serial_distributor import __file__ as SERIAL
from .servers import Casd, casd, requires_execution, start_redis  # noqa: F401
from .toolchain import (
    CLANG,
    LLVM_BIN,
    PROGRAMS,
    Project,
    build,
    cached_dist_exe,
    requires_toolchain,
    run,
)

DOCS = Path(__file__).parent.parent / "docs"
BLOCK = re.compile(r"^ *```text output:(\S+)\n(.*?)^ *```$", re.MULTILINE | re.DOTALL)
SUMMARY = re.compile(r"^cached-dist: \d+ jobs: ")


def shape(line: str) -> str:
    """A line with what varies between runs taken out: absolute paths (not a URL's), keys,
    module names, numbers, and the unit of a link's time (ms below a second: a loaded
    machine may take seconds)."""
    # After a word's ':' too (lld-link's /thinlto-distributor:PATH), not a URL's '://'.
    line = re.sub(r"(?:(?<![\w.:/])|(?<=[^/]:)(?!//))/[\w./+-]+", "PATH", line.strip())
    line = re.sub(r"\b[0-9a-f]{32}\b", "KEY", line)
    line = re.sub(r"\b[\w-]+\.o\b", "MODULE", line)
    line = re.sub(r"\b\d+ ms$|\b\d+\.\d\d s$", "TIME", line)
    return re.sub(r"\d+(\.\d+)?", "N", line)


def blocks() -> Iterator[tuple[str, str, list[str]]]:
    """(file, scenario, example lines) of every output block in docs/."""
    for path in sorted(DOCS.glob("**/*.md")):
        for name, body in BLOCK.findall(path.read_text()):
            yield path.name, name, [ln.strip() for ln in body.splitlines() if ln.strip()]


def test_shape() -> None:
    assert shape("cached-dist: hit  3c8e5a0f7d1b2c4e6a8f0b1d3e5c7a9f main.o: local cache, 0.4 ms") \
        == shape("cached-dist: hit  00112233445566778899aabbccddeeff eval.o: local cache, 12.25 ms")  # fmt: skip
    assert shape("5 jobs: 5 hits, 0 compiled, 38 ms") == shape("5 jobs: 5 hits, 0 compiled, 1.20 s")
    assert shape("5 jobs: 5 hits, 0 compiled, 38 ms") != shape("5 jobs: 5 hits, 0 compiled")
    assert shape("cache /srv/c: tmp is") == shape("cache /tmp/p-1/c: tmp is") != shape("cache c:")
    assert "PATH" not in shape("remote redis://127.0.0.1:6379/0: 1 round trip")  # a URL
    assert shape("/thinlto-distributor:/x/cached-dist") == "PATH:PATH"


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Each scenario's stderr lines, from real links of the calc program (5 jobs)."""
    top = tmp_path_factory.mktemp("docs-output")
    project = build("calc", top / "p")
    cache = top / "cache"
    out: dict[str, list[str]] = {}

    def link(name: str, *args: str, opt: str = "-O2", expect: str = "0") -> list[str]:
        done = project.link(f"app-{name}", opt=opt, distributor_args=list(args))
        assert str(done.returncode) == expect, done.stderr
        assert project.run_program(f"app-{name}") == project.expected_output
        return done.stderr.splitlines()

    cold = link("cold", f"--cache-dir={cache}", "--verbose")
    out["cold"] = out["verbose-cold"] = cold
    hit = link("hit", f"--cache-dir={cache}", "--verbose")
    out["full-hit"] = out["verbose-hit"] = hit
    verified = link("verified", f"--cache-dir={cache}", "--verbose", "--verify-hits=1")
    out["verified"] = out["verbose-verified"] = verified
    inner = link("inner", f"--cache-dir={top / 'c2'}", "--verbose", "--", sys.executable, SERIAL)
    out["verbose-inner"] = inner
    out["compiler-check"] = link("check", f"--cache-dir={top / 'c5'}", "--compiler-check=false")
    fallback = link("fallback", f"--cache-dir={cache}", "--verbose", "--", "false", opt="-O3")
    out["fallback"] = out["verbose-fallback"] = fallback
    redis = start_redis(top / "redis")
    try:
        remote = f"--remote-storage={redis.url}"
        link("upload", f"--cache-dir={top / 'machine-a'}", remote)
        out["remote"] = out["verbose-remote"] = link(
            "remote", f"--cache-dir={top / 'machine-b'}", remote, "--verbose"
        )
        out |= docs_scenarios.remote_faults(project, top / "faults", redis)
        out["waited"] = docs_scenarios.waited(project, top / "waits", redis)
    finally:
        redis.stop()
    out |= _flags_scenarios(top)
    out |= docs_scenarios.flags(top)
    out["cc-print"] = docs_scenarios.launcher_print(top / "cc")
    out["hint"] = _hint_scenario(top / "absolute", top / "c3")
    out["cache-warning"] = _cache_warning_scenario(project, top / "c4")
    out |= docs_scenarios.serve(project, top / "serve", cache)
    out["client"] = docs_scenarios.client_errors()
    out |= docs_scenarios.commands(cache)  # last: it clears the cache
    return out


def _flags_scenarios(top: Path) -> dict[str, list[str]]:
    """`cached-dist flags`: what it prints with clang-22, its error with clang-14 and
    clang-cl (Debian's clang-14 from scripts/setup)."""
    if shutil.which("clang-14") is None:
        pytest.skip("clang-14 not installed (run scripts/setup)")
    out = {}
    for name, cc, status in (("flags", "clang-22", 0), ("old-compiler", "clang-14", 2),
                             ("clang-cl", "clang-cl-22", 2)):  # fmt: skip
        env = {**os.environ, "CC": cc, "XDG_CONFIG_HOME": str(top / "cfg"),
               "PATH": f"{os.path.dirname(cached_dist_exe())}:{LLVM_BIN}:/usr/bin:/bin"}  # fmt: skip
        env.pop("CXX", None)
        done = subprocess.run([cached_dist_exe(), "flags"], cwd=top, env=env,
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == status, done.stderr
        out[name] = (done.stdout if status == 0 else done.stderr).splitlines()
    return out


def _hint_scenario(work: Path, cache: Path) -> list[str]:
    """calc's modules compiled by absolute path (as CMake does), linked with --verbose."""
    shutil.copytree(PROGRAMS / "calc", work)
    sources = sorted(work.glob("*.c"))
    for src in sources:
        done = run([CLANG, "-flto=thin", "-O2", "-c", src, "-o", src.with_suffix(".o")], work)
        assert done.returncode == 0, done.stderr
    done = run([CLANG, "-flto=thin", "-O2", "-fuse-ld=lld", *(s.with_suffix(".o") for s in sources),
                "-o", "app", f"-fthinlto-distributor={cached_dist_exe()}",
                f"-Xthinlto-distributor=--cache-dir={cache}", "-Xthinlto-distributor=--verbose"],
               work)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def _cache_warning_scenario(project: Project, cache: Path) -> list[str]:
    """A cache whose tmp directory was replaced by a symbolic link."""
    assert project.link("app-w1", distributor_args=[f"--cache-dir={cache}"]).returncode == 0
    shutil.rmtree(cache / "tmp")
    (cache / "tmp").symlink_to(cache.parent)
    done = project.link("app-w2", distributor_args=[f"--cache-dir={cache}"])
    assert done.returncode == 0, done.stderr
    assert project.run_program("app-w2") == project.expected_output
    return done.stderr.splitlines()


@requires_toolchain
@pytest.mark.e2e
def test_every_quoted_output_line_is_one_the_program_prints(
    printed: dict[str, list[str]],
) -> None:
    found = list(blocks())
    assert {name for _, name, _ in found} <= set(printed), "a block without a scenario"
    used = {name for _, name, _ in found} | {name for _, _, name in FORMS}
    assert set(printed) <= used, "a scenario no block or form quotes"
    for file, name, examples in found:
        real = {shape(line) for line in printed[name]}
        for example in examples:
            assert shape(example) in real, f"{file} {name}: {example!r} not in {printed[name]}"
        documented = {shape(e) for e in examples}
        for line in printed[name]:
            if SUMMARY.match(line) and any(SUMMARY.match(e) for e in examples):
                assert shape(line) in documented, f"{file} {name}: undocumented form {line!r}"


def _stats_table() -> list[tuple[list[str], list[str]]]:
    """(keys, rows) of each line of reference.md's stats table."""
    text = (DOCS / "reference.md").read_text()
    section = text[text.index("### `cached-dist stats`") :]
    table = []
    for line in section.splitlines()[1:]:
        if line.startswith("### ") or line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            keys = re.findall(r"`(\w+)`", cells[0])
            rows = [] if cells[1] == "-" else [r.strip() for r in cells[1].split(",")]
            table.append((keys, rows))
    return table


@requires_toolchain
@pytest.mark.e2e
def test_the_stats_table_lists_every_key_and_row(tmp_path: Path) -> None:
    project = build("calc", tmp_path / "p")
    cache = tmp_path / "cache"
    assert project.link(distributor_args=[f"--cache-dir={cache}"]).returncode == 0
    as_json = run([cached_dist_exe(), "stats", "--json", f"--cache-dir={cache}"], tmp_path)
    as_text = run([cached_dist_exe(), "stats", f"--cache-dir={cache}"], tmp_path)
    assert as_json.returncode == 0 and as_text.returncode == 0, as_json.stderr + as_text.stderr
    table = _stats_table()
    assert sorted(k for keys, _ in table for k in keys) == sorted(json.loads(as_json.stdout))
    real_rows = [line[:20].strip() for line in as_text.stdout.splitlines()]  # "%-20s %s"
    assert sorted(real_rows) == sorted(r for _, rows in table for r in rows)


#: (file, form as the docs quote it, the scenario that prints it): output quoted inline.
FORMS = [
    ("guide.md", "served JOBFILE (exit status 0)", "serve-verbose"),
    ("guide.md", "handed back JOBFILE: REASON", "serve-verbose"),
    ("guide.md", "-fthinlto-distributor=/abs/path/to/cached-dist", "no-server"),
    ("guide.md", "cached-dist: warning: remote URL: ...; continuing without it (its keys are misses)", "shard-down"),
    ("guide.md", "cached-dist: warning: remote URL: values not signed with --remote-signing-key; not used (counted as remote_rejected)", "unsigned"),
    ("guide.md", "cached-dist: warning: remote URL: ...; continuing without it", "remote-down"),
    ("guide.md", "hit  KEY MODULE: remote (URL), T ms", "verbose-remote"),
    ("guide.md", "cached-dist: warning: cache DIR: ...", "cache-warning"),
    ("guide.md", "4 jobs: 0 hits, 4 compiled (4 remotely)", "reapi"),
    ("guide.md", "4 jobs: 4 hits (4 from the remote), 0 compiled", "reapi-other"),
    ("guide.md", "compiled on Dask worker NAME at ADDRESS", "dask"),
    ("guide.md", "Dask: connected to ADDRESS in 0.00 s (through the resident client, pid N)", "dask-resident"),
    ("guide.md", "(distributed imported, workers listed)", "dask"),
    ("guide.md", "cached-dist: warning: PATH belongs to a server of user UID, not yours: not using it", "code"),
    ("guide.md", "the warm server's client PATH is not built: reinstall cached-dist where a C compiler is available", "code"),
    ("guide.md", "the compiler printed an error although it exited 0 (...)", "code"),
    ("guide.md", "the resident Dask client stopped", "code"),
    ("reference.md", "unknown command 'stat' (did you mean 'stats'?)", "did-you-mean"),
    ("reference.md", "statistics zeroed in DIR", "zero"),
    ("reference.md", "cached-dist: cleared DIR", "clear"),
    ("reference.md", "cached-dist: freed 1.2 MiB; 3.4 GiB left in DIR", "trim"),
    ("reference.md", "checked 3 blobs (1.2 KiB) and 3 entries: 0 corrupt blobs removed, 2 entries dropped, 1 damaged paths repaired", "verify"),
    ("reference.md", "cached-dist: 127 jobs: 120 hits (7 after waiting 20.1 s for other links), 7 compiled, 29.45 s", "waited"),
    # Dask's summary is REAPI's: one Summary.line, "(N remotely)" for either.
    ("reference.md", "cached-dist: 127 jobs: 0 hits, 127 compiled (127 remotely), 41.02 s", "dask-resident"),
    ("reference.md", "N compiled (R remotely)", "reapi"),
    ("reference.md", "hit  KEY MODULE: after waiting 3.1 s for another link, 0.5 ms", "waited"),
    ("reference.md", "miss KEY MODULE: compiled on Dask worker NAME at ADDRESS, 1.52 s", "dask"),
    ("reference.md", "compiled on Dask worker NAME at ADDRESS", "dask"),
    ("reference.md", "(distributed imported, workers listed)", "dask"),
    ("reference.md", "(through the resident client, pid N)", "dask-resident"),
    ("reference.md", "compiled on REAPI (URL), T s", "reapi"),
    ("reference.md", "cached-dist: N of M modules were compiled from absolute source paths (PATH, ...): checkouts at other paths will not share their results; compile through the launcher cached-dist-cc (`cached-dist flags --launcher`; see \"Sharing a cache\" in the guide)", "hint"),
    ("reference.md", "remote URL: ...; continuing without it", "remote-down"),
    ("reference.md", "a server listens on SOCKET (pid N)", "serve-control"),
    ("reference.md", "no server listens on SOCKET", "serve-control"),
    ("reference.md", "stopped the server on SOCKET (pid N)", "serve-control"),
    ("reference.md", "cached-dist: served JOBFILE (exit status N)", "serve-verbose"),
    ("reference.md", "cached-dist: handed back JOBFILE: REASON", "serve-verbose"),
    ("reference.md", "not a full hit from the local cache", "serve-verbose"),
    ("reference.md", "cached-dist: serving on SOCKET (pid N)", "serve-verbose"),
    ("reference.md", "cached-dist: error: usage: cached-dist-client CACHED_DIST [ARGS...] JOBFILE (see `cached-dist flags`)", "client"),
    ("reference.md", "cached-dist: error: cannot run CACHED_DIST: REASON", "client"),
    ("reference.md", "cached-dist: warning: SOCKET belongs to a server of user UID, not yours: not using it", "code"),
    ("reference.md", "cached-dist: no link for SECONDS s: exiting", "code"),
    ("reference.md", "serve: --status and --stop take no other argument", "code"),
    ("reference.md", "cannot write the stats log FILE: REASON", "code"),
    ("reference.md", "cannot write the output: REASON", "code"),
    ("reference.md", "--compiler-check failed: 'CMD' exited with status N; not caching jobs compiled by COMPILER", "compiler-check"),
    ("reference.md", "remote URL: a damaged value under KEY; a miss", "refused"),
    ("reference.md", "remote URL: the value of another key under KEY; a miss", "refused"),
    ("reference.md", "remote URL: a value of another format under KEY; a miss", "refused"),
    ("reference.md", "from the REAPI executor's cache (URL)", "code"),
    # The tables of errors and warnings (docs_errors.py runs the cheap ones).
    ("reference.md", "job file is not a regular file: PATH", "job-file-errors"),
    ("reference.md", "input not found: PATH (WHERE)", "job-file-errors"),
    ("reference.md", "input PATH is a FIFO, not a regular file (WHERE)", "job-file-errors"),
    ("reference.md", "input PATH cannot be examined (REASON) (WHERE)", "job-file-errors"),
    ("reference.md", "output PATH is also an input (WHERE): refusing to overwrite it", "job-file-errors"),
    ("reference.md", "output PATH is also an input, by another name (WHERE): refusing to overwrite it", "job-file-errors"),
    ("reference.md", "output PATH is named also by job M (WHERE)", "job-file-errors"),
    ("reference.md", "output PATH is named twice by this job (WHERE)", "job-file-errors"),
    ("reference.md", "output PATH names a directory (WHERE)", "job-file-errors"),
    ("reference.md", "output PATH is a directory, not a regular file (WHERE)", "job-file-errors"),
    ("reference.md", "output PATH cannot be examined: REASON (WHERE)", "job-file-errors"),
    ("reference.md", "output PATH is inside the cache's own files DIR (WHERE)", "job-file-errors"),
    ("reference.md", "the command has no -o: the compiler would name the object itself, perhaps after an input (WHERE)", "job-file-errors"),
    ("reference.md", "the command writes SPELLING, which is not one of the job's outputs (WHERE)", "job-file-errors"),
    ("reference.md", "the command writes --output=lib.o, which is not one of the job's outputs (job 0, module a.o)", "job-file-errors"),
    ("reference.md", "the command has SPELLING, which makes clang write files of its own naming where the job does not say (WHERE)", "job-file-errors"),
    ("reference.md", "the command has SPELLING, which leaves clang-cl to name the object after the module (WHERE)", "job-file-errors"),
    ("reference.md", "the command has SPELLING, which makes clang read arguments these checks cannot see (WHERE)", "job-file-errors"),
    ("reference.md", "the command runs clang in --driver-mode=MODE, whose options the job file checks do not read (WHERE)", "job-file-errors"),
    ("reference.md", "output directory does not exist: DIR", "job-file-errors"),
    ("reference.md", "cannot write to output directory: DIR", "code"),  # root writes anywhere
    ("reference.md", "no cache at DIR", "command-errors"),
    ("reference.md", "no cache at DIR: not a directory", "command-errors"),
    ("reference.md", "no cache at DIR: the directory holds none (no CACHEDIR.TAG of cached-dist, no index); left untouched", "command-errors"),
    ("reference.md", "cannot use the cache at DIR: REASON", "code"),
    ("reference.md", "could not VERB the cache at DIR: REASON", "code"),
    ("reference.md", "compiler 'NAME' not found: set CC or --cc to a clang (DTLTO needs clang 21 or later with lld)", "flags-errors"),
    ("reference.md", "NAME (VERSION) cannot link through a distributor: DTLTO needs clang 21 or later with lld", "flags-errors"),
    ("reference.md", "NAME (VERSION) cannot find lld for -fuse-ld=lld: install the lld of the same LLVM version", "code"),
    ("reference.md", "NAME (VERSION) cannot do DTLTO: ERROR", "flags-errors"),
    ("reference.md", "'WORD' contains a comma, which clang would split: ...", "flags-errors"),
    ("reference.md", "the warm server's client PATH is not built: reinstall cached-dist where a C compiler is available", "code"),
    ("reference.md", "--server and --no-server cannot be combined", "flags-errors"),
    ("reference.md", "the path 'PATH' contains a comma, which clang would split", "code"),
    ("reference.md", "NAME links Windows targets with lld-link, and its driver does not pass -fthinlto-distributor= on: print lld-link's flags with `cached-dist flags --lld-link`", "clang-cl"),
    ("reference.md", "compiler 'NAME' not found: set CC or --cc to a clang or clang-cl (DTLTO needs lld-link 21 or later)", "flags-errors"),
    ("reference.md", "NAME (VERSION) is not clang: DTLTO needs lld-link 21 or later and clang", "flags-errors"),
    ("reference.md", "no clang beside PATH to compile the backend jobs (clang-cl misreads the options LLD gives them)", "code"),
    ("reference.md", "cannot find lld-link beside PATH or on PATH: install the lld of the same LLVM version", "code"),
    ("reference.md", "LLD_LINK (VERSION) cannot link through a distributor: DTLTO needs lld-link 21 or later", "flags-errors"),
    ("reference.md", "--libtool and --lld-link cannot be combined (libtool drives clang's driver, not lld-link)", "flags-errors"),
    ("reference.md", "'WORD' is not a launcher option: `cached-dist flags --launcher` takes --base-dir and --prefix-map", "flags-errors"),
    ("reference.md", "--launcher=FORM: expected --launcher or --launcher=cmake", "flags-errors"),
    ("reference.md", "base directory DIR: no such directory", "flags-errors"),
    ("reference.md", "base directory DIR: not a directory", "flags-errors"),
    ("reference.md", "base directory /: it would rewrite system paths; use the checkout's top directory", "flags-errors"),
    ("reference.md", "config file FILE: base-dir: expected a directory, got VALUE", "flags-errors"),
    ("reference.md", "'WORD' contains ';', which CMake would split", "flags-errors"),
    ("reference.md", "the compiler launcher PATH is not built: reinstall cached-dist where a C compiler is available", "code"),
    ("reference.md", "a server already listens on SOCKET", "code"),
    ("reference.md", "/tmp/cached-dist-UID must be a directory of yours that only you can use (or set CACHED_DIST_SOCKET)", "code"),
    ("reference.md", "cannot create DIR: REASON", "code"),
    ("reference.md", "cannot create SOCKET.lock: REASON", "serve-errors"),
    ("reference.md", "cannot listen on SOCKET: it is a regular file, not a socket; not replacing it", "serve-errors"),
    ("reference.md", "cannot listen on SOCKET: REASON", "code"),
    ("reference.md", "serve: --idle-exit: not a number of seconds: 'VALUE'", "serve-errors"),
    ("reference.md", "serve: --idle-exit: must be a positive number of seconds, got VALUE", "serve-errors"),
    ("reference.md", "serve: unknown argument 'WORD' (see cached-dist serve --help)", "serve-errors"),
    ("reference.md", "unknown option: WORD (usage: ...)", "launcher-errors"),
    ("reference.md", "missing COMPILER (usage: ...)", "launcher-errors"),
    ("reference.md", "option --base-dir needs a value (DIR)", "launcher-errors"),
    ("reference.md", "option --prefix-map= needs a NAME", "launcher-errors"),
    ("reference.md", "the base directory must be an absolute path, not 'DIR'", "launcher-errors"),
    ("reference.md", "base directory DIR: REASON", "launcher-errors"),
    ("reference.md", "CACHED_DIST_BASE_DIR is empty: unset it, or name a directory", "launcher-errors"),
    ("reference.md", "--prefix-map: the base directory DIR holds '=', which -ffile-prefix-map cannot map", "launcher-errors"),
    ("reference.md", "cannot run COMPILER: REASON", "launcher-errors"),
    ("reference.md", "cannot reach the Dask scheduler at ADDRESS", "code"),
    ("reference.md", "the Dask scheduler at ADDRESS cannot run jobs (it has no workers)", "code"),
    ("reference.md", "worker NAME at ADDRESS has another toolchain at PATH", "code"),
    ("reference.md", "cannot be compiled remotely: ...", "code"),
    ("reference.md", "exit status N on worker NAME at ADDRESS: ...", "code"),
    ("reference.md", "Dask task failed: ...", "code"),
    ("reference.md", "not finished on Dask within --dask-timeout S s", "code"),
    ("reference.md", "Dask failed: ...", "code"),
    ("reference.md", "the resident Dask client stopped (...)", "code"),
    ("reference.md", "REAPI executor URL: ...", "code"),
    ("reference.md", "exit status N on REAPI (URL): ...", "code"),
    ("reference.md", "REAPI execution failed: ...", "code"),
    ("reference.md", "not finished on REAPI within --remote-exec-timeout S s", "code"),
    ("reference.md", "archive member not found: MEMBER at offset OFFSET in archive ARCHIVE (...)", "code"),
    ("reference.md", "cannot write archive members to DIR: ...", "code"),
    ("reference.md", "PATH exists and is not the member ...; not overwriting it", "code"),
]  # fmt: skip

PLACEHOLDER = re.compile(
    r"\.\.\.|\b(?:ADDRESS|ARCHIVE|CACHED_DIST|CMD|COMPILER|DIR|ERROR|FILE|FORM|JOBFILE|KEY"
    r"|LLD_LINK|M|MEMBER|MODE|MODULE|N|NAME|OFFSET|OUTPUT|PATH|R|REASON|S|SECONDS|SOCKET"
    r"|SPELLING|T|UID|URL|VALUE|VERB|VERSION|WHERE|WORD)\b|(?<![\w.:/])/[\w./+-]+"
    r"|(?P<size>\d+(?:\.\d+)? (?:B|[KMGT]iB)\b)|(\d+(?:\.\d+)?)( m?s$)?"
)
PREFIX = re.compile(r"^cached-dist: (?:warning: |error: )?")


def flat(text: str) -> str:
    return " ".join(text.split())


def pattern(form: str, code: bool = False) -> re.Pattern[str]:
    """A regex of the lines ``form`` stands for: each placeholder and absolute path any text,
    each number any number (a size and a time at the end in any unit); with ``code``, also a
    format string's field (rendered as NUL)."""
    number = r"(?:\d+(?:\.\d+)?|\0)" if code else r"\d+(?:\.\d+)?"
    out, at = [], 0
    for m in PLACEHOLDER.finditer(form):
        out.append(re.escape(form[at : m.start()]).replace(r"\ ", " +"))
        if m.group("size"):
            out.append(r"\0" if code else r"\d+(?:\.\d+)? (?:B|[KMGT]iB)")
        elif m.group(3) and not code:
            out.append(r"\d+(?:\.\d+)? m?s")
        elif m.group(2):
            out.append(number + re.escape(m.group(3) or "").replace(r"\ ", " +"))
        else:
            out.append(".+")
        at = m.end()
    out.append(re.escape(form[at:]).replace(r"\ ", " +"))
    return re.compile("".join(out))


def test_pattern() -> None:
    assert pattern("cached-dist: cleared DIR").fullmatch("cached-dist: cleared /tmp/c")
    assert not pattern("cached-dist: cleared DIR").search("cached-dist: clear /tmp/c")
    waited = pattern("127 jobs: 120 hits (7 after waiting 20.1 s for other links), 29.45 s")
    assert waited.fullmatch("5 jobs: 5 hits (5 after waiting 0.4 s for other links), 612 ms")
    assert not waited.search("5 jobs: 5 hits (5 after waiting 0.4 s for links), 612 ms")
    assert pattern("hit  KEY MODULE: remote (URL), T ms").search(
        "cached-dist: hit  0123 a.o: remote (redis://127.0.0.1:1/0), 2.3 ms"
    )
    assert pattern("freed 1.2 MiB; 3.4 GiB left").fullmatch("freed 0 B; 5.1 KiB left")
    assert pattern("no link for SECONDS s: exiting", code=True).search("no link for \0 s: exiting")


def check_forms(printed: dict[str, list[str]], scenarios: set[str]) -> None:
    """Each form of those scenarios is in its file and matches a line the scenario printed."""
    for file, form, name in FORMS:
        if name not in scenarios:
            continue
        assert flat(form) in flat((DOCS / file).read_text()), f"{file}: {form!r} not quoted"
        regex = pattern(form)
        lines = [line.strip() for line in printed[name]]
        assert any(regex.search(line) for line in lines), f"{file}: {form!r} not in {lines}"


@requires_toolchain
@pytest.mark.e2e
def test_every_inline_output_form_is_one_the_program_prints(
    printed: dict[str, list[str]],
) -> None:
    assert {name for _, _, name in FORMS} <= set(printed) | SEPARATE | ERRORS | {"code"}
    check_forms(printed, set(printed))


def _rendered(node: ast.AST) -> str | None:
    """A string expression as it prints, each field as NUL (``'NUL'`` with ``!r``), strings
    joined by ``+`` joined, a conditional string as its first branch; None if not one."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant)
                       else "'\0'" if isinstance(v, ast.FormattedValue) and v.conversion == 114
                       else "\0" for v in node.values)  # fmt: skip
    if isinstance(node, ast.IfExp):
        return _rendered(node.body)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _rendered(node.left), _rendered(node.right)
        if left is not None or right is not None:
            return (left or "\0") + (right or "\0")
    return None


def _format_strings() -> list[str]:
    """The program's string expressions (_rendered), C's literals with %s/%lu/%d as NUL
    (adjacent C literals joined)."""
    root = Path(__file__).parent.parent / "cached_dist"
    found = []
    for path in root.glob("**/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            text = _rendered(node)
            if text is not None:
                found.append(text)
    literal = r'"((?:[^"\\\n]|\\.)*)"'
    for path in root.glob("**/*.c"):
        for run_ in re.finditer(rf"{literal}(?:\s*{literal})*", path.read_text()):
            text = "".join(re.findall(literal, run_.group(0)))
            found.append(re.sub(r"%l?[sdu]", "\0", text))
    return found


#: Forms of messages the program assembles from several strings: the one with fields, then
#: what fills each field in turn (None: a value).
ASSEMBLED: dict[str, tuple[str | None, ...]] = {
    "the Dask scheduler at ADDRESS cannot run jobs (it has no workers)": (
        "the Dask scheduler at \0 cannot run jobs (\0)", None, "it has no workers"),
    # A worker as dask_task.where() names it.
    "worker NAME at ADDRESS has another toolchain at PATH": (
        "worker \0 has another toolchain at \0 (identity \0, the link machine's \0)",
        "\0 at \0"),
    "exit status N on worker NAME at ADDRESS: ...": (
        "\0 on worker \0: \0", "exit status \0", "\0 at \0"),
    "PATH exists and is not the member ...; not overwriting it": (
        "\0 exists and is not the \0; not overwriting it (remove it, or relink)", None,
        "member \0 at offset \0 of archive \0"),
}  # fmt: skip


def _assembled(pieces: tuple[str | None, ...]) -> str:
    """ASSEMBLED's message: each field of the first piece filled in turn (\\1 marks a field
    filled, until the end)."""
    out = str(pieces[0])
    for fill in pieces[1:]:
        out = out.replace("\0", "\1" if fill is None else fill.replace("\0", "\1"), 1)
    return out.replace("\1", "\0")


def test_forms_no_scenario_prints_are_the_programs_format_strings() -> None:
    strings = _format_strings()
    wrong = []
    for file, form, name in FORMS:
        if name != "code":
            continue
        assert flat(form) in flat((DOCS / file).read_text()), f"{file}: {form!r} not quoted"
        regex = pattern(PREFIX.sub("", form), code=True)
        pieces = ASSEMBLED.get(form)
        if pieces is not None:
            assert set(pieces) - {None} <= set(strings), f"{form!r}: not the program's {pieces}"
            if not regex.search(_assembled(pieces)):
                wrong.append(f"{file}: {form!r}")
        elif not any(regex.search(s) for s in strings):
            wrong.append(f"{file}: {form!r}")
    assert not wrong, f"no message has these forms: {wrong}"


#: Scenarios of tests of their own: a REAPI executor (buildbox-casd), a Dask cluster.
SEPARATE = {"reapi", "reapi-other", "dask", "dask-resident"}


@requires_toolchain
@requires_execution
@pytest.mark.e2e
def test_the_reapi_forms_are_what_a_remote_execution_prints(
    tmp_path: Path,
    casd: Casd,  # noqa: F811
) -> None:
    """Machine A's link executes every job on buildbox-casd; machine B (its own cache) gets
    them all from the server's cache."""
    salt = f"-Wl,--thinlto-remote-compiler-arg=-DCACHED_DIST_DOCS_SALT={uuid.uuid4().hex}"
    printed = {}
    for name in ("reapi", "reapi-other"):
        project = build("calc", tmp_path / name)
        done = project.link(extra=[salt], distributor_args=[
            f"--cache-dir={tmp_path / name / 'cache'}", f"--remote-executor={casd.url}",
            "--no-fallback", "--verbose"])  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert project.run_program() == project.expected_output
        printed[name] = done.stderr.splitlines()
    check_forms(printed, {"reapi", "reapi-other"})


@requires_toolchain
@pytest.mark.e2e
def test_the_dask_forms_are_what_links_on_a_cluster_print(tmp_path: Path) -> None:
    """A link that connects to a real scheduler (one worker) itself, then one through the
    resident client it left behind."""
    pytest.importorskip("distributed")
    from .dask_cluster import cluster
    from .test_e2e_dask import resident_pid, stop_residents

    printed = {}
    (tmp_path / "logs").mkdir()
    with cluster(tmp_path / "logs", 1) as c:
        stop_residents(c.address)
        try:
            for name, opt in (("dask", "-O1"), ("dask-resident", "-O2")):
                if name == "dask-resident":
                    assert resident_pid(c.address, wait=30) is not None
                project = build("calc", tmp_path / name)
                done = project.link(opt=opt, distributor_args=[
                    f"--cache-dir={tmp_path / name / 'cache'}",
                    f"--dask-scheduler={c.address}", "--no-fallback", "--verbose"])  # fmt: skip
                assert done.returncode == 0, done.stderr
                assert project.run_program() == project.expected_output
                printed[name] = done.stderr.splitlines()
        finally:
            stop_residents(c.address)
    check_forms(printed, {"dask", "dask-resident"})


#: Scenarios of the tables of errors: cheap failing runs of their own (tests/docs_errors.py).
ERRORS = {"job-file-errors", "flags-errors", "launcher-errors", "serve-errors", "command-errors"}


@requires_toolchain
def test_the_error_tables_are_what_the_program_prints(tmp_path: Path) -> None:
    if shutil.which("clang-14") is None:
        pytest.skip("clang-14 not installed (run scripts/setup)")
    printed = docs_errors.scenarios(tmp_path)
    assert set(printed) == ERRORS
    check_forms(printed, ERRORS)


#: Words a message column quotes that are not messages: the kinds of file "likewise" names,
#: the system's words for a REASON.
FRAGMENTS = {"a directory", "a symbolic link", "a FIFO", "a character device", "a block device",
             "No such file or directory", "not a directory"}  # fmt: skip
SPAN = re.compile(r"``(.+?)``|`([^`]+)`")


def _table_messages(text: str) -> Iterator[str]:
    """What the message column of each table of errors or warnings quotes: the first cell
    under an ``error`` header, the second under ``warning starts with``, and the error lines
    of a table of exit statuses."""
    column = None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if column is None:
            column = (0 if cells[0].startswith("error") else
                      1 if cells[1:2] in (["warning starts with"], ["when"]) else -1)  # fmt: skip
            continue
        if column < 0 or len(cells) <= column or set(cells[0]) <= {"-", " "}:
            continue
        if column == 1 and cells[0].isdigit() and not cells[1].startswith("one error line"):
            continue  # an exit status without error lines
        for m in SPAN.finditer(cells[column]):
            yield (m.group(1) or m.group(2)).strip()


def test_every_message_of_the_error_tables_is_checked() -> None:
    """A row added to a table of errors or warnings needs its FORMS entry."""
    checked = {(file, flat(form)) for file, form, _ in FORMS}
    missing = []
    for file in ("reference.md", "guide.md"):
        for message in _table_messages((DOCS / file).read_text()):
            if message not in FRAGMENTS and (file, flat(message)) not in checked:
                missing.append(f"{file}: {message!r}")
    assert not missing, f"quoted in a table of messages, but checked by no test: {missing}"
