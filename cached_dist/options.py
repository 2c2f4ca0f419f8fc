"""Options from the command line, CACHED_DIST_* variables and a TOML file, in that precedence.

One table (:data:`OPTIONS`) drives parsing, the environment, the config file, ``--help`` and
the tests that check every option is documented, so the four can never disagree.
"""

from __future__ import annotations

import os

from .errors import UsageError

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

SUBCOMMANDS = ("stats", "clear", "trim", "verify", "flags", "serve")
DEFAULT_MAX_SIZE = 5 * 2**30
DEFAULT_DASK_TIMEOUT = 900.0
DEFAULT_DASK_RESIDENT_IDLE = 600.0
DEFAULT_SERVER_IDLE_EXIT = 600.0


def default_jobs() -> int:
    """The CPUs this process may use (affinity), not the machine's total."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_cache_dir(environ: Mapping[str, str]) -> str:
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cached-dist")


def default_config_file(environ: Mapping[str, str]) -> str:
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "cached-dist", "config.toml")


_UNITS = {
    "": 1,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40,
}  # fmt: skip


def parse_size(text: str) -> int:
    """'5G' = 5*10**9, '5Gi' = 5*2**30 (as ccache); a trailing 'B' is allowed."""
    s = text.strip().lower().removesuffix("b")
    number = s.rstrip("kmgti")
    unit = s[len(number) :]
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (examples: 500M, 5G, 5Gi)") from None
    if unit not in _UNITS or value < 0 or value != value:
        raise ValueError(f"not a size: {text!r} (examples: 500M, 5G, 5Gi)")
    return int(value * _UNITS[unit])


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"must be between 0 and 1, got {text}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"must be a positive number of seconds, got {text}")
    return value


def idle_seconds(text: str) -> float:
    """Seconds, or 0 (which turns the thing off)."""
    try:
        if float(text) == 0:
            return 0.0
    except ValueError:
        pass  # _seconds says what is wrong with it
    return _seconds(text)


#: The address schemes of Dask's communication layers.
_DASK_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")


def _address(text: str) -> str:
    """A Dask scheduler's address, [SCHEME://]HOST:PORT: checked for its form here (a typo
    fails at configure time, in `cached-dist flags`); whether it answers, at link time."""
    value = text.strip()
    example = "(example: tcp://build-scheduler:8786)"
    if not value:
        raise ValueError(f"empty address {example}")
    scheme, sep, rest = value.rpartition("://")
    if sep and scheme not in _DASK_SCHEMES:
        raise ValueError(f"unknown scheme {scheme + '://'!r} in {value!r} "
                         f"(one of {', '.join(s + '://' for s in _DASK_SCHEMES)})")  # fmt: skip
    if scheme == "inproc":
        return value
    host, colon, port = rest.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a scheduler address: {value!r}, which needs HOST:PORT {example}")
    return value


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """'7d', '12h', '30m', '90s', '2w' (as ccache's --evict-older-than): seconds."""
    s = text.strip().lower()
    example = "(examples: 7d, 12h, 30m, 90s)"
    try:
        value = float(s[:-1]) * _AGE_UNITS[s[-1:]]
    except (ValueError, KeyError):
        raise ValueError(f"not an age: {text!r} {example}") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"must be a positive age, got {text!r} {example}")
    return value


def _compression_level(text: str) -> int:
    """0 (off) to 19: zstd's levels (20-22 need far more memory to read back)."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"not a whole number: {text!r}") from None
    if not 0 <= value <= 19:
        raise ValueError(f"must be between 0 (off) and 19, got {value}")
    return value


def _signing_key(text: str) -> str:
    """A file holding the team's key: a regular file, not empty, that others cannot read
    (nor write): what it holds lets anyone who reads it sign values every reader trusts."""
    import stat

    path = _path(text)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if st.st_mode & 0o006:
            raise ValueError(f"{path} is readable or writable by others (chmod o-rw {path})")
        with open(path, "rb") as f:
            key = f.read(4097)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    if not key.strip():
        raise ValueError(f"{path} is empty")
    if len(key) > 4096:
        raise ValueError(f"{path} is larger than 4096 bytes: not a key file")
    return path


def _path(text: str) -> str:
    if not text:
        raise ValueError("empty path")
    return os.path.expanduser(text)


def _remote_urls(text: str) -> tuple[str, ...]:
    """One or more remote storage URLs, separated by spaces (a tier of several servers:
    URLs joined by '|'); checked, never echoed whole."""
    from store.remote import check_url

    return tuple(check_url(url) for url in text.split())


def _check_signable(urls: tuple[str, ...]) -> None:
    """--remote-signing-key with a REAPI tier is refused: an action result carries no MAC,
    so a link with the key would refuse every value that tier served."""
    from store.remote import REAPI_SCHEMES, redact, scheme

    for url in urls:
        if scheme(url) in REAPI_SCHEMES:
            raise UsageError(f"--remote-signing-key cannot sign the REAPI tier {redact(url)}: "
                             "its action results carry no signature, so every value it "
                             "served would be refused (sign redis:// and http(s):// tiers "
                             "only)")  # fmt: skip


def _reapi_url(text: str) -> str:
    """A REAPI server's URL (grpc://, grpcs://, unix:); never echoed whole."""
    from store.remote import REAPI_SCHEMES, check_url, redact, scheme

    url = check_url(text.strip())
    if scheme(url) not in REAPI_SCHEMES:
        raise ValueError(f"not a REAPI URL: {redact(url)!r} (grpc://HOST:PORT, "
                         "grpcs://HOST:PORT or unix:PATH)")  # fmt: skip
    return url


def _pairs(what: str) -> Callable[[str], tuple[tuple[str, str], ...]]:
    """A parser of NAME=VALUE pairs, one a line (a flag given again adds more); a message
    never shows a value (headers carry API keys)."""

    def parse(text: str) -> tuple[tuple[str, str], ...]:
        pairs = []
        for line in text.splitlines() or [""]:
            name, eq, value = line.partition("=")
            name = name.strip()
            if not eq or not name:
                raise ValueError(f"expected {what}NAME=VALUE")
            if what and any(c not in _HEADER_CHARS for c in name.lower()):
                raise ValueError(f"header name {name!r}: letters, digits, '-', '_' or '.' only")
            pairs.append((name.lower() if what else name, value))
        return tuple(pairs)

    return parse


_HEADER_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")
#: Options a flag given again adds to, rather than replaces.
REPEATABLE = ("remote-header", "remote-exec-property")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def parse_bool(text: str) -> bool:
    s = text.strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ValueError(f"not a boolean: {text!r} (use 1/0, true/false, yes/no, on/off)")


def _compiler_check(text: str) -> str:
    """content, mtime, string:VALUE, or a command (split like a shell would, when used)."""
    value = text.strip()
    if value in ("content", "mtime") or (value.startswith("string:") and len(value) > 7):
        return value
    import shlex

    try:
        words = shlex.split(value)
    except ValueError as e:
        raise ValueError(f"cannot split the command {value!r}: {e}") from None
    if not words or value == "string:":
        raise ValueError("expected content, mtime, string:VALUE or a command")
    return value


class OptionSpec:
    """One option: its flag, variable, config key, parser and help."""

    __slots__ = ("convert", "help", "metavar", "name", "short")

    def __init__(
        self,
        name: str,  # long flag without dashes; also the config-file key
        help: str,
        convert: Callable[[str], Any] | None = None,  # None: a flag (boolean)
        metavar: str = "",
        short: str = "",
    ) -> None:
        self.name = name
        self.help = help
        self.convert = convert
        self.metavar = metavar
        self.short = short

    @property
    def flag(self) -> str:
        return "--" + self.name

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "CACHED_DIST_" + ("DIR" if self.name == "cache-dir" else self.dest.upper())


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("jobs", "backend compilations run at once, and processes a large full hit may "
               "use (default: CPUs this process may use)", _positive_int, "N", "-j"),
    OptionSpec("verbose", "a line per job: where its object came from, and how long it took",
               short="-v"),
    OptionSpec("quiet", "no summary line; warnings and errors still print", short="-q"),
    OptionSpec("progress", "show progress even when stderr is not a terminal (occasional lines)"),
    OptionSpec("debug", "show Python tracebacks for errors"),
    OptionSpec("no-fallback", "do not compile locally what the inner distributor (or Dask) "
               "failed to do"),
    OptionSpec("cache-dir", "cache directory (default: $XDG_CACHE_HOME/cached-dist)", _path, "DIR"),
    OptionSpec("max-size", "cache size limit, e.g. 500M, 5G, 5Gi (default: 5Gi)", parse_size,
               "SIZE"),
    OptionSpec("disable", "do not read or write the cache: a plain distributor"),
    OptionSpec("group-shared", "create the cache for a group: setgid dirs, group-writable files"),
    OptionSpec("hard-link", "serve hits as hard links to the cache's verified files instead of "
               "copies (faster; see the guide for the caveat)"),
    OptionSpec("verify-hits", "recompile this fraction of hits and compare bytes (default: 0)",
               _fraction, "FRACTION"),
    # --compiler-check (issue 15): how the backend compiler is identified in keys.
    OptionSpec("compiler-check", "how the compiler is identified: content (default), mtime, "
               "string:VALUE, or a command such as '%compiler% --version'", _compiler_check,
               "CHECK"),
    # The Dask runner (cached_dist/runners/dask.py)
    OptionSpec("dask-scheduler", "compile misses on the Dask cluster at ADDRESS, e.g. "
               "tcp://host:8786 (needs cached-dist[dask])", _address, "ADDRESS"),
    OptionSpec("dask-timeout", "longest wait for a link's jobs on Dask; the rest compile here "
               "(default: 900)", _seconds, "SECONDS"),
    OptionSpec("dask-resident-idle", "seconds the resident Dask client waits for another link "
               "before it exits; 0: no resident client (default: 600)", idle_seconds,
               "SECONDS"),
    OptionSpec("compression-level", "zstd level of the values sent to remote tiers, 1-19; 0: "
               "off (default: 1)", _compression_level, "N"),
    OptionSpec("local-compression-level", "zstd level of the objects the local store keeps, "
               "1-19; 0: off (default: 1; --hard-link keeps its files uncompressed)",
               _compression_level, "N"),
    OptionSpec("remote-storage", "remote cache tier(s) after the local one: redis://, rediss://, "
               "http://, https://, grpc://, grpcs://, unix: (REAPI) URLs, space-separated; "
               "several servers in one tier: 'redis://a/0|redis://b/0' (see the guide)",
               _remote_urls, "URL"),
    # REAPI (store/remote/reapi.py, cached_dist/runners/reapi.py)
    OptionSpec("remote-instance-name", "instance name on REAPI servers (default: none)", str,
               "NAME"),
    OptionSpec("remote-header", "a header sent to REAPI servers, e.g. an API key; repeatable "
               "(one a line in the variable)", _pairs("header "), "NAME=VALUE"),
    OptionSpec("remote-executor", "compile misses on the REAPI server at URL (grpc://, grpcs://, "
               "unix:); without --remote-storage it is also the remote cache tier (needs "
               "cached-dist[reapi])", _reapi_url, "URL"),
    OptionSpec("remote-exec-property", "a platform property of executed actions, e.g. "
               "container-image=docker://...; repeatable", _pairs(""), "KEY=VALUE"),
    OptionSpec("remote-exec-timeout", "longest wait for a link's jobs on the REAPI executor; "
               "the rest compile here (default: 900)", _seconds, "SECONDS"),
    OptionSpec("remote-read-only", "read the remote tier but never write to it (nor claim)"),
    OptionSpec("remote-connect-timeout", "seconds to connect to a remote (default: 0.1)",
               _seconds, "SECONDS"),
    OptionSpec("remote-timeout", "seconds a remote operation may take (default: 2)", _seconds,
               "SECONDS"),
    # The warm server started on first use (cached_dist/serve/autostart.py).
    OptionSpec("no-server", "do not start the warm server after a link through its client "
               "when none is running"),
    OptionSpec("server-idle-exit", "seconds a warm server started after a link waits for "
               "another before it exits; 0: never (default: 600)", idle_seconds, "SECONDS"),
    OptionSpec("remote-signing-key", "sign what is uploaded with the key in FILE (HMAC-SHA256) "
               "and use only remote values signed with it; FILE must not be readable by others",
               _signing_key, "FILE"),
    OptionSpec("remote-expiry", "Redis values expire when not used for AGE (7d, 12h, ...), "
               "refreshed on each hit (default: never)", parse_age, "AGE"),
    OptionSpec("stats-log", "append one JSON line per link to FILE (what it did, for "
               "dashboards and for checking that a build's links all came through here)", _path,
               "FILE"),
    OptionSpec("config", "TOML config file (default: $XDG_CONFIG_HOME/cached-dist/config.toml)",
               _path, "FILE"),
)  # fmt: skip
BY_FLAG = {spec.flag: spec for spec in OPTIONS} | {s.short: s for s in OPTIONS if s.short}
BY_NAME = {spec.name: spec for spec in OPTIONS}


class Options:
    """Resolved settings for one run."""

    def __init__(
        self,
        *,
        jobs: int | None = None,  # None: default_jobs()
        verbose: bool = False,
        quiet: bool = False,
        progress: bool = False,
        debug: bool = False,
        no_fallback: bool = False,
        cache_dir: str = "",
        max_size: int = DEFAULT_MAX_SIZE,
        disable: bool = False,
        group_shared: bool = False,
        hard_link: bool = False,
        verify_hits: float = 0.0,
        compiler_check: str = "content",
        compression_level: int = 1,
        local_compression_level: int = 1,  # 0: plain blobs (--hard-link keeps them plain)
        remote_storage: tuple[str, ...] = (),
        remote_read_only: bool = False,
        remote_connect_timeout: float = 0.1,
        remote_timeout: float = 2.0,
        no_server: bool = False,
        server_idle_exit: float = DEFAULT_SERVER_IDLE_EXIT,  # 0: the started server never exits
        remote_signing_key: str = "",  # "": values are neither signed nor checked
        remote_expiry: float = 0.0,  # 0: Redis values never expire (the server evicts)
        remote_instance_name: str = "",
        remote_header: tuple[tuple[str, str], ...] = (),  # (name, value): never printed
        remote_executor: str = "",  # "": no REAPI runner
        remote_exec_property: tuple[tuple[str, str], ...] = (),
        remote_exec_timeout: float = DEFAULT_DASK_TIMEOUT,
        config: str = "",
        stats_log: str = "",  # "": no per-link log
        dask_scheduler: str = "",  # "": no Dask runner
        dask_timeout: float = DEFAULT_DASK_TIMEOUT,
        dask_resident_idle: float = DEFAULT_DASK_RESIDENT_IDLE,  # 0: no resident client
        inner: tuple[str, ...] = (),  # the wrapped distributor's command; () = local runner
    ) -> None:
        self.jobs = default_jobs() if jobs is None else jobs
        self.verbose = verbose
        self.quiet = quiet
        self.progress = progress
        self.debug = debug
        self.no_fallback = no_fallback
        self.cache_dir = cache_dir
        self.max_size = max_size
        self.disable = disable
        self.group_shared = group_shared
        self.hard_link = hard_link
        self.verify_hits = verify_hits
        self.compiler_check = compiler_check
        self.compression_level = compression_level
        self.local_compression_level = local_compression_level
        self.remote_storage = remote_storage
        self.remote_read_only = remote_read_only
        self.remote_connect_timeout = remote_connect_timeout
        self.remote_timeout = remote_timeout
        self.no_server = no_server
        self.server_idle_exit = server_idle_exit
        self.remote_signing_key = remote_signing_key
        self.remote_expiry = remote_expiry
        self.remote_instance_name = remote_instance_name
        self.remote_header = remote_header
        self.remote_executor = remote_executor
        self.remote_exec_property = remote_exec_property
        self.remote_exec_timeout = remote_exec_timeout
        self.config = config
        self.stats_log = stats_log
        self.dask_scheduler = dask_scheduler
        self.dask_timeout = dask_timeout
        self.dask_resident_idle = dask_resident_idle
        self.inner = inner


def parse_flags(args: Sequence[str], command: str = "") -> dict[str, Any]:
    """Parses option words (``--jobs 4``, ``--jobs=4``, ``-j4``, ``--quiet``) into dest -> value;
    ``command``: the command they were given to (its name in the errors), "" for a link."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(args):
        word = args[i]
        flag, eq, attached = word.partition("=")
        if not eq and len(word) > 2 and word[:2] in BY_FLAG and not word.startswith("--"):
            flag, attached, eq = word[:2], word[2:], "="  # -j4
        spec = BY_FLAG.get(flag)
        if spec is None:
            see = f"cached-dist {command} --help" if command else "cached-dist --help"
            if word.startswith("-"):
                raise UsageError(f"unknown option {word!r} (see {see})")
            if command:
                raise UsageError(f"{command}: unexpected argument {word!r} (see {see})")
            raise UsageError(
                f"unexpected argument {word!r}: options go before the job file, "
                "an inner distributor after '--'"
            )
        if spec.convert is None:
            if eq:
                raise UsageError(f"option {spec.flag} takes no value")
            values[spec.dest] = True
        else:
            if not eq:
                i += 1
                if i >= len(args):
                    raise UsageError(f"option {spec.flag} needs a value ({spec.metavar})")
                attached = args[i]
            try:
                value = spec.convert(attached)
            except ValueError as e:
                raise UsageError(f"option {spec.flag}: {e}") from None
            values[spec.dest] = (
                values.get(spec.dest, ()) + value if spec.name in REPEATABLE else value
            )
        i += 1
    return values


def from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for spec in OPTIONS:
        text = environ.get(spec.env)
        if text is None:
            continue
        try:
            values[spec.dest] = parse_bool(text) if spec.convert is None else spec.convert(text)
        except ValueError as e:
            raise UsageError(f"environment variable {spec.env}: {e}") from None
    return values


def config_table(path: str, *, required: bool) -> dict[str, Any]:
    """The TOML file's table; a missing default file is fine (empty), a missing named one is not."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        if required:
            raise UsageError(f"config file not found: {path}") from None
        return {}
    except OSError as e:
        raise UsageError(f"cannot read config file {path}: {e.strerror}") from None
    import tomllib  # only when a config file exists

    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"config file {path}: invalid TOML: {e}") from None


def from_config_file(path: str, *, required: bool) -> dict[str, Any]:
    """Reads the TOML file's options; a missing default file is fine, a missing named one is not."""
    values: dict[str, Any] = {}
    for key, value in config_table(path, required=required).items():
        if key == "base-dir":  # the compiler launcher's (cached_dist/launcher), not a link's
            continue
        if key == "inner":
            if (
                not isinstance(value, list)
                or not value
                or not all(isinstance(v, str) for v in value)
            ):
                raise UsageError(f"config file {path}: 'inner' must be a non-empty list of strings")
            values["inner"] = tuple(value)
            continue
        spec = BY_NAME.get(key)
        if spec is None or key == "config":
            raise UsageError(f"config file {path}: unknown key {key!r}")
        try:
            values[spec.dest] = _config_value(spec, value)
        except ValueError as e:
            raise UsageError(f"config file {path}: {key}: {e}") from None
    return values


def _config_value(spec: OptionSpec, value: object) -> Any:
    if spec.convert is None:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if spec.name == "remote-storage" and isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise ValueError("expected a list of URLs")
        value = " ".join(value)
    if spec.name in REPEATABLE and isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise ValueError("expected a list of NAME=VALUE strings")
        value = "\n".join(value)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected a string or number, got {value!r}")
    return spec.convert(str(value))


def resolve(
    flags: Sequence[str], inner: Sequence[str], environ: Mapping[str, str], command: str = ""
) -> Options:
    """Merges default < config file < environment < command line (``command``: see
    :func:`parse_flags`)."""
    cli = parse_flags(flags, command)
    env = from_environment(environ)
    config_path = cli.get("config") or env.get("config")
    file_values = from_config_file(
        config_path or default_config_file(environ), required=bool(config_path)
    )
    merged: dict[str, Any] = {**file_values, **env, **cli}
    if inner:
        merged["inner"] = tuple(inner)
    options = Options(**merged)
    if options.inner and options.dask_scheduler:
        raise UsageError("--dask-scheduler and an inner distributor cannot be used together")
    if options.remote_executor and (options.inner or options.dask_scheduler):
        other = "--dask-scheduler" if options.dask_scheduler else "an inner distributor"
        raise UsageError(f"--remote-executor and {other} cannot be used together")
    if options.remote_signing_key:  # the executor is the tier when none is named
        executor = (options.remote_executor,) if options.remote_executor else ()
        _check_signable(options.remote_storage or executor)
    if not options.cache_dir:
        options.cache_dir = default_cache_dir(environ)
    if options.quiet:
        options.verbose = False
    return options


def help_text() -> str:
    lines = [
        "usage: cached-dist [OPTIONS] [-- INNER_DISTRIBUTOR [INNER_ARGS...]] JOBFILE",
        "       cached-dist {stats,clear,trim,verify,flags,serve} [OPTIONS]",
        "",
        "A caching distributor for LLVM DTLTO: link with",
        "  clang ... $(cached-dist flags) [-Xthinlto-distributor=OPTION,...]",
        "",
        "options (command line > environment > config file > default):",
    ]
    for spec in OPTIONS:
        left = ", ".join(x for x in (spec.short, spec.flag) if x)
        if spec.metavar:
            left += " " + spec.metavar
        lines.append(f"  {left:<26} {spec.help}")
        lines.append(f"  {'':<26} env {spec.env}")
    lines += [
        "  -h, --help                 show this help",
        "  --version                  show the version",
        "",
        "commands:",
        "  stats [--json]             cache statistics",
        "  clear                      empty the cache",
        "  trim [--max-size SIZE]     evict least recently used entries down to SIZE",
        "  verify                     re-hash every stored blob, drop corrupt ones",
        '  flags [--cc COMPILER]      print the link flags: LDFLAGS="$(cached-dist flags)"',
        "  flags --no-server          the same, without the warm server's client",
        "  serve [--idle-exit SECS]   the warm server: full hits without starting Python",
        "  serve --status | --stop    whether a warm server runs; end it",
    ]
    return "\n".join(lines)
