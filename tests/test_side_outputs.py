"""Options that write more than the object, or make it depend on its path, are never cached."""

import pytest

from cached_dist.keys.side_outputs import command_side_output_reason, side_output_reason

CLANG = ["/usr/bin/clang", "-c", "-O2"]
JOB = ["m.o", "-fthinlto-index=m.1.2.native.o.thinlto.bc", "-o", "m.1.2.native.o"]


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["-gsplit-dwarf"], "split DWARF"),
        (["-gsplit-dwarf=single"], "split DWARF"),
        (["-Xclang", "-split-dwarf-file", "-Xclang", "m.dwo"], "split DWARF"),
        (["-save-temps"], "-save-temps"),
        (["-save-temps=obj"], "-save-temps"),
        (["--save-temps"], "-save-temps"),
        (["-ftime-trace"], "-ftime-trace"),
        (["-ftime-trace=trace.json"], "-ftime-trace"),
        (["-fsave-optimization-record"], "optimization records"),
        (["-fsave-optimization-record=yaml"], "optimization records"),
        (["-foptimization-record-file=r.yaml"], "optimization records"),
        (["-fstack-usage"], "-fstack-usage"),
        (["-save-stats=obj"], "-save-stats"),
        (["--coverage"], "coverage"),
        (["-ftest-coverage"], "coverage"),
        (["-fprofile-arcs"], ".gcda"),
        (["-MD"], "dependency"),
        (["-MF", "deps.d"], "dependency"),
        (["--serialize-diagnostics", "d.dia"], "serialized diagnostics"),
        (["-mllvm", "-pass-remarks-output=r.yaml"], "LLVM option"),
        (["-mllvm=-info-output-file=x"], "LLVM option"),
        (["-Xclang", "-mllvm", "-Xclang", "-stats-json"], "LLVM option"),
        (["-Xclang=-split-dwarf-file", "-Xclang=m.dwo"], "split DWARF"),  # -Xclang= spelled
        (["-Xclang=-mllvm", "-Xclang=-stats-json"], "LLVM option"),
        (["@opts.rsp"], "response file"),  # options the check cannot see
    ],
)
def test_side_output_options_make_a_job_uncacheable(extra: list[str], why: str) -> None:
    reason = side_output_reason([*CLANG, *extra, *JOB])
    assert reason is not None and why in reason


@pytest.mark.parametrize(
    "extra",
    [[], ["-g"], ["-gno-split-dwarf"], ["-O3"], ["-mllvm", "-import-instr-limit=10"],
     ["-fprofile-instr-generate"], ["-ffunction-sections"], ["-Wno-unused-command-line-argument"]],
)  # fmt: skip
def test_ordinary_options_stay_cacheable(extra: list[str]) -> None:
    assert side_output_reason([*CLANG, *extra, *JOB]) is None


def test_an_empty_compiler_is_not_a_side_output() -> None:
    assert side_output_reason(["", *CLANG[1:], *JOB]) is None


@pytest.mark.parametrize(
    ("common", "own", "expected"),
    [((*CLANG, "-gsplit-dwarf"), tuple(JOB), True), (tuple(CLANG), ("-ftime-trace", *JOB), True),
     ((*CLANG, "-mllvm"), ("-stats-json", *JOB), True), (tuple(CLANG), tuple(JOB), False)],
)  # fmt: skip
def test_the_shared_part_is_checked_like_the_whole(
    common: tuple[str, ...], own: tuple[str, ...], expected: bool
) -> None:
    assert (command_side_output_reason(common, own) is not None) == expected
    assert (side_output_reason([*common, *own]) is not None) == expected
