"""Regression links for the ThinLTO cache-key holes LLVM found upstream, and their kin.

LLVM's own ThinLTO cache served stale objects when CGData contents were not hashed
(llvm-project PR 214161), when context-sensitive profile instrumentation and profile data
were not (PR 214162), when legacy ThinLTO ignored -mllvm options (PR 211474); DTLTO's option
forwarding keeps changing (clang-cl misreading the options, issue 220379; the
prepend-arg for a multi-call driver, PR 162456). Each test here is a real link that changes
one thing, by content where the thing is a file at the same path: every job must miss, and
the links before and after it relink as hits that --verify-hits=1 finds right. The program
runs after each link. docs/keys.md lists the cases with their tests.
"""

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from cached_dist.keys.toolchain import toolchain_libraries

from .coff import LLD_LINK, build_coff, summary
from .toolchain import CLANG, LLVM_BIN, Project, build, requires_toolchain, run

pytestmark = [requires_toolchain, pytest.mark.e2e]

JOBS = 3  # the merge program: main.c, left.c, right.c
ARG = "-Wl,--thinlto-remote-compiler-arg="


class Links:
    """Links of one project through one cache."""

    def __init__(self, project: Project, cache: Path) -> None:
        self.project = project
        self.cache = cache
        self.count = 0

    def __call__(
        self, extra: Sequence[str] = (), *, verify: bool = False,
        remote_compiler: Path | None = None,
    ) -> tuple[int, int, int]:  # fmt: skip
        """(jobs, hits, compiled) of a link with ``extra`` link flags; the program runs."""
        self.count += 1
        out = f"app{self.count}"
        args = [f"--cache-dir={self.cache}", *(["--verify-hits=1"] if verify else [])]
        done = self.project.link(out, distributor_args=args, extra=extra,
                                 remote_compiler=remote_compiler)  # fmt: skip
        assert done.returncode == 0, done.stderr
        if verify:
            assert "verified (0 mismatches)" in done.stderr, done.stderr
        assert self.project.run_program(out) == self.project.expected_output
        return summary(done.stderr)

    def image(self) -> bytes:
        return (self.project.dir / f"app{self.count}").read_bytes()


def must_miss(
    links: Links, before: Sequence[str], after: Sequence[str],
    change: Callable[[], None] | None = None, remote_compiler: Path | None = None,
) -> None:  # fmt: skip
    """A link with ``before``, its relink (hits, verified); ``change`` (a file's content),
    then a link with ``after``, which must compile every job, and its relink."""
    rc = remote_compiler
    assert links(before, remote_compiler=rc) == (JOBS, 0, JOBS)
    assert links(before, verify=True, remote_compiler=rc) == (JOBS, JOBS, 0)
    if change is not None:
        change()
    assert links(after, remote_compiler=rc) == (JOBS, 0, JOBS)
    assert links(after, verify=True, remote_compiler=rc) == (JOBS, JOBS, 0)


@pytest.fixture
def links(tmp_path: Path) -> Links:
    return Links(build("merge", tmp_path / "p"), tmp_path / "cache")


def _write(path: Path, data: bytes) -> Callable[[], None]:
    """What writes ``data`` over the file at ``path`` (a change of contents only)."""

    def change() -> None:
        path.write_bytes(data)

    return change


def _cgdata(links: Links, source: str, name: str) -> bytes:
    """Codegen data (stable function hashes) from ``source`` compiled with
    -codegen-data-generate, merged by llvm-cgdata: what a first build round writes."""
    d = links.project.dir
    obj = f"{name}.gen.o"
    done = run([CLANG, "-O2", "-c", source, "-o", obj, "-mllvm", "-codegen-data-generate",
                "-mllvm", "-enable-global-merge-func"], d)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = run([LLVM_BIN / "llvm-cgdata", "--merge", "--skip-trim", obj, "-o", name], d)
    assert done.returncode == 0, done.stderr
    return (d / name).read_bytes()


@pytest.mark.parametrize("spelling", ["-mllvm", "-mllvm="])
def test_cgdata_contents(links: Links, spelling: str) -> None:
    """-codegen-data-use-path=FILE (global function merging with a previous round's codegen
    data): the same path with other contents must miss; here the contents decide whether
    left.c's functions are merged, so a stale hit would give another binary. Both spellings:
    the option as the word after -mllvm, and inside -mllvm=."""
    (links.project.dir / "other.c").write_text("int unrelated(int x) { return x * x + 1; }\n")
    unrelated = _cgdata(links, "other.c", "unrelated.cgdata")
    similar = _cgdata(links, "left.c", "similar.cgdata")
    path = links.project.dir / "run.cgdata"
    path.write_bytes(unrelated)
    use = "-codegen-data-use-path=run.cgdata"
    extra = [f"{ARG}-mllvm", f"{ARG}-enable-global-merge-func"]
    extra += [f"{ARG}-mllvm", f"{ARG}{use}"] if spelling == "-mllvm" else [f"{ARG}-mllvm={use}"]
    must_miss(links, extra, extra, _write(path, similar))
    merged = links.image()
    path.write_bytes(unrelated)
    assert links(extra) == (JOBS, JOBS, 0)  # the first contents' entries, still right
    assert links.image() != merged


PROFILE = """# IR level Instrumentation Flag
:ir
work
# Func Hash:
1234
# Num Counters:
1
# Counter Values:
{}
"""


def _profdata(where: Path, count: int) -> bytes:
    """An indexed instrumentation profile, as llvm-profdata merges one."""
    text = where / f"p{count}.proftext"
    text.write_text(PROFILE.format(count))
    done = run([LLVM_BIN / "llvm-profdata", "merge", "-o", f"p{count}.profdata", text.name], where)
    assert done.returncode == 0, done.stderr
    return (where / f"p{count}.profdata").read_bytes()


@pytest.mark.parametrize("form", ["file", "directory", "bare"])
def test_profile_use_contents(links: Links, form: str) -> None:
    """-fprofile-use=FILE, -fprofile-use=DIR (clang reads DIR/default.profdata) and a bare
    -fprofile-use (./default.profdata): the profile's contents count, wherever it is."""
    d = links.project.dir
    first, second = _profdata(d, 100), _profdata(d, 900)
    if form == "file":
        path, flag = d / "run.profdata", "-fprofile-use=run.profdata"
    elif form == "directory":
        (d / "pgo").mkdir()
        path, flag = d / "pgo" / "default.profdata", "-fprofile-use=pgo"
    else:
        path, flag = d / "default.profdata", "-fprofile-use"
    path.write_bytes(first)
    must_miss(links, [f"{ARG}{flag}"], [f"{ARG}{flag}"], _write(path, second))


SAMPLES = "work:{}:{}\n 1: {}\n 2: {}\n"


@pytest.mark.parametrize("how", ["remote-compiler-arg", "lld"])
def test_sample_profile_contents(links: Links, how: str) -> None:
    """-fprofile-sample-use=FILE, given to the backend compiler or to LLD
    (--lto-sample-profile=, which LLD passes on as that option and a common input)."""
    path = links.project.dir / "run.prof"
    path.write_text(SAMPLES.format(5000, 100, 100, 90))
    flag = (f"{ARG}-fprofile-sample-use=run.prof" if how == "remote-compiler-arg"
            else "-Wl,--lto-sample-profile=run.prof")  # fmt: skip
    must_miss(links, [flag], [flag], _write(path, SAMPLES.format(9000, 10, 1, 900).encode()))


@pytest.mark.parametrize(
    "added",
    [
        [f"{ARG}-fcs-profile-generate"],  # context-sensitive instrumentation
        [f"{ARG}-mllvm", f"{ARG}-inline-threshold=0"],  # an LLVM option
        [f"{ARG}-mllvm=-inline-threshold=0"],
        [f"{ARG}--target=x86_64-unknown-linux-gnu"],  # another target than the modules'
        [f"{ARG}-march=x86-64-v2"],  # x86's -mcpu
    ],
    ids=["cs-profile-generate", "mllvm", "mllvm-joined", "target", "march"],
)
def test_an_added_backend_option(links: Links, added: list[str]) -> None:
    must_miss(links, [], added)


def test_a_library_of_the_compiler_a_launcher_runs(tmp_path: Path, links: Links) -> None:
    """--thinlto-remote-compiler-prepend-arg: the remote compiler is a launcher (here env;
    a multi-call driver is the same case) and the prepended word names the clang that
    really compiles. Its identity, LLVM libraries included, is in the key: after its
    libclang-cpp changes (as an upgrade of that library alone would), every job misses."""
    toolchain = tmp_path / "toolchain"
    (toolchain / "bin").mkdir(parents=True)
    (toolchain / "lib").mkdir()
    clang = toolchain / "bin" / "clang"
    shutil.copy(CLANG.resolve(), clang)  # finds its libclang-cpp in ../lib
    (library,) = (CLANG.resolve().parent.parent / "lib").glob("libclang-cpp.so.*")
    copied = toolchain / "lib" / library.name
    shutil.copy(library.resolve(), copied)
    assert str(copied) in toolchain_libraries(str(clang))  # the copy is what it loads
    launch = [f"-Wl,--thinlto-remote-compiler-prepend-arg={clang}"]

    def upgrade() -> None:
        with copied.open("ab") as f:
            f.write(b"\0")  # past the end of every segment: the library loads as before

    must_miss(links, launch, launch, upgrade, remote_compiler=Path("/usr/bin/env"))


def test_the_tool_word_of_a_multi_call_driver(tmp_path: Path, links: Links) -> None:
    """--thinlto-remote-compiler-prepend-arg=WORD for a multi-call driver (LLVM's `llvm`,
    which runs the tool its first word names): the driver is what compiles, and the word is
    in the key as text. Here a driver that runs the LLVM tool of that name; `clang` then
    `clang++` (the same objects for IR inputs) must miss all the same."""
    driver = tmp_path / "llvm"
    driver.write_text(f'#!/bin/sh\ntool=$1\nshift\nexec "{LLVM_BIN}/$tool" "$@"\n')
    driver.chmod(0o755)
    word = "-Wl,--thinlto-remote-compiler-prepend-arg="
    must_miss(links, [f"{word}clang"], [f"{word}clang++"], remote_compiler=driver)


@pytest.mark.skipif(not LLD_LINK.exists(), reason="lld-link-22 not installed")
def test_an_added_backend_option_in_a_coff_link(tmp_path: Path) -> None:
    """The same for lld-link's /thinlto-remote-compiler-arg: (no program runs)."""
    project = build_coff("wincalc", tmp_path / "p", "regular")
    args = [f"--cache-dir={tmp_path / 'cache'}"]

    def link(extra: list[str], *more: str) -> tuple[int, int, int]:
        done = project.link(distributor_args=[*args, *more], extra=extra)
        assert done.returncode == 0, done.stderr
        return summary(done.stderr)

    for extra in ([], ["/thinlto-remote-compiler-arg:-march=x86-64-v2"],
                  ["/thinlto-remote-compiler-arg:-mllvm",
                   "/thinlto-remote-compiler-arg:-inline-threshold=0"]):  # fmt: skip
        assert link(extra) == (5, 0, 5)
        assert link(extra, "--verify-hits=1") == (5, 5, 0)


def test_prepend_words_in_the_key_by_identity() -> None:
    """Which prepended words are programs whose identity counts: paths of executables
    before LLD's -c; a bare word (a multi-call driver's tool name) is in the key as text."""
    from cached_dist.keys.compute import launched_programs

    env = "/usr/bin/env"
    assert launched_programs((env, str(CLANG), "-c", "-O2")) == [str(CLANG)]
    assert launched_programs((env, "-i", str(CLANG), "-c")) == [str(CLANG)]
    assert launched_programs((str(CLANG), "clang", "-c", "-O2")) == []
    assert launched_programs((str(CLANG), "-c", "-O2", str(CLANG))) == []  # after -c: text
    assert launched_programs((env, os.devnull, "-c")) == []  # not a regular file


def test_keys_md_names_every_link_here() -> None:
    """docs/keys.md's table of these cases names each end-to-end test of this file."""
    import ast

    keys_md = (Path(__file__).parent.parent / "docs" / "keys.md").read_text()
    table = keys_md[keys_md.index("## The cases LLVM's own cache got wrong") :]
    tree = ast.parse(Path(__file__).read_text())
    links = [f.name for f in tree.body if isinstance(f, ast.FunctionDef)
             and f.name.startswith("test_") and f.args.args]  # fmt: skip
    assert len(links) >= 7
    assert [name for name in links if f"`{name}" not in table] == []
