"""Finds the compiler driver a build will link with and checks that it can do DTLTO.

The check is a dry run (``-###``) of a ThinLTO link through a distributor, not a version
comparison: it accepts any clang whose driver forwards ``-fthinlto-distributor=`` to an lld it
can find (LLVM 21 and later), whatever its vendor's version numbering, and names the reason
when it cannot (an older clang, gcc, no lld).
"""

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from ..errors import UsageError

NEEDS = "DTLTO needs clang 21 or later with lld"


def drivers(given: Sequence[str], environ: Mapping[str, str]) -> list[list[str]]:
    """The drivers to check, each as words: ``--cc`` values, else $CC (or ``clang``) and $CXX.

    A build links C programs with $CC and C++ ones with $CXX, so both are checked when set;
    with neither, ``clang`` on PATH is what a user who sets nothing expects us to mean.
    """
    texts = list(given) or [
        environ.get("CC") or "clang",
        *([environ["CXX"]] if environ.get("CXX") else []),
    ]
    found = []
    for text in texts:
        words = shlex.split(text)
        if not words:
            raise UsageError(f"empty compiler name {text!r}")
        found.append(words)
    return found


def check(driver: Sequence[str], distributor: str, environ: Mapping[str, str]) -> str:
    """Raises UsageError (one line) unless ``driver`` can link through ``distributor``;
    returns the backend compiler the driver names for the jobs (its own clang)."""
    name = " ".join(driver)
    if shutil.which(driver[0], path=environ.get("PATH")) is None:
        raise UsageError(f"compiler {driver[0]!r} not found: set CC or --cc to a clang ({NEEDS})")
    probe = [*driver, "-###", "-flto=thin", "-fuse-ld=lld", f"-fthinlto-distributor={distributor}",
             "-x", "c", os.devnull, "-o", os.devnull]  # fmt: skip
    try:
        done = subprocess.run(
            probe, capture_output=True, text=True, errors="replace", timeout=60,
            env={**environ, "LC_ALL": "C"},
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UsageError(f"cannot run compiler {name!r}: {e}") from None
    output = done.stdout + done.stderr
    if done.returncode == 0 and "--thinlto-distributor=" in output:
        for word in shlex.split(output.splitlines()[-1]):
            if word.startswith("--thinlto-remote-compiler="):
                return word.partition("=")[2]
        return shutil.which(driver[0], path=environ.get("PATH")) or driver[0]
    lines = output.splitlines()
    version = next((ln.strip() for ln in lines if " version " in ln), "unknown version")
    errors = [ln.strip() for ln in lines if "error:" in ln]
    if any("thinlto-distributor" in ln for ln in errors) or not errors:
        raise UsageError(f"{name} ({version}) cannot link through a distributor: {NEEDS}")
    if any("-fuse-ld=lld" in ln for ln in errors):
        raise UsageError(f"{name} ({version}) cannot find lld for -fuse-ld=lld: install the lld "
                         "of the same LLVM version")  # fmt: skip
    raise UsageError(f"{name} ({version}) cannot do DTLTO: {errors[0]}")
