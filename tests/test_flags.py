"""`cached-dist flags`: the link flags it prints and its check of the compiler, with real drivers."""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cached_dist.serve import CLIENT

from .test_cli import assert_one_line_error
from .toolchain import CLANG, PROGRAMS, cached_dist_exe, requires_toolchain, stats

pytestmark = requires_toolchain

NEEDS = "DTLTO needs clang 21 or later with lld"
requires_clang14 = pytest.mark.skipif(
    shutil.which("clang-14") is None, reason="Debian's clang-14 not installed (run scripts/setup)"
)


def flags(
    *args: str, cwd: Path, exe: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Runs the installed console script with CC/CXX only as given (nothing inherited)."""
    base = {k: v for k, v in os.environ.items() if k not in {"CC", "CXX"}}
    return subprocess.run(
        [exe or cached_dist_exe(), "flags", *args], cwd=cwd, capture_output=True, text=True,
        env={**base, **env},
    )  # fmt: skip


@pytest.mark.skipif(not os.access(CLIENT, os.X_OK), reason="the client is not built")
def test_prints_the_link_flags_for_a_dtlto_capable_clang(tmp_path: Path) -> None:
    """Through the warm server's client by default, cached-dist its first word; the same
    with --server; cached-dist itself with --no-server."""
    exe = os.path.abspath(cached_dist_exe())
    for args in ([], ["--server"]):
        done = flags(*args, cwd=tmp_path, CC=str(CLANG), CXX=f"{CLANG}++")
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        assert done.stdout == (f"-fuse-ld=lld -flto=thin -fthinlto-distributor={CLIENT} "
                               f"-Xthinlto-distributor={exe}\n")  # fmt: skip
    done = flags("--no-server", cwd=tmp_path, CC=str(CLANG), CXX=f"{CLANG}++")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout == f"-fuse-ld=lld -flto=thin -fthinlto-distributor={exe}\n"
    done = flags("--server", "--no-server", cwd=tmp_path, CC=str(CLANG))
    assert_one_line_error(done, 2, "--server and --no-server cannot be combined")


def test_without_the_client_the_flags_name_cached_dist_itself(tmp_path: Path) -> None:
    """Where the client was not built (no C compiler at install time), the flags are the
    plain ones, and nothing is said: the warm path is an optimisation. Here a copy of the
    package without it."""
    import importlib

    for name in ("cached_dist", "store", "procs"):
        source = Path(importlib.import_module(name).__file__ or "").parent
        shutil.copytree(source, tmp_path / "lib" / name, ignore=shutil.ignore_patterns(
            "cached-dist-client", "__pycache__"))  # fmt: skip
    exe = tmp_path / "cached-dist"
    exe.write_text(f"#!{sys.executable}\nfrom cached_dist.cli import run\nrun()\n")
    exe.chmod(0o755)
    lib = str(tmp_path / "lib")
    done = flags(cwd=tmp_path, exe=str(exe), CC=str(CLANG), PYTHONPATH=lib)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout == f"-fuse-ld=lld -flto=thin -fthinlto-distributor={exe}\n"
    done = flags("--server", cwd=tmp_path, exe=str(exe), CC=str(CLANG), PYTHONPATH=lib)
    assert_one_line_error(done, 2, "the warm server's client")


def test_options_are_checked_and_passed_through_with_absolute_paths(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text("jobs = 2\n")  # ~/c.toml, HOME being tmp_path
    done = flags("--jobs", "4", "--cache-dir=cache", "-q", "--config", "~/c.toml",
                 "--", "python3", "my dist.py", cwd=tmp_path, CC=str(CLANG),
                 HOME=str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    words = shlex.split(done.stdout)
    assert words[4:] == [
        "-Xthinlto-distributor=--jobs",
        "-Xthinlto-distributor=4",
        f"-Xthinlto-distributor=--cache-dir={tmp_path / 'cache'}",
        "-Xthinlto-distributor=-q",
        "-Xthinlto-distributor=--config",
        f"-Xthinlto-distributor={tmp_path / 'c.toml'}",
        "-Xthinlto-distributor=--,python3,my dist.py",
    ]
    assert "'-Xthinlto-distributor=--,python3,my dist.py'" in done.stdout  # quoted for a shell


def test_cc_option_wins_over_the_environment(tmp_path: Path) -> None:
    done = flags("--cc", str(CLANG), cwd=tmp_path, CC="no-such-compiler")
    assert done.returncode == 0, done.stderr
    done = flags(cwd=tmp_path, CC=f"'{CLANG}' --target=x86_64-linux-gnu")  # words, shell-split
    assert done.returncode == 0, done.stderr
    done = flags(cwd=tmp_path, CC=f"{CLANG} --no-such-flag")
    assert_one_line_error(
        done, 2, "cannot do DTLTO: clang: error: unknown argument: '--no-such-flag'"
    )
    done = flags(f"--cc={CLANG}", "--cc", "no-such-compiler", cwd=tmp_path)
    assert_one_line_error(done, 2, "compiler 'no-such-compiler' not found")


@requires_clang14
def test_an_old_clang_is_one_line_error(tmp_path: Path) -> None:
    done = flags(cwd=tmp_path, CC="clang-14")
    assert_one_line_error(done, 2, f"clang-14 (Debian clang version 14.0.6) cannot link through "
                                   f"a distributor: {NEEDS}")  # fmt: skip
    assert done.stdout == ""


@requires_clang14
def test_cxx_is_checked_too(tmp_path: Path) -> None:
    done = flags(cwd=tmp_path, CC=str(CLANG), CXX="clang++-14")
    assert_one_line_error(done, 2, "clang++-14 (Debian clang version 14.0.6) cannot link")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_gcc_is_one_line_error(tmp_path: Path) -> None:
    assert_one_line_error(flags(cwd=tmp_path, CC="gcc"), 2, f"cannot link through a distributor: "
                                                             f"{NEEDS}")  # fmt: skip


def test_a_clang_that_cannot_find_lld_is_one_line_error(tmp_path: Path) -> None:
    lonely = tmp_path / "bin" / "clang"  # a real clang 22 with no ld.lld beside it or on PATH
    lonely.parent.mkdir()
    shutil.copy(CLANG.resolve(), lonely)
    done = flags(cwd=tmp_path, CC=str(lonely), PATH="/usr/bin:/bin")
    assert_one_line_error(done, 2, "cannot find lld for -fuse-ld=lld")


@pytest.mark.skipif(not Path("/usr/bin/clang-22").exists(), reason="not Debian's clang-22")
def test_debians_clang_22_finds_its_own_lld_without_ld_lld_on_path(tmp_path: Path) -> None:
    for name in ("clang-22", "clang++-22"):  # a PATH with no ld.lld at all
        (tmp_path / name).symlink_to(Path("/usr/bin") / name)
    done = flags(cwd=tmp_path, CC="clang-22", CXX="clang++-22", PATH=str(tmp_path))
    assert done.returncode == 0, done.stderr


def test_clang_on_path_is_the_default(tmp_path: Path) -> None:
    done = flags(cwd=tmp_path, PATH=str(tmp_path))  # nothing else: Debian names it clang-22
    assert_one_line_error(
        done, 2, f"compiler 'clang' not found: set CC or --cc to a clang ({NEEDS})"
    )
    (tmp_path / "clang").symlink_to(CLANG)
    done = flags(cwd=tmp_path, PATH=str(tmp_path))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["--jobs", "0"], "option --jobs: must be at least 1"),
        (["--cache-dir=/a,b"], "'--cache-dir=/a,b' contains a comma, which clang would split"),
        (["--", "dist,py"], "'dist,py' contains a comma"),
        (["--"], "'--' must be followed by the inner distributor's command"),
        (["--cc"], "option --cc needs a value (COMPILER)"),
        (["--cc="], "empty compiler name"),
    ],
)
def test_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    assert_one_line_error(flags(*args, cwd=tmp_path, CC=str(CLANG)), 2, message)


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_a_distributor_path_with_spaces_survives_make(tmp_path: Path) -> None:
    """The shell quoting is what make (and CMake's generators) pass on to sh; options reach links."""
    spaced = tmp_path / "my tools" / "cached-dist"
    spaced.parent.mkdir()
    spaced.symlink_to(cached_dist_exe())
    done = flags(
        "--jobs", "2", "--cache-dir=my cache", cwd=tmp_path, exe=str(spaced), CC=str(CLANG)
    )
    assert done.returncode == 0, done.stderr
    # The client's first argument by default (the distributor itself where it is not built).
    word = "-Xthinlto-distributor" if os.access(CLIENT, os.X_OK) else "-fthinlto-distributor"
    assert f"'{word}={spaced}'" in done.stdout
    assert f"'-Xthinlto-distributor=--cache-dir={tmp_path}/my cache'" in done.stdout
    project = tmp_path / "tally"
    shutil.copytree(PROGRAMS / "tally", project)
    build = subprocess.run(
        ["make", f"CC={CLANG}", f"CXX={CLANG}++", "CFLAGS=-O2 -flto=thin",
         "CXXFLAGS=-O2 -flto=thin"],
        cwd=project, capture_output=True, text=True,
        env={**os.environ, "CACHED_DIST_DIR": str(tmp_path / "not used"), "MAKEFLAGS": "",
             "LDFLAGS": done.stdout.strip()},  # as the guide's recipe: fixed.mk adds to it
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    assert "cached-dist: 4 jobs: 0 hits, 4 compiled" in build.stderr
    assert stats(tmp_path / "my cache")["misses"] == 5  # the option won over the environment
    assert not (tmp_path / "not used").exists()
    ran = subprocess.run(["./tally"], cwd=project, capture_output=True, text=True)
    assert ran.stdout == (PROGRAMS / "tally" / "expected.txt").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config=/nonexistent.toml"], "config file not found: /nonexistent.toml"),
        (["--dask-scheduler", "banana"],
         "option --dask-scheduler: not a scheduler address: 'banana', which needs HOST:PORT"),
        (["--dask-scheduler", "http://h:1"], "option --dask-scheduler: unknown scheme 'http://'"),
        (["--remote-storage", "ftp://h/x"], "option --remote-storage"),
        (["--max-size", "lots"], "option --max-size: not a size: 'lots'"),
    ],
)  # fmt: skip
def test_flags_checks_everything_it_bakes_in(tmp_path: Path, args: list[str], message: str) -> None:
    assert_one_line_error(flags(*args, cwd=tmp_path, CC=str(CLANG)), 2, message)


def test_flags_checks_what_the_links_will_read_from_the_environment(tmp_path: Path) -> None:
    done = flags(cwd=tmp_path, CC=str(CLANG), CACHED_DIST_CONFIG=str(tmp_path / "none.toml"))
    assert_one_line_error(done, 2, f"config file not found: {tmp_path / 'none.toml'}")


def test_libtool_form_passes_everything_to_lld_itself(tmp_path: Path) -> None:
    """What libtool passes on: linker options only, the backend compiler named."""
    args = ["--libtool", "--jobs=2", "--", "python3", "d.py"]
    done = flags("--no-server", *args, cwd=tmp_path, CC=str(CLANG))
    assert done.returncode == 0, done.stderr
    rest = [f"-Wl,--thinlto-remote-compiler={CLANG}", "-Wl,--thinlto-distributor-arg=--jobs=2",
            "-Wl,--thinlto-distributor-arg=--", "-Wl,--thinlto-distributor-arg=python3",
            "-Wl,--thinlto-distributor-arg=d.py"]  # fmt: skip
    assert shlex.split(done.stdout) == [
        "-fuse-ld=lld", "-flto=thin", f"-Wl,--thinlto-distributor={cached_dist_exe()}", *rest,
    ]  # fmt: skip
    if os.access(CLIENT, os.X_OK):  # the client's form: cached-dist the first argument
        done = flags(*args, cwd=tmp_path, CC=str(CLANG))
        assert done.returncode == 0, done.stderr
        assert shlex.split(done.stdout) == [
            "-fuse-ld=lld", "-flto=thin", f"-Wl,--thinlto-distributor={CLIENT}", rest[0],
            f"-Wl,--thinlto-distributor-arg={cached_dist_exe()}", *rest[1:],
        ]  # fmt: skip


CLANG_CL = CLANG.parent / "clang-cl"
LLD_NEEDS = "DTLTO needs lld-link 21 or later"


@pytest.mark.parametrize("cc", [str(CLANG_CL), f"{CLANG} --target=x86_64-pc-windows-msvc"])
def test_a_driver_that_links_with_lld_link_is_one_line_error(tmp_path: Path, cc: str) -> None:
    """clang's MSVC toolchain runs lld-link without the distributor (LLVM 22 drops it): the
    flags would link in-process, uncached; it says what to use instead."""
    done = flags(cwd=tmp_path, CC=cc)
    assert_one_line_error(done, 2, f"{cc} links Windows targets with lld-link, and its driver "
                                   "does not pass -fthinlto-distributor= on: print lld-link's "
                                   "flags with `cached-dist flags --lld-link`")  # fmt: skip
    assert done.stdout == ""


def test_lld_link_flags(tmp_path: Path) -> None:
    """lld-link's own flags: the backend compiler is the clang clang-cl is (LLD's options are
    clang's spelling), and each option word is one /thinlto-distributor-arg:, commas and
    all (lld-link does not split them)."""
    done = flags("--lld-link", "--no-server", "--cc", str(CLANG_CL), "--jobs", "2",
                 "--cache-dir=c,d", "--",
                 "python3", "my,dist.py", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert shlex.split(done.stdout) == [
        f"/thinlto-distributor:{os.path.abspath(cached_dist_exe())}",
        f"/thinlto-remote-compiler:{CLANG.resolve()}", "/thinlto-distributor-arg:--jobs",
        "/thinlto-distributor-arg:2", f"/thinlto-distributor-arg:--cache-dir={tmp_path}/c,d",
        "/thinlto-distributor-arg:--", "/thinlto-distributor-arg:python3",
        "/thinlto-distributor-arg:my,dist.py",
    ]  # fmt: skip
    done = flags("--lld-link", "--server", cwd=tmp_path, CC=str(CLANG))
    assert done.returncode == 0, done.stderr
    words = shlex.split(done.stdout)
    assert words[0].startswith("/thinlto-distributor:") and words[0].endswith("cached-dist-client")
    assert words[1:] == [f"/thinlto-remote-compiler:{CLANG.resolve()}",
                         f"/thinlto-distributor-arg:{os.path.abspath(cached_dist_exe())}"]  # fmt: skip


@pytest.mark.skipif(not Path("/usr/lib/llvm-14/bin/lld-link").exists(),
                    reason="Debian's lld-14 not installed (run scripts/setup)")  # fmt: skip
def test_an_old_lld_link_is_one_line_error(tmp_path: Path) -> None:
    done = flags("--lld-link", "--cc", "clang-14", cwd=tmp_path)
    assert_one_line_error(done, 2, "/usr/lib/llvm-14/bin/lld-link (Debian LLD 14.0.6) cannot link "
                                   f"through a distributor: {LLD_NEEDS}")  # fmt: skip


def test_lld_link_errors(tmp_path: Path) -> None:
    lonely = tmp_path / "bin"
    lonely.mkdir()
    shutil.copy(CLANG.resolve(), lonely / "clang")  # a real clang 22, no lld-link beside it
    shutil.copy(CLANG.resolve(), lonely / "clang-cl")  # a copy (as on Windows), not a link
    done = flags("--lld-link", "--cc", str(lonely / "clang"), cwd=tmp_path, PATH=str(lonely))
    assert_one_line_error(done, 2, f"cannot find lld-link beside {lonely / 'clang'} or on PATH")
    (lonely / "clang").unlink()
    done = flags("--lld-link", "--cc", str(lonely / "clang-cl"), cwd=tmp_path)
    assert_one_line_error(done, 2, f"no clang beside {lonely / 'clang-cl'} to compile the "
                                   "backend jobs (clang-cl misreads")  # fmt: skip
    done = flags("--lld-link", cwd=tmp_path, CC="no-such-cl")
    assert_one_line_error(done, 2, "compiler 'no-such-cl' not found: set CC or --cc to a clang "
                                   f"or clang-cl ({LLD_NEEDS})")  # fmt: skip
    done = flags("--lld-link", "--libtool", cwd=tmp_path, CC=str(CLANG))
    assert_one_line_error(done, 2, "--libtool and --lld-link cannot be combined")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_lld_link_with_gcc_is_one_line_error(tmp_path: Path) -> None:
    done = flags("--lld-link", cwd=tmp_path, CC="gcc")
    assert_one_line_error(done, 2, f"is not clang: {LLD_NEEDS} and clang")
