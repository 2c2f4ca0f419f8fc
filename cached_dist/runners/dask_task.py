"""What a Dask worker runs for one backend job: no shared file system is assumed.

The link machine sends the job's inputs as bytes, each under the path it has relative to the
root of the link machine's file system. The worker recreates them in a private sandbox
directory, runs the compiler with the link's working directory re-rooted in the sandbox (the
command line and the shard name files relative to it), and returns the outputs' bytes. It
first checks that its compiler is the link machine's, by the identity the cache key uses:
an object compiled by another toolchain must never be stored under this key.

Imported by workers, so it uses only the standard library and the toolchain identity.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

from ..keys import toolchain

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_TAIL_LINES = 3


def where() -> str:
    """This worker as the dashboard names it (name and address), else host:pid."""
    try:
        from distributed import get_worker  # loaded already: this runs inside a worker

        worker = get_worker()
    except (ImportError, ValueError):
        return f"{socket.gethostname()}:{os.getpid()}"
    name = str(worker.name)
    return worker.address if name == worker.address else f"{name} at {worker.address}"


def _inside(root: str, relative: str) -> str:
    """``relative`` under ``root``; refuses anything that would leave the sandbox."""
    path = os.path.normpath(os.path.join(root, relative))
    if os.path.isabs(relative) or not path.startswith(root + os.sep):
        raise ValueError(f"path {relative!r} leaves the sandbox")
    return path


def compile_job(spec: dict[str, Any], *contents: bytes) -> dict[str, Any]:
    """Compiles one job in a fresh sandbox. ``spec``: compiler, identity (the link machine's
    toolchain identity), argv, cwd, inputs (sandbox paths, one per content), outputs.

    Returns {"failure": None | reason, "outputs": [bytes...], "text": compiler output,
    "seconds": compile time, "where": host:pid}; a failure never raises, so Dask does not
    retry a job that fails for a reason another worker would share."""
    result: dict[str, Any] = {"failure": None, "outputs": [], "text": "", "seconds": 0.0,
                              "where": where()}  # fmt: skip
    try:
        check = spec.get("check", "content")
        mine = toolchain.identity(spec["compiler"], toolchain.NoMemo(), check)  # once a process
    except OSError as e:
        result["failure"] = f"worker {where()} has no compiler {spec['compiler']}: {e.strerror}"
        return result
    except toolchain.CompilerCheckError as e:
        result["failure"] = f"worker {where()} cannot check its compiler: {e}"
        return result
    if mine != spec["identity"]:
        theirs = spec["identity"][:12]
        result["failure"] = (f"worker {where()} has another toolchain at {spec['compiler']} "
                             f"(identity {mine[:12]}, the link machine's {theirs})")  # fmt: skip
        return result
    root = tempfile.mkdtemp(prefix="cached-dist-sandbox.")
    try:
        for relative, data in zip(spec["inputs"], contents, strict=True):
            path = _inside(root, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        cwd = _inside(root, spec["cwd"]) if spec["cwd"] else root
        outputs = [_inside(root, relative) for relative in spec["outputs"]]
        for directory in {cwd, *(os.path.dirname(p) for p in outputs)}:
            os.makedirs(directory, exist_ok=True)
        started = time.monotonic()
        done = subprocess.run(spec["argv"], cwd=cwd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True, check=False)  # fmt: skip
        result["seconds"] = time.monotonic() - started
        result["text"] = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            code = done.returncode
            what = f"exit status {code}" if code > 0 else f"killed by signal {-code}"
            tail = [line for line in result["text"].splitlines() if line.strip()][-_TAIL_LINES:]
            result["failure"] = f"{what} on worker {where()}" + (
                ": " + " | ".join(tail) if tail else ""
            )
            return result
        for relative, path in zip(spec["outputs"], outputs, strict=True):
            try:
                with open(path, "rb") as f:
                    result["outputs"].append(f.read())
            except OSError:
                result["failure"] = f"exited 0 on worker {where()} but did not write {relative}"
                result["outputs"] = []
                return result
    except (OSError, ValueError) as e:
        result["failure"] = f"worker {where()}: {e}"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return result


def compile_with(spec: dict[str, Any], contents: list[bytes]) -> dict[str, Any]:
    """:func:`compile_job` with the inputs in one list: one signature for every job, so a
    batch of jobs is one ``Client.map``."""
    return compile_job(spec, *contents)
