"""The REAPI options: URL forms, repeatable NAME=VALUE pairs from every source, and each
error's message (which never shows a header's value)."""

from pathlib import Path

import pytest

from cached_dist.errors import UsageError
from cached_dist.options import resolve
from store.remote import scheme


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), **extra}  # fmt: skip


def test_url_forms(tmp_path: Path) -> None:
    urls = ["grpc://cache:8980", "grpcs://remote.example.com:443", "unix:/run/casd.sock",
            "unix:///run/casd.sock"]  # fmt: skip
    o = resolve([f"--remote-storage={' '.join(urls)}", "--remote-executor=grpcs://x:443"], [],
                _env(tmp_path))  # fmt: skip
    assert o.remote_storage == tuple(urls) and o.remote_executor == "grpcs://x:443"
    assert [scheme(u) for u in urls] == ["grpc", "grpcs", "unix", "unix"]


def test_headers_and_properties_repeat_from_every_source(tmp_path: Path) -> None:
    config = tmp_path / "cfg" / "cached-dist" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('remote-header = ["X-From-File=1"]\nremote-exec-property = "pool=big"\n'
                      'remote-instance-name = "team"\n')  # fmt: skip
    o = resolve([], [], _env(tmp_path))
    assert o.remote_header == (("x-from-file", "1"),) and o.remote_exec_property == (
        ("pool", "big"),)  # fmt: skip
    assert o.remote_instance_name == "team"
    env = _env(tmp_path, CACHED_DIST_REMOTE_HEADER="a=1\nb=x=y")
    assert resolve([], [], env).remote_header == (("a", "1"), ("b", "x=y"))
    o = resolve(["--remote-header", "Authorization=Bearer t", "--remote-header=c=3",
                 "--remote-exec-property=container-image=docker://i:1",
                 "--remote-exec-property=OSFamily=Linux"], [], env)  # fmt: skip
    assert o.remote_header == (("authorization", "Bearer t"), ("c", "3"))
    assert o.remote_exec_property == (("container-image", "docker://i:1"), ("OSFamily", "Linux"))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--remote-header=novalue"], "option --remote-header: expected header NAME=VALUE"),
        (["--remote-header==secret"], "option --remote-header: expected header NAME=VALUE"),
        (["--remote-header=bad name=secret"],
         "option --remote-header: header name 'bad name': letters, digits, '-', '_' or '.' only"),
        (["--remote-exec-property=x"], "option --remote-exec-property: expected NAME=VALUE"),
        (["--remote-executor=redis://h:1/0"],
         "option --remote-executor: not a REAPI URL: 'redis://h:1/0' (grpc://HOST:PORT, "
         "grpcs://HOST:PORT or unix:PATH)"),
        (["--remote-executor=ftp://h"], "option --remote-executor: not a remote storage URL"),
        (["--remote-executor=grpc://h:1", "--dask-scheduler=tcp://h:8786"],
         "--remote-executor and --dask-scheduler cannot be used together"),
        (["--remote-exec-timeout=0"],
         "option --remote-exec-timeout: must be a positive number of seconds, got 0"),
    ],
)  # fmt: skip
def test_errors(tmp_path: Path, flags: list[str], message: str) -> None:
    with pytest.raises(UsageError) as e:
        resolve(flags, [], _env(tmp_path))
    assert str(e.value).startswith(message), str(e.value)
    assert "secret" not in str(e.value)


def test_executor_with_an_inner_distributor(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as e:
        resolve(["--remote-executor=unix:/s"], ["inner-dist"], _env(tmp_path))
    assert str(e.value) == "--remote-executor and an inner distributor cannot be used together"


def test_a_malformed_url_is_one_warning(tmp_path: Path) -> None:
    """unix: with a relative path, grpc:// without a host: the tier cannot open, the link goes
    on (the message comes from store.remote.reapi)."""
    from store.remote import RemoteError
    from store.remote.reapi import ReapiStorage

    for url, why in (("unix:relative.sock", "a unix: URL needs an absolute socket path"),
                     ("grpc://", "expected grpc://HOST:PORT or grpcs://HOST:PORT")):  # fmt: skip
        with pytest.raises(RemoteError) as e:
            ReapiStorage(url, connect_timeout=0.1, timeout=1)
        assert str(e.value).startswith(why)
