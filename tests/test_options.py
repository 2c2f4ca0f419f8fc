"""Option precedence (command line > environment > config file > default) and its errors."""

from pathlib import Path

import pytest

from cached_dist.errors import UsageError
from cached_dist.options import (
    DEFAULT_MAX_SIZE,
    OPTIONS,
    default_jobs,
    parse_size,
    resolve,
)

DOCS = Path(__file__).parent.parent / "docs"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), **extra}  # fmt: skip


def _config(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cfg" / "cached-dist" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_defaults(tmp_path: Path) -> None:
    o = resolve([], [], _env(tmp_path))
    assert o.jobs == default_jobs() and o.max_size == DEFAULT_MAX_SIZE == 5 * 2**30
    assert o.cache_dir == str(tmp_path / "cache" / "cached-dist")
    assert not (o.verbose or o.quiet or o.debug or o.no_fallback or o.disable or o.group_shared)
    assert o.inner == ()


def test_precedence_command_line_over_environment_over_file(tmp_path: Path) -> None:
    _config(tmp_path, 'jobs = 2\nmax-size = "1G"\ncache-dir = "/from/file"\nquiet = true\n')
    env = _env(tmp_path, CACHED_DIST_JOBS="3", CACHED_DIST_DIR="/from/env")
    o = resolve(["--jobs", "4"], [], env)
    assert (o.jobs, o.cache_dir, o.max_size, o.quiet) == (4, "/from/env", 10**9, True)
    o = resolve([], [], env)
    assert o.jobs == 3
    o = resolve(["--jobs=5", "--cache-dir=/cli"], [], env)
    assert (o.jobs, o.cache_dir) == (5, "/cli")


def test_flags_from_environment_and_short_forms(tmp_path: Path) -> None:
    env = _env(tmp_path, CACHED_DIST_DISABLE="1", CACHED_DIST_QUIET="yes",
               CACHED_DIST_NO_FALLBACK="on", CACHED_DIST_VERIFY_HITS="0.25")  # fmt: skip
    o = resolve(["-j3", "-v"], [], env)
    assert o.disable and o.quiet and o.no_fallback and o.jobs == 3
    assert not o.verbose  # --quiet wins over --verbose
    assert o.verify_hits == 0.25


def test_config_file_named_explicitly_and_inner_command(tmp_path: Path) -> None:
    cfg = tmp_path / "my.toml"
    cfg.write_text('inner = ["python3", "dist.py"]\nno-fallback = true\n')
    o = resolve(["--config", str(cfg)], [], _env(tmp_path))
    assert o.inner == ("python3", "dist.py") and o.no_fallback
    o = resolve([], ["other"], _env(tmp_path, CACHED_DIST_CONFIG=str(cfg)))
    assert o.inner == ("other",)  # the command line's inner distributor wins


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--frobnicate"], {}, "unknown option '--frobnicate'"),
        (["--jobs"], {}, "option --jobs needs a value (N)"),
        (["--jobs", "zero"], {}, "option --jobs: not a whole number: 'zero'"),
        (["--jobs=0"], {}, "option --jobs: must be at least 1, got 0"),
        (["--quiet=1"], {}, "option --quiet takes no value"),
        (["--max-size", "lots"], {}, "option --max-size: not a size: 'lots'"),
        (["--verify-hits", "2"], {}, "option --verify-hits: must be between 0 and 1"),
        ([], {"CACHED_DIST_JOBS": "-1"}, "environment variable CACHED_DIST_JOBS: must be at least 1"),
        ([], {"CACHED_DIST_DISABLE": "maybe"}, "environment variable CACHED_DIST_DISABLE: not a boolean"),
        (["--config", "/nonexistent.toml"], {}, "config file not found: /nonexistent.toml"),
    ],
)  # fmt: skip
def test_option_errors(tmp_path: Path, flags: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as e:
        resolve(flags, [], _env(tmp_path, **env))
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jobs = ", "invalid TOML"),
        ("colour = 1", "unknown key 'colour'"),
        ("quiet = 1", "quiet: expected true or false"),
        ("jobs = 0", "jobs: must be at least 1"),
        ("jobs = [1]", "jobs: expected a string or number"),
        ("inner = []", "'inner' must be a non-empty list of strings"),
    ],
)
def test_config_file_errors(tmp_path: Path, text: str, message: str) -> None:
    _config(tmp_path, text)
    with pytest.raises(UsageError) as e:
        resolve([], [], _env(tmp_path))
    assert "config.toml" in str(e.value) and message in str(e.value)


@pytest.mark.parametrize(
    ("text", "size"),
    [("0", 0), ("1234", 1234), ("5G", 5 * 10**9), ("5Gi", 5 * 2**30), ("500M", 5 * 10**8),
     ("1.5KiB", 1536), ("2t", 2 * 10**12), ("10MB", 10**7)],
)  # fmt: skip
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "G", "-1G", "5X", "1e", "nan"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_every_option_is_documented() -> None:
    reference = (DOCS / "reference.md").read_text()
    for spec in OPTIONS:
        assert f"`{spec.flag}" in reference, spec.flag
        assert f"`{spec.env}`" in reference, spec.env
