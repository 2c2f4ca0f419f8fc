"""Compiles jobs as REAPI Actions on a remote execution server (``--remote-executor``).

Each job becomes an Action: its input root holds every input at its path below the sandbox
base, exactly what the Dask runner ships (:mod:`.shipment`, which also rewrites a shard that
names modules by absolute paths, :mod:`cached_dist.bitcode.reroot`); its Command is the
job's command line with the compiler at the path the job names, run in the re-rooted working
directory, with the outputs as output paths; its platform carries ``OSFamily``, ``ISA``, the
``toolchain`` identity the key uses (a farm routes on it: a worker with another compiler
must not take the job) and every ``--remote-exec-property``. Inputs are uploaded once per
link (FindMissingBlobs, then only what the CAS lacks), every Action is executed at once on
one channel, and each result is reported the moment its stream says it is done, so the link
stores it while others still run. A stream that drops is resumed with WaitExecution.

Anything the server does not do ends as a failed job, which the link compiles locally with
one warning, as with Dask: a server that cannot be reached, an upload that fails, a job the
shipment refuses, an action that fails or exits non-zero (never cached: the server is asked
not to cache failures, and cached-dist stores only what it reports as done), and whatever is
unfinished at ``--remote-exec-timeout``. A ``cached_result`` (the server's own ActionCache
had the exact Action) counts as a hit from the remote.
"""

from __future__ import annotations

import os
import queue
import threading
import time

from .. import __version__
from . import Result
from .shipment import plan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from store.remote.reapi_grpc import Client

    from ..jobfile import Job, JobFile
    from ..log import Log
    from ..options import Options
    from . import Report

#: What this process's REAPI runs did, added to the link's statistics (link/cached.py).
COUNTERS = dict.fromkeys(("reapi_executed", "reapi_exec_cached", "reapi_exec_failed",
                          "reapi_exec_bytes_uploaded"), 0)  # fmt: skip
#: Streams open at once (each waits on the network in a thread of its own).
STREAMS = 64
#: Times a dropped Execute stream is resumed with WaitExecution before the job falls back.
RESUMES = 3
_TAIL_LINES = 3
_GRACE = 5.0  # seconds a stream outlives the batch's deadline (see ReapiRunner._one)


class ReapiRunner:
    """Executes jobs on the REAPI server at ``url``; ``timeout`` bounds the whole batch."""

    def __init__(self, options: Options, log: Log) -> None:
        from store.remote import redact

        self.options = options
        self.url = options.remote_executor
        self.shown = redact(self.url)
        self.log = log
        self.timeout = options.remote_exec_timeout
        self.name = f"REAPI executor {self.shown}"
        # As for Dask: with --compiler-check=mtime, identities are compared by content.
        check = options.compiler_check
        self.check = "content" if check == "mtime" else check

    @classmethod
    def from_options(cls, options: Options, log: Log) -> ReapiRunner:
        return cls(options, log)

    def run(self, job_file: JobFile, jobs: Sequence[Job], report: Report) -> None:
        started = time.monotonic()
        deadline = started + self.timeout
        reported: set[int] = set()

        def report_once(result: Result) -> None:
            if result.job.index not in reported:
                reported.add(result.job.index)
                if not result.ok:
                    COUNTERS["reapi_exec_failed"] += 1
                report(result)

        lost = "the REAPI runner lost track of it"
        client = None
        try:
            from store.remote import RemoteError
            from store.remote.reapi_grpc import Client

            options = self.options
            client = Client(self.url, connect_timeout=options.remote_connect_timeout,
                            timeout=options.remote_timeout,
                            instance_name=options.remote_instance_name,
                            headers=options.remote_header, tool_version=__version__)  # fmt: skip
            actions = self._actions(job_file, jobs, report_once, client)
            if actions:
                self._execute(client, actions, deadline, report_once)
        except RemoteError as e:
            lost = f"REAPI executor {self.shown}: {e}"
        except ImportError as e:
            lost = f"REAPI client library missing ({e.name}); install cached-dist[reapi]"
        finally:
            for job in jobs:  # every job is reported, whatever happened
                if job.index not in reported:
                    report_once(Result(job, 0.0, lost))
            if client is not None:
                client.close()

    # -- the Actions ----------------------------------------------------------------------

    def _actions(
        self, job_file: JobFile, jobs: Sequence[Job], report: Report, client: Client
    ) -> dict[int, tuple[Job, Any, list[str]]]:
        """Uploads every input and Action; job index -> (job, Action digest, the Command's
        output paths, in the order of the job's outputs)."""
        from store.remote.reapi import host_platform
        from store.remote.reapi_grpc import digest_of
        from store.remote.reapi_pb import remote_execution_pb2 as re

        from .dask import _identities

        identities = _identities(job_file, jobs, self.check)
        shipment = plan(job_file, jobs, identities)
        by_index = {job.index: job for job in jobs}
        for index, why in shipment.refused.items():
            report(Result(by_index[index], 0.0, f"cannot be compiled remotely: {why}"))
        blobs: dict[str, bytes] = {}
        sha: dict[str, Any] = {}  # content key -> its REAPI digest
        for key, data in shipment.contents.items():
            d = digest_of(data)
            sha[key] = d
            blobs[d.hash] = data
        actions: dict[int, tuple[Job, Any, list[str]]] = {}
        for index, (spec, keys) in shipment.specs.items():
            job = by_index[index]
            cwd = spec["cwd"]
            outputs = [os.path.relpath(p, cwd or ".") for p in spec["outputs"]]
            if any(p.startswith("..") for p in outputs):
                report(Result(job, 0.0, "cannot be compiled remotely: an output lies outside "
                                        "the working directory"))  # fmt: skip
                continue
            root = _tree(zip(spec["inputs"], (sha[k] for k in keys), strict=True), cwd, blobs)
            # A --remote-exec-property of the same name replaces a built-in one (a farm may
            # spell OSFamily "Linux"); the toolchain identity is always the key's.
            named = {**dict(host_platform()), **dict(self.options.remote_exec_property),
                     "toolchain": spec["identity"]}  # fmt: skip
            properties = sorted(named.items())
            plat = re.Platform(properties=[re.Platform.Property(name=n, value=v)
                                           for n, v in properties])  # fmt: skip
            command = re.Command(arguments=spec["argv"], working_directory=cwd,
                                 output_paths=outputs, output_files=outputs,
                                 platform=plat).SerializeToString()  # fmt: skip
            command_digest = digest_of(command)
            blobs[command_digest.hash] = command
            action = re.Action(command_digest=command_digest, input_root_digest=root,
                               platform=plat).SerializeToString()  # fmt: skip
            action_digest = digest_of(action)
            blobs[action_digest.hash] = action
            actions[index] = (job, action_digest, outputs)
        if actions:
            sent = client.upload(blobs)
            COUNTERS["reapi_exec_bytes_uploaded"] += sent
            total = sum(len(b) for b in blobs.values())
            self.log.detail(
                f"REAPI: {len(actions)} actions, {len(shipment.contents)} distinct inputs, "
                f"{sent} of {total} bytes uploaded (the CAS had the rest)"
            )
        return actions

    # -- execution ------------------------------------------------------------------------

    def _execute(
        self, client: Client, actions: dict[int, tuple[Job, Any, list[str]]], deadline: float,
        report: Report,
    ) -> None:  # fmt: skip
        """Runs every Action (up to STREAMS at once), reporting each as it ends."""
        done: queue.Queue[Result] = queue.Queue()
        todo = list(actions.values())
        todo.sort(key=lambda item: -os.path.getsize(item[0].module)
                  if os.path.exists(item[0].module) else 0)  # fmt: skip
        lock = threading.Lock()
        stop = threading.Event()

        def worker() -> None:
            while not stop.is_set():
                with lock:
                    if not todo:
                        return
                    job, digest, outputs = todo.pop(0)
                try:
                    result = self._one(client, job, digest, outputs, deadline, stop)
                except Exception as e:  # never a stuck link
                    result = Result(job, 0.0, f"REAPI: {type(e).__name__}: {e}")
                done.put(result)

        threads = [threading.Thread(target=worker, daemon=True, name="reapi")
                   for _ in range(min(STREAMS, len(todo)))]  # fmt: skip
        for t in threads:
            t.start()
        pending = len(actions)
        try:
            while pending:
                left = deadline - time.monotonic()
                try:
                    result = done.get(timeout=max(0.0, left))
                except queue.Empty:
                    break
                pending -= 1
                report(result)
        finally:
            stop.set()  # the rest: reported by run() as not finished (the channel closes)
        if pending:
            for job, _, _ in actions.values():
                report(Result(job, 0.0, f"not finished on REAPI within --remote-exec-timeout "
                                        f"{self.timeout:g} s"))  # fmt: skip

    def _one(
        self, client: Client, job: Job, digest: Any, outputs: list[str], deadline: float,
        stop: threading.Event,
    ) -> Result:  # fmt: skip
        """Executes one Action to its end (resuming a dropped stream) and writes its outputs."""
        import grpc
        from google.rpc import code_pb2

        from store.remote.reapi_pb import remote_execution_pb2 as re

        started = time.monotonic()
        name = ""
        response = None
        for attempt in range(RESUMES + 1):
            left = deadline - time.monotonic()
            if left <= 0 or stop.is_set():
                return Result(job, 0.0, "REAPI: out of time")
            # The batch's deadline is the runner's (_execute); the stream's, a little later,
            # only frees this thread.
            left += _GRACE
            stream = (client.wait_execution(name, timeout=left) if name
                      else client.execute(digest, skip_cache=False, timeout=left))  # fmt: skip
            try:
                for operation in stream:
                    op: Any = operation
                    name = op.name or name
                    if op.done:
                        if op.HasField("error"):
                            why = op.error.message or f"code {op.error.code}"
                            return Result(job, 0.0, f"REAPI execution failed: {why}")
                        response = re.ExecuteResponse()
                        op.response.Unpack(response)
                        break
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else None
                retry = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                                 grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)  # fmt: skip
                if not (retry and name and attempt < RESUMES):
                    return Result(job, 0.0, str(client.error(e, "Execute")))
                self.log.detail(f"REAPI: the stream of {os.path.basename(job.module)} dropped "
                                f"({code.name if code else 'error'}); resuming it")  # fmt: skip
                continue
            if response is not None:
                break
            if not name:  # the stream ended before it named the operation
                return Result(job, 0.0, "REAPI: Execute ended without an operation")
        if response is None:
            return Result(job, 0.0, "REAPI: the execution stream kept dropping")
        if response.status.code != code_pb2.OK:
            return Result(job, 0.0, f"REAPI execution failed: {response.status.message}")
        result = response.result
        COUNTERS["reapi_executed"] += 1
        text = self._stderr(client, result)
        if result.exit_code != 0:
            tail = [line for line in text.splitlines() if line.strip()][-_TAIL_LINES:]
            return Result(job, time.monotonic() - started,
                          f"exit status {result.exit_code} on REAPI ({self.shown})"
                          + (": " + " | ".join(tail) if tail else ""))  # fmt: skip
        self.log.passthrough(os.path.basename(job.module), text)
        files = {f.path: f for f in result.output_files}
        blobs = client.read_blobs([f.digest for f in files.values() if not f.contents])
        written = _write_outputs(job, [files.get(p) for p in outputs], outputs, blobs)
        if written is not None:
            return Result(job, 0.0, f"REAPI action finished, but {written}")
        meta = result.execution_metadata
        seconds = time.monotonic() - started
        if meta.HasField("execution_start_timestamp"):
            seconds = (meta.execution_completed_timestamp.ToNanoseconds()
                       - meta.execution_start_timestamp.ToNanoseconds()) / 1e9  # fmt: skip
        if response.cached_result:
            COUNTERS["reapi_exec_cached"] += 1
            return Result(job, seconds, by=f"from the REAPI executor's cache ({self.shown})",
                          output=text, remote=True, cached=True)  # fmt: skip
        return Result(job, seconds, by=f"on REAPI ({self.shown})", output=text, remote=True)

    @staticmethod
    def _stderr(client: Client, result: Any) -> str:
        """What the compiler printed (stdout, then stderr), inline or from the CAS."""
        parts = []
        for raw, digest in ((result.stdout_raw, result.stdout_digest),
                            (result.stderr_raw, result.stderr_digest)):  # fmt: skip
            data = raw
            if not data and digest.size_bytes:
                data = client.read_blobs([digest]).get(digest.hash, b"")
            parts.append(data.decode("utf-8", "replace"))
        return "".join(parts)


def _tree(files: Any, cwd: str, blobs: dict[str, bytes]) -> Any:
    """The input root's Directory digest for (sandbox path, digest) pairs; every Directory
    message goes into ``blobs``. The working directory exists even if it holds no input."""
    from store.remote.reapi_grpc import digest_of
    from store.remote.reapi_pb import remote_execution_pb2 as re

    tree: dict[str, Any] = {}
    for path, digest in files:
        parts = path.split("/")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = digest
    node = tree
    for part in cwd.split("/") if cwd else []:
        node = node.setdefault(part, {})

    def build(node: dict[str, Any]) -> Any:
        directory = re.Directory()
        for name in sorted(node):
            child = node[name]
            if isinstance(child, dict):
                directory.directories.append(re.DirectoryNode(name=name, digest=build(child)))
            else:
                directory.files.append(re.FileNode(name=name, digest=child))
        data = directory.SerializeToString()
        d = digest_of(data)
        blobs[d.hash] = data
        return d

    return build(tree)


def _write_outputs(
    job: Job, found: Sequence[Any], names: Sequence[str], blobs: dict[str, bytes]
) -> str | None:
    """Each output (``found``: the result's OutputFile for each Command output path, or None)
    written atomically to the job's output; why not, if one is missing or damaged."""
    import hashlib

    from .dask import _write

    for f, name, dest in zip(found, names, job.outputs, strict=True):
        if f is None:
            return f"it did not return {name}"
        data = f.contents if f.contents else blobs.get(f.digest.hash)
        if data is None or hashlib.sha256(data).hexdigest() != f.digest.hash:
            return f"its output {name} is missing from the CAS or damaged"
        try:
            _write(dest, data)
        except OSError as e:
            return f"cannot write {dest}: {e.strerror}"
    return None
