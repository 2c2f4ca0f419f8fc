"""Backend options that write more than the object, or make it depend on its output path.

The key names a job's outputs by role, so an object must not depend on the path it is
written to, and a hit restores only the outputs the job file lists. Options that break either
rule (split DWARF records the ``.dwo`` name derived from ``-o``, which carries the link's
PID; ``-save-temps``, ``-ftime-trace``, optimization records, coverage notes, stack usage,
statistics and dependency files are written beside it) make a job uncacheable: it is always
compiled, with the reason in ``--verbose`` and the ``jobs_not_cacheable`` counter. So does a
response file (``@FILE``): clang reads options from it that neither this check nor the key
sees. The list is in docs/keys.md; a miss is always allowed, a wrong hit never.
"""

# A flag alone, or with "=VALUE" attached.
_FLAGS = {
    "-gsplit-dwarf": "split DWARF writes a .dwo file and records its path in the object",
    "-split-dwarf-file": "split DWARF writes a .dwo file and records its path in the object",
    "-split-dwarf-output": "split DWARF writes a .dwo file and records its path in the object",
    "-save-temps": "-save-temps writes intermediate files beside the output",
    "--save-temps": "-save-temps writes intermediate files beside the output",
    "-ftime-trace": "-ftime-trace writes a trace file beside the output",
    "-ftime-trace-path": "-ftime-trace writes a trace file",
    "-fsave-optimization-record": "optimization records are written beside the output",
    "-foptimization-record-file": "optimization records are written to a file",
    "-opt-record-file": "optimization records are written to a file",
    "-fstack-usage": "-fstack-usage writes a .su file beside the output",
    "-stack-usage-file": "-fstack-usage writes a .su file",
    "-save-stats": "-save-stats writes a statistics file",
    "--save-stats": "-save-stats writes a statistics file",
    "-ftest-coverage": "coverage notes (.gcno) are written beside the output",
    "--coverage": "coverage notes (.gcno) are written beside the output",
    "-fprofile-arcs": "the .gcda path recorded in the object is derived from the output path",
    "-coverage-notes-file": "coverage notes are written to a file",
    "-coverage-data-file": "the .gcda path is recorded in the object",
    "-MD": "dependency files are written beside the output",
    "-MMD": "dependency files are written beside the output",
    "-MF": "a dependency file is written",
    "-MJ": "a compilation database entry is written",
    "-dependency-file": "a dependency file is written",
    "--serialize-diagnostics": "serialized diagnostics are written to a file",
    "-serialize-diagnostic-file": "serialized diagnostics are written to a file",
}
# LLVM's own options (``-mllvm NAME=VALUE``) that write files have names like these.
_LLVM_OPTION_WORDS = ("file", "output", "dump", "stats")


_common_memo: dict[tuple[str, ...], str | None] = {}


def command_side_output_reason(common: tuple[str, ...], own: tuple[str, ...]) -> str | None:
    """:func:`side_output_reason` of ``common + own``, scanning the part every job shares
    once per link rather than once per job."""
    if common and common[-1] in ("-mllvm", "-Xclang"):  # a flag whose value is in ``own``
        return side_output_reason((*common, *own))
    if common not in _common_memo:
        _common_memo[common] = side_output_reason(common)
    return _common_memo[common] or side_output_reason(own)


def side_output_reason(args: list[str] | tuple[str, ...]) -> str | None:
    """Why a job with this command line must not be cached, or None if it may be."""
    after_mllvm = False
    for arg in args:
        if arg == "-Xclang":
            continue  # "-Xclang -mllvm -Xclang NAME": the option is two words further on
        if arg[:1] == "@":
            return f"a response file holds options the key cannot see ({arg})"
        arg = arg.removeprefix("-Xclang=")  # "-Xclang=-save-stats": the option it passes
        flag = arg.split("=", 1)[0]
        reason = _FLAGS.get(flag)
        if reason is not None:
            return f"{reason} ({arg})"
        if flag.startswith("-gsplit-dwarf"):
            return f"{_FLAGS['-gsplit-dwarf']} ({arg})"
        if after_mllvm or arg.startswith("-mllvm="):
            name = arg.removeprefix("-mllvm=").split("=", 1)[0].lstrip("-").lower()
            if any(word in name for word in _LLVM_OPTION_WORDS):
                return f"the LLVM option {arg} may write a file"
        after_mllvm = arg == "-mllvm"
    return None
