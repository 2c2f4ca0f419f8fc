"""cached-dist-cc, the compiler launcher (cached_dist/launcher/cc.c), and `flags --launcher`.

What it rewrites and what it leaves alone is checked with ``--print`` against real directories
(a path is rewritten only when the relative one names the same file, so the trees are real);
the base directory it finds in git checkouts and CMake build trees; each error; and real
clang-22 compiles in two checkouts at different paths, whose bitcode is the same bytes only
through the launcher.
"""

import os
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cached_dist import launcher
from cached_dist.bitcode.source_name import source_filename
from cached_dist.errors import UsageError

from .test_cli import assert_one_line_error
from .toolchain import CLANG, PROGRAMS, cached_dist_exe, requires_toolchain

LAUNCHER = launcher.LAUNCHER
pytestmark = pytest.mark.skipif(
    not os.access(LAUNCHER, os.X_OK), reason="cached-dist-cc not built (run scripts/setup)"
)
USAGE = "usage: cached-dist-cc [--base-dir=DIR] [--prefix-map[=NAME]] [--print] COMPILER [ARGS...]"


def launch(*args: str | Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Runs the launcher with CACHED_DIST_BASE_DIR only as given."""
    base = {k: v for k, v in os.environ.items() if k != "CACHED_DIST_BASE_DIR"}
    return subprocess.run([LAUNCHER, *map(str, args)], cwd=cwd, env={**base, **env},
                          capture_output=True, text=True)  # fmt: skip


def printed(*args: str | Path, cwd: Path, **env: str) -> list[str]:
    """The command the launcher would run (``--print``), as words."""
    done = launch("--print", *args, cwd=cwd, **env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return shlex.split(done.stdout)


def launcher_error(done: subprocess.CompletedProcess[str], status: int, text: str) -> None:
    assert done.returncode == status, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("cached-dist-cc: error: ") and text in lines[0], lines[0]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git checkout's top directory (``.git``), with sources and an empty build directory."""
    top = tmp_path / "work" / "proj"
    for d in (".git", "src", "include", "build", "bin"):
        (top / d).mkdir(parents=True)
    (top / "src" / "a.c").write_text("int a(void) { return 1; }\n")
    (top / "include" / "c.h").write_text("#define C 1\n")
    (top / "prof.profdata").write_text("")
    (top / "bin" / "clang").write_text("")
    return top


def test_paths_under_the_checkout_become_relative_to_the_working_directory(
    checkout: Path,
) -> None:
    co, b = checkout, checkout / "build"
    args = ["clang", "-DX=1", f"-I{co}/include", "-I", f"{co}/include", "-isystem",
            f"{co}/include", f"-isystem{co}/include", f"-iquote{co}/include", "-iquote",
            f"{co}/include", "-idirafter", f"{co}/include", f"-idirafter{co}/include",
            "-include", f"{co}/include/c.h", f"-include{co}/include/c.h", "-imacros",
            f"{co}/include/c.h", f"-imacros{co}/include/c.h", "-MD", "-MF", f"{b}/a.o.d",
            f"-MF{b}/a.o.d", "-o", f"{b}/a.o", f"-o{b}/a.o", f"-fprofile-use={co}/prof.profdata",
            f"-fprofile-instr-use={co}/prof.profdata", f"-fprofile-sample-use={co}/prof.profdata",
            f"-fprofile-list={co}/prof.profdata", f"-fsanitize-ignorelist={co}/prof.profdata",
            f"-fprofile-remapping-file={co}/prof.profdata", "-c", f"{co}/src/a.c",
            f"{co}//src/./a.c", f"{co}/build/../src/a.c", f"{co}/include", f"{b}"]  # fmt: skip
    assert printed(*args, cwd=b) == [
        "clang", "-DX=1", "-I../include", "-I", "../include", "-isystem", "../include",
        "-isystem../include", "-iquote../include", "-iquote", "../include", "-idirafter",
        "../include", "-idirafter../include", "-include", "../include/c.h",
        "-include../include/c.h", "-imacros", "../include/c.h", "-imacros../include/c.h", "-MD",
        "-MF", "a.o.d", "-MFa.o.d", "-o", "a.o", "-oa.o", "-fprofile-use=../prof.profdata",
        "-fprofile-instr-use=../prof.profdata", "-fprofile-sample-use=../prof.profdata",
        "-fprofile-list=../prof.profdata", "-fsanitize-ignorelist=../prof.profdata",
        "-fprofile-remapping-file=../prof.profdata", "-c", "../src/a.c", "../src/a.c",
        "../src/a.c", "../include", ".",
    ]  # fmt: skip
    # From deeper down (CMake's Makefiles generator compiles in the target's directory).
    deep = b / "lib" / "CMakeFiles"
    deep.mkdir(parents=True)
    assert printed("clang", "-c", co / "src" / "a.c", f"-I{b}", cwd=deep) == [
        "clang", "-c", "../../../src/a.c", "-I../..",
    ]  # fmt: skip


def test_what_is_left_alone(checkout: Path, tmp_path: Path) -> None:
    co, b = checkout, checkout / "build"
    (tmp_path / "other.c").write_text("")
    args = [
        "clang", "-c", str(tmp_path / "other.c"), "-I/usr/include", "-isystem", "/usr/include",
        # names of the build tool's targets, not files clang reads
        "-MT", f"{b}/a.o", "-MQ", f"{b}/a.o", f"-MT{b}/a.o",
        # values of options that take one, whatever they look like
        "-D", f"{co}/src/a.c", "-Xclang", f"{co}/src/a.c", "-mllvm", f"{co}/src/a.c",
        "--sysroot", str(co), f"--sysroot={co}", "-isysroot", str(co), "-MJ", f"{b}/a.json",
        # paths the program uses at run time
        f"-fprofile-generate={co}/prof", f"-fprofile-instr-generate={co}/prof",
        # response files, linker and preprocessor pass-throughs, library paths, relative paths
        f"@{co}/args.rsp", f"-Wl,-rpath,{co}/lib", f"-Wp,-MD,{b}/a.d", f"-L{co}/lib", "src/a.c",
        "-", "-o", f"{co}/no-such-dir/a.o",  # an output whose directory does not exist
    ]  # fmt: skip
    assert printed(*args, cwd=b) == args


def test_the_compiler_and_a_second_launcher_are_left_alone(checkout: Path) -> None:
    co, b = checkout, checkout / "build"
    clang = str(co / "bin" / "clang")
    assert printed(clang, "-c", co / "src" / "a.c", cwd=b) == [clang, "-c", "../src/a.c"]
    assert printed("ccache", clang, "-c", co / "src" / "a.c", cwd=b) == [
        "ccache", clang, "-c", "../src/a.c"]  # fmt: skip
    assert printed("/usr/bin/sccache", clang, f"-I{co}/include", cwd=b) == [
        "/usr/bin/sccache", clang, "-I../include"]  # fmt: skip
    assert printed("--", clang, "-c", co / "src" / "a.c", cwd=b) == [clang, "-c", "../src/a.c"]


def test_after_a_double_dash_every_word_is_an_input(checkout: Path) -> None:
    co, b = checkout, checkout / "build"
    assert printed("clang", "-c", "--", co / "src" / "a.c", cwd=b) == [
        "clang", "-c", "--", "../src/a.c"]  # fmt: skip


def test_nothing_is_rewritten_with_working_directory(checkout: Path) -> None:
    co, b = checkout, checkout / "build"
    for flag in (["-working-directory", str(co)], [f"-working-directory={co}"]):
        args = ["clang", *flag, "-c", str(co / "src" / "a.c"), f"-I{co}/include"]
        assert printed(*args, cwd=b) == args


def test_a_relative_path_that_would_name_another_file_is_not_used(checkout: Path) -> None:
    """``link/..`` is where the link points, not ``build``: the lexical rewrite of
    ``build/link/../x.h`` (``x.h``) names another file, so the path stays absolute."""
    co, b = checkout, checkout / "build"
    deep = co / "include" / "deep" / "er"
    deep.mkdir(parents=True)
    (co / "include" / "deep" / "x.h").write_text("")
    (b / "link").symlink_to(deep)
    path = f"{b}/link/../x.h"
    assert printed("clang", "-include", path, cwd=b) == ["clang", "-include", path]
    (b / "x.h").write_text("")  # now the lexical one exists, but is not the same file
    assert printed("clang", "-include", path, cwd=b) == ["clang", "-include", path]


def test_paths_named_through_a_symlink(checkout: Path, tmp_path: Path) -> None:
    """Build tools name paths the way the user did, through symlinks; the working directory
    the launcher sees has them resolved. Both lead to the same relative paths."""
    alias = tmp_path / "alias"
    alias.symlink_to(checkout)
    b = checkout / "build"
    source = alias / "src" / "a.c"
    assert printed("clang", "-c", source, cwd=b) == ["clang", "-c", "../src/a.c"]
    assert printed(f"--base-dir={alias}", "clang", "-c", source, f"-I{checkout}/include",
                   cwd=b) == ["clang", "-c", "../src/a.c", "-I../include"]  # fmt: skip
    assert printed("clang", "-c", source, cwd=alias / "build") == ["clang", "-c", "../src/a.c"]


def test_the_base_is_the_git_checkouts_top(checkout: Path, tmp_path: Path) -> None:
    b = checkout / "build"
    (tmp_path / "other.c").write_text("")
    words = ["clang", "-c", str(checkout / "src" / "a.c"), str(tmp_path / "other.c")]
    assert printed(*words, cwd=b) == ["clang", "-c", "../src/a.c", str(tmp_path / "other.c")]
    (checkout / ".git").rmdir()
    (checkout / ".git").write_text("gitdir: /elsewhere/.git/worktrees/proj\n")  # a worktree
    assert printed(*words, cwd=b) == ["clang", "-c", "../src/a.c", str(tmp_path / "other.c")]


def _cmake_cache(build: Path, home: Path) -> None:
    build.mkdir(parents=True, exist_ok=True)
    (build / "CMakeCache.txt").write_text(
        "# This is the CMakeCache file.\nCMAKE_BUILD_TYPE:STRING=Release\n"
        f"CMAKE_HOME_DIRECTORY:INTERNAL={home}\nCMAKE_COMMAND:INTERNAL=/usr/bin/cmake\n"
    )


def test_a_cmake_build_outside_the_checkout(checkout: Path, tmp_path: Path) -> None:
    """cmake -S proj -B /elsewhere/build: the base is the git top above the CMake source
    directory; the build directory, outside it, is left absolute."""
    build = tmp_path / "out" / "build"
    _cmake_cache(build, checkout)
    sub = build / "lib" / "CMakeFiles"
    sub.mkdir(parents=True)
    (build / "gen.c").write_text("")
    assert printed("clang", "-c", checkout / "src" / "a.c", build / "gen.c", cwd=sub) == [
        "clang", "-c", "../../../../work/proj/src/a.c", str(build / "gen.c")]  # fmt: skip


def test_a_cmake_source_directory_below_the_git_top(checkout: Path) -> None:
    """llvm-project style: CMake's source directory is proj/llvm, sources come from proj/*."""
    (checkout / "llvm").mkdir()
    _cmake_cache(checkout / "build", checkout / "llvm")
    assert printed("clang", "-c", checkout / "src" / "a.c", cwd=checkout / "build") == [
        "clang", "-c", "../src/a.c"]  # fmt: skip


def test_without_git_the_cmake_source_directory_then_the_working_directory(
    tmp_path: Path,
) -> None:
    src, build = tmp_path / "pkg" / "src", tmp_path / "pkg" / "build"
    src.mkdir(parents=True)
    (src / "a.c").write_text("")
    (tmp_path / "pkg" / "top.c").write_text("")
    _cmake_cache(build, src)
    assert printed("clang", "-c", src / "a.c", tmp_path / "pkg" / "top.c", cwd=build) == [
        "clang", "-c", "../src/a.c", str(tmp_path / "pkg" / "top.c")]  # fmt: skip
    (build / "CMakeCache.txt").unlink()  # no CMake, no git: only what is under the directory
    (build / "b.c").write_text("")
    assert printed("clang", "-c", src / "a.c", build / "b.c", cwd=build) == [
        "clang", "-c", str(src / "a.c"), "b.c"]  # fmt: skip


def test_the_environment_and_base_dir_option(checkout: Path, tmp_path: Path) -> None:
    b = checkout / "build"
    (tmp_path / "other.c").write_text("")
    words = ["clang", "-c", str(tmp_path / "other.c")]
    assert printed(*words, cwd=b, CACHED_DIST_BASE_DIR=str(tmp_path)) == [
        "clang", "-c", "../../../other.c"]  # fmt: skip
    assert printed(f"--base-dir={checkout}", *words, cwd=b,
                   CACHED_DIST_BASE_DIR=str(tmp_path)) == words  # fmt: skip
    assert printed("--base-dir", str(tmp_path), *words, cwd=b) == [
        "clang", "-c", "../../../other.c"]  # fmt: skip


def test_prefix_map_on_compiles_only(checkout: Path, tmp_path: Path) -> None:
    b = checkout / "build"
    assert printed("--prefix-map", "clang", "-c", "x.c", cwd=b) == [
        "clang", "-c", "x.c", f"-ffile-prefix-map={checkout}=."]  # fmt: skip
    assert printed("--prefix-map=/proj", "clang", "-S", "x.c", cwd=b) == [
        "clang", "-S", "x.c", f"-ffile-prefix-map={checkout}=/proj"]  # fmt: skip
    link = ["clang", "x.o", "-o", "app"]  # a link: the flag would only be unused there
    assert printed("--prefix-map", *link, cwd=b) == link
    alias = tmp_path / "alias"
    alias.symlink_to(checkout)
    assert printed(f"--base-dir={alias}", "--prefix-map", "clang", "-E", "x.c", cwd=b) == [
        "clang", "-E", "x.c", f"-ffile-prefix-map={alias}=.",
        f"-ffile-prefix-map={checkout}=."]  # fmt: skip


def test_help(tmp_path: Path) -> None:
    done = launch("--help", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith(USAGE + "\n"), done.stdout


def test_errors_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "a=b").mkdir()
    cases = [
        (["--frobnicate", "clang"], 2, f"unknown option: --frobnicate ({USAGE})"),
        ([], 2, f"missing COMPILER ({USAGE})"),
        (["--print"], 2, "missing COMPILER"),
        (["--base-dir"], 2, "option --base-dir needs a value (DIR)"),
        (["--prefix-map=", "clang"], 2, "option --prefix-map= needs a NAME"),
        (["--base-dir=rel", "clang"], 2, "the base directory must be an absolute path, not 'rel'"),
        ([f"--base-dir={tmp_path}/none", "clang"], 2,
         f"base directory {tmp_path}/none: No such file or directory"),
        ([f"--base-dir={tmp_path}/file", "clang"], 2,
         f"base directory {tmp_path}/file: not a directory"),
        ([f"--base-dir={tmp_path}/a=b", "--prefix-map", "clang", "-c", "x.c"], 2,
         f"--prefix-map: the base directory {tmp_path}/a=b holds '=', which "
         "-ffile-prefix-map cannot map"),
        (["no-such-compiler", "-c", "x.c"], 127,
         "cannot run no-such-compiler: No such file or directory"),
        ([str(tmp_path / "file"), "-c", "x.c"], 126,
         f"cannot run {tmp_path}/file: Permission denied"),
    ]  # fmt: skip
    for args, status, text in cases:
        launcher_error(launch(*args, cwd=tmp_path), status, text)
    launcher_error(launch("clang", cwd=tmp_path, CACHED_DIST_BASE_DIR=""), 2,
                   "CACHED_DIST_BASE_DIR is empty: unset it, or name a directory")  # fmt: skip
    launcher_error(launch("clang", cwd=tmp_path, CACHED_DIST_BASE_DIR="rel"), 2,
                   "the base directory must be an absolute path, not 'rel'")  # fmt: skip


_NAMES = st.sampled_from(["a", "b", "a.b", "..x", ".y", "c d", "é", "build"])


@settings(max_examples=60, deadline=None)
@given(target=st.lists(_NAMES, max_size=4), cwd=st.lists(_NAMES, max_size=4))
def test_relative_paths_are_what_python_computes(target: list[str], cwd: list[str]) -> None:
    """For real directories (no symlinks), the rewrite is os.path.relpath."""
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(os.path.realpath(tmp)) / "co"
        source = top.joinpath(*target) / "f.c"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("")
        where = top.joinpath(*cwd)
        where.mkdir(parents=True, exist_ok=True)
        words = printed(f"--base-dir={top}", "clang", "-c", source, f"-I{source.parent}",
                        cwd=where)  # fmt: skip
        assert words == ["clang", "-c", os.path.relpath(source, where),
                         "-I" + os.path.relpath(source.parent, where)]  # fmt: skip


# -- real compiles ---------------------------------------------------------------------


def _two_checkouts(tmp_path: Path) -> list[Path]:
    tops = [tmp_path / "A" / "proj", tmp_path / "BB" / "x" / "proj"]
    for top in tops:
        top.mkdir(parents=True)
        (top / ".git").mkdir()
        (top / "build").mkdir()
        for name in ("sum.c", "counts.h"):
            (top / name).write_text((PROGRAMS / "tally" / name).read_text())
    return tops


def _compile(top: Path, *flags: str, through: bool) -> bytes:
    """sum.c compiled to ThinLTO bitcode by absolute paths, from the build directory."""
    build = top / "build"
    cmd = [str(CLANG), "-flto=thin", "-O2", *flags, f"-I{top}", "-c", str(top / "sum.c"),
           "-o", str(build / "sum.o")]  # fmt: skip
    done = subprocess.run([LAUNCHER, *cmd] if through else cmd, cwd=build, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return (build / "sum.o").read_bytes()


@requires_toolchain
def test_two_checkouts_compile_the_same_bitcode_only_through_the_launcher(
    tmp_path: Path,
) -> None:
    tops = _two_checkouts(tmp_path)
    plain = [_compile(top, through=False) for top in tops]
    assert plain[0] != plain[1]
    assert source_filename(plain[0]) == str(tops[0] / "sum.c")
    launched = [_compile(top, through=True) for top in tops]
    assert launched[0] == launched[1]
    assert source_filename(launched[0]) == "../sum.c"


@requires_toolchain
def test_with_debug_information_the_prefix_map_makes_them_the_same(tmp_path: Path) -> None:
    """-g records the compiler's working directory, which is absolute whatever the paths."""
    tops = _two_checkouts(tmp_path)
    relative_only = [_compile(top, "-g", through=True) for top in tops]
    assert relative_only[0] != relative_only[1]
    mapped = []
    for top in tops:
        build = top / "build"
        done = launch("--prefix-map", CLANG, "-flto=thin", "-O2", "-g", "-c", top / "sum.c",
                      "-o", build / "sum.o", cwd=build)  # fmt: skip
        assert done.returncode == 0, done.stderr
        mapped.append((build / "sum.o").read_bytes())
    assert mapped[0] == mapped[1]


@requires_toolchain
def test_the_compilers_status_and_output_come_through(checkout: Path) -> None:
    (checkout / "src" / "bad.c").write_text("int f(void) { return }\n")
    done = launch(CLANG, "-c", checkout / "src" / "bad.c", "-o", "bad.o", cwd=checkout / "build")
    assert done.returncode == 1
    assert "../src/bad.c:1:22: error: expected expression" in done.stderr
    done = launch(CLANG, "--version", cwd=checkout)
    assert done.returncode == 0 and "clang version 22" in done.stdout
    done = subprocess.run([LAUNCHER, str(CLANG), "-E", "-P", "-x", "c", "-"], input="X\n",
                          capture_output=True, text=True, cwd=checkout)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "X"


def test_source_filename_of_what_is_not_bitcode() -> None:
    assert source_filename(b"") is None
    assert source_filename(b"not bitcode at all") is None
    assert source_filename(b"BC\xc0\xde" + b"\xff" * 64) is None


# -- cached-dist flags --launcher -------------------------------------------------------


def flags(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in {"CACHED_DIST_CONFIG"}}
    return subprocess.run([cached_dist_exe(), "flags", *args], cwd=cwd, capture_output=True,
                          text=True, env={**base, "XDG_CONFIG_HOME": str(cwd / "cfg"), **env})  # fmt: skip


def test_flags_prints_the_launcher(tmp_path: Path) -> None:
    done = flags("--launcher", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{LAUNCHER}\n", "")
    (tmp_path / "my base").mkdir()
    done = flags("--launcher", "--base-dir", "my base", "--prefix-map=/proj", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert shlex.split(done.stdout) == [LAUNCHER, f"--base-dir={tmp_path}/my base",
                                        "--prefix-map=/proj"]  # fmt: skip
    done = flags("--launcher=cmake", "--prefix-map", "--base-dir=my base", cwd=tmp_path)
    assert done.stdout == f"{LAUNCHER};--base-dir={tmp_path}/my base;--prefix-map\n"


def test_flags_launcher_takes_the_config_files_base_dir(tmp_path: Path) -> None:
    (tmp_path / "cfg" / "cached-dist").mkdir(parents=True)
    config = tmp_path / "cfg" / "cached-dist" / "config.toml"
    config.write_text(f'jobs = 2\nbase-dir = "{tmp_path}"\n')
    done = flags("--launcher", cwd=tmp_path)
    assert done.stdout == f"{LAUNCHER} --base-dir={tmp_path}\n", done.stderr
    (tmp_path / "b").mkdir()
    done = flags("--launcher", "--base-dir=b", cwd=tmp_path)
    assert done.stdout == f"{LAUNCHER} --base-dir={tmp_path}/b\n", done.stderr
    # Links read the same file and leave base-dir to the launcher.
    done = subprocess.run([cached_dist_exe(), "stats", f"--cache-dir={tmp_path}/none"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg")})  # fmt: skip
    assert_one_line_error(done, 2, f"no cache at {tmp_path}/none")
    config.write_text("base-dir = 3\n")
    assert_one_line_error(flags("--launcher", cwd=tmp_path), 2,
                          f"config file {config}: base-dir: expected a directory, got 3")  # fmt: skip


def test_flags_launcher_errors(tmp_path: Path) -> None:
    (tmp_path / "semi;colon").mkdir()
    (tmp_path / "file").write_text("")
    cases = [
        (["--launcher", "--jobs=2"], "'--jobs=2' is not a launcher option: `cached-dist flags "
                                     "--launcher` takes --base-dir and --prefix-map"),
        (["--launcher", "--cc", "clang"], "'--cc' is not a launcher option"),
        (["--launcher=meson"], "--launcher=meson: expected --launcher or --launcher=cmake"),
        (["--launcher", "--base-dir"], "option --base-dir needs a value (DIR)"),
        (["--launcher", "--base-dir=none"], f"base directory {tmp_path}/none: no such directory"),
        (["--launcher", "--base-dir=file"], f"base directory {tmp_path}/file: not a directory"),
        (["--launcher", "--base-dir=/"], "base directory /: it would rewrite system paths"),
        (["--launcher=cmake", "--base-dir=semi;colon"],
         f"'--base-dir={tmp_path}/semi;colon' contains ';', which CMake would split"),
    ]  # fmt: skip
    for args, text in cases:
        assert_one_line_error(flags(*args, cwd=tmp_path), 2, text)
    done = flags("--launcher", cwd=tmp_path, CACHED_DIST_CONFIG=str(tmp_path / "none.toml"))
    assert_one_line_error(done, 2, f"config file not found: {tmp_path}/none.toml")


def test_flags_launcher_without_a_built_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launcher, "LAUNCHER", str(tmp_path / "cached-dist-cc"))
    with pytest.raises(UsageError) as raised:
        launcher.command_line([], "", {"XDG_CONFIG_HOME": str(tmp_path)})
    assert str(raised.value) == (f"the compiler launcher {tmp_path}/cached-dist-cc is not built: "
                                 "reinstall cached-dist where a C compiler is available")  # fmt: skip
