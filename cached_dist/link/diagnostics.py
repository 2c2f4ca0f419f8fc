"""What a backend compile printed: kept with its result, replayed on a hit, and a veto.

A hit must look like the compile it replaces, warnings and remarks included, so the text a
job printed is stored with its outputs and printed again, tagged the same way. A compile
that printed an error diagnostic produced something no one should reuse, even when it exited
0: clang reports "Error running ThinLTO backend: Error loading imported file ..." and still
writes an object, without the imports. Such a result is used for this link (it is what the
compiler gave) but never stored.
"""

import re

# Longest diagnostic text stored with a result; a job that printed more is not stored
# (its hit could not replay it) and says so with --verbose.
MAX_STORED = 256 * 1024

# clang's "FILE:LINE:COL: error: ...", "error: ...", "fatal error: ...", and LLVM's
# "Error running ThinLTO backend" / "LLVM ERROR: ...".
_ERROR = re.compile(r"(?m)(?:^|[\s:])(?:fatal )?error: |Error running ThinLTO backend|LLVM ERROR:")


def error_line(text: str) -> str | None:
    """The first line of ``text`` holding an error diagnostic, if any."""
    match = _ERROR.search(text)
    if match is None:
        return None
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end >= 0 else len(text)].strip()


def why_not_stored(text: str) -> str | None:
    """Why a successful compile's result must not be stored, judging by what it printed."""
    line = error_line(text)
    if line is not None:
        return f"the compiler printed an error although it exited 0 ({line})"
    if len(text) > MAX_STORED:
        return f"it printed {len(text)} characters of diagnostics (more than {MAX_STORED})"
    return None
