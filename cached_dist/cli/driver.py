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
    if done.returncode == 0 and _runs_lld_link(output):
        raise UsageError(f"{name} links Windows targets with lld-link, and its driver does not "
                         "pass -fthinlto-distributor= on: print lld-link's flags with "
                         "`cached-dist flags --lld-link`")  # fmt: skip
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


def _runs_lld_link(output: str) -> bool:
    """Whether the dry run's last command (the link) is lld-link: clang's MSVC toolchain
    (clang-cl, or ``--target=*-windows-msvc``) drops ``-fthinlto-distributor=`` (LLVM 22)."""
    lines = output.strip().splitlines()
    try:
        words = shlex.split(lines[-1]) if lines else []
    except ValueError:
        return False
    return bool(words) and os.path.basename(words[0]).lower().startswith("lld-link")


NEEDS_LLD_LINK = "DTLTO needs lld-link 21 or later"


def check_lld_link(driver: Sequence[str], environ: Mapping[str, str]) -> str:
    """The clang that is to compile the backend jobs of a build linked by lld-link whose
    compiler is ``driver`` (clang or clang-cl), after checking that the lld-link beside it
    (else on PATH) can link through a distributor; raises UsageError (one line) if not.

    For clang-cl it is the clang beside it: LLD writes the jobs' options in clang's
    spelling, which clang-cl misreads (LLVM issue 220379)."""
    name = " ".join(driver)
    found = shutil.which(driver[0], path=environ.get("PATH"))
    if found is None:
        raise UsageError(f"compiler {driver[0]!r} not found: set CC or --cc to a clang or "
                         f"clang-cl ({NEEDS_LLD_LINK})")  # fmt: skip
    real = os.path.realpath(found)
    directory, base = os.path.split(real)
    exe = ".exe" if base.lower().endswith(".exe") else ""
    backend = real
    if "clang-cl" in base.lower():  # a copy of clang, not a link to it (Windows installs)
        backend = os.path.join(directory, "clang" + exe)
        if not os.path.isfile(backend):
            raise UsageError(f"no clang beside {real} to compile the backend jobs (clang-cl "
                             "misreads the options LLD gives them)")  # fmt: skip
    version = _first_line([backend, "--version"], environ)
    if "clang version" not in version:
        raise UsageError(f"{name} ({version or 'no version'}) is not clang: {NEEDS_LLD_LINK} "
                         "and clang")  # fmt: skip
    beside = os.path.join(directory, "lld-link" + exe)
    on_path = shutil.which("lld-link", path=environ.get("PATH"))
    linker = beside if os.path.isfile(beside) else on_path
    if linker is None:
        raise UsageError(f"cannot find lld-link beside {real} or on PATH: install the lld of "
                         "the same LLVM version")  # fmt: skip
    try:
        done = subprocess.run([linker, "/help"], capture_output=True, text=True,
                              errors="replace", timeout=60)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UsageError(f"cannot run {linker!r}: {e}") from None
    if "/thinlto-distributor:" not in done.stdout:
        lld = _first_line([linker, "--version"], environ) or "unknown version"
        raise UsageError(f"{linker} ({lld}) cannot link through a distributor: {NEEDS_LLD_LINK}")
    return backend


def _first_line(argv: Sequence[str], environ: Mapping[str, str]) -> str:
    """The first line a program prints (its version), or '' if it cannot be run."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=60, env={**environ, "LC_ALL": "C"})  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[0].strip() if lines else ""
