"""Compiles jobs on a Dask cluster (``--dask-scheduler``), assuming no shared file system.

Each distinct input is scattered to the cluster once per link (:mod:`.shipment` decides what
and where); every job is a task that references the inputs it needs, runs
:func:`.dask_task.compile_job` in a sandbox on some worker, and returns the outputs' bytes,
which are written here as each task finishes, so results stream to the cache. Dask moves
the inputs between workers and reschedules the tasks of a worker that dies.

Anything the cluster does not do ends as a failed job, which the link compiles locally with
one warning: a scheduler that cannot be reached within a couple of seconds or has no
workers, a job whose files cannot be shipped, a worker with another toolchain, a task that
fails, and whatever is unfinished when ``--dask-timeout`` runs out (no link hangs on a
cluster). distributed is imported only here, only when jobs must run.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Sequence

from ..jobfile import Job, JobFile
from ..keys import toolchain
from ..log import Log
from ..options import Options
from . import Result
from .dask_task import compile_job
from .shipment import Shipment, plan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distributed import Client, Future

    from . import Report

CONNECT_TIMEOUT = 2.0  # seconds; a scheduler that does not answer by then is down
_unreachable: dict[str, str] = {}  # address -> why: tried once per process, warned once


class DaskRunner:
    """Sends jobs to the Dask scheduler at ``address``; ``timeout`` bounds the whole batch."""

    def __init__(
        self, address: str, timeout: float, log: Log, debug: bool = False,
        compiler_check: str = "content",
    ) -> None:  # fmt: skip
        self.address = address
        # Workers check their compiler the way the key identifies it; size and mtime differ
        # from machine to machine, so with --compiler-check=mtime they compare contents.
        self.check = "content" if compiler_check == "mtime" else compiler_check
        self.timeout = timeout
        self.log = log
        self.debug = debug
        self.name = f"Dask scheduler {address}"
        self.shipment: Shipment | None = None  # the last batch's, for statistics and tests

    @classmethod
    def from_options(cls, options: Options, log: Log) -> DaskRunner:
        return cls(options.dask_scheduler, options.dask_timeout, log, options.debug,
                   options.compiler_check)  # fmt: skip

    def run(self, job_file: JobFile, jobs: Sequence[Job], report: Report) -> None:
        started = time.monotonic()
        client, why = self._connect()
        if client is None:
            for job in jobs:
                report(Result(job, 0.0, why))
            return
        self.log.detail(f"Dask: connected to {self.address} in "
                        f"{time.monotonic() - started:.2f} s (distributed imported, workers "
                        "listed)")  # fmt: skip
        reported: set[int] = set()

        def report_once(result: Result) -> None:
            reported.add(result.job.index)
            report(result)

        try:
            self._run(client, job_file, jobs, report_once, started)
            for job in jobs:  # belt and braces: every job is reported, whatever happened
                if job.index not in reported:
                    report(Result(job, 0.0, "the Dask runner lost track of it"))
        finally:
            with contextlib.suppress(Exception):
                client.close(timeout=CONNECT_TIMEOUT)

    def _connect(self) -> tuple[Client | None, str]:
        if self.address in _unreachable:
            return None, _unreachable[self.address]
        import logging

        import dask
        from distributed import Client

        if not self.debug:  # its own reports of connection trouble would repeat ours
            for name in ["distributed", *logging.root.manager.loggerDict]:
                if name.startswith("distributed"):
                    logging.getLogger(name).setLevel(logging.CRITICAL)
        dask.config.set({"distributed.comm.timeouts.connect": f"{CONNECT_TIMEOUT}s"})
        try:
            client = Client(self.address, timeout=CONNECT_TIMEOUT, set_as_default=False)
        except Exception as e:
            why = f"cannot reach the Dask scheduler at {self.address} ({_reason(e)})"
            _unreachable[self.address] = why
            return None, why
        try:
            workers = client.scheduler_info().get("workers", {})
        except Exception as e:
            workers, error = {}, _reason(e)
        else:
            error = "it has no workers"
        if not workers:
            with contextlib.suppress(Exception):
                client.close(timeout=CONNECT_TIMEOUT)
            why = f"the Dask scheduler at {self.address} cannot run jobs ({error})"
            _unreachable[self.address] = why
            return None, why
        return client, ""

    def _run(
        self, client: Client, job_file: JobFile, jobs: Sequence[Job], report: Report,
        started: float,
    ) -> None:  # fmt: skip
        identities = _identities(job_file, jobs, self.check)
        shipment = self.shipment = plan(job_file, jobs, identities)
        for spec, _ in shipment.specs.values():
            spec["check"] = self.check
        by_index = {job.index: job for job in jobs}
        for index, why in shipment.refused.items():
            report(Result(by_index[index], 0.0, f"cannot be compiled remotely: {why}"))
        if not shipment.specs:
            return
        self.log.detail(f"Dask: sending {len(shipment.contents)} distinct inputs, "
                        f"{shipment.shipped_bytes} bytes (the jobs name {shipment.input_bytes} "
                        f"bytes of inputs in all), for {len(shipment.specs)} jobs")  # fmt: skip
        batch = _Batch(client, shipment, by_index, self.timeout)
        try:
            batch.submit_all()
            self._collect(batch, report, started)
        except Exception as e:  # the cluster went away mid-link: compile the rest here
            if self.debug:
                raise
            for job in batch.pending.values():
                report(Result(job, 0.0, f"Dask failed: {_reason(e)}"))
            batch.pending.clear()
        finally:
            if batch.pending:  # interrupted: the cluster must not keep compiling for nobody
                with contextlib.suppress(Exception):
                    client.cancel(list(batch.pending))

    def _collect(self, batch: _Batch, report: Report, started: float) -> None:
        from distributed import as_completed

        deadline = started + self.timeout
        remaining = max(0.0, deadline - time.monotonic())
        waiting = as_completed(batch.futures, loop=batch.client.loop, timeout=remaining)
        try:
            for future in waiting:
                key = str(future.key)
                job = batch.pending[key]
                if future.status not in ("finished", "error") and job.index not in batch.again:
                    # Lost, e.g. with the inputs a killed worker held: send it once more.
                    self.log.detail(f"Dask task for {job.module} {future.status}; sending "
                                    "it again")  # fmt: skip
                    waiting.add(batch.submit(job, again=True))  # pending under its new key
                    del batch.pending[key]
                    continue
                del batch.pending[key]
                try:
                    result = self._finish(future, job, deadline)
                except Exception as e:  # its outputs could not be fetched or written
                    result = Result(job, 0.0, f"Dask task finished, but {_reason(e)}")
                report(result)
        except TimeoutError:
            for job in batch.pending.values():
                report(Result(job, 0.0, f"not finished on Dask within --dask-timeout "
                                        f"{self.timeout:g} s"))  # fmt: skip
            batch.client.cancel(list(batch.pending))
            batch.pending.clear()

    def _finish(self, future: Future[Any], job: Job, deadline: float) -> Result:
        if future.status != "finished":
            error: BaseException | None = None
            if future.status == "error":
                try:
                    error = future.exception(timeout=CONNECT_TIMEOUT)
                except Exception as e:
                    error = e
            reason = _reason(error) if error is not None else future.status
            return Result(job, 0.0, f"Dask task failed: {reason}")
        done: dict[str, Any] = future.result(timeout=max(1.0, deadline - time.monotonic()))
        self.log.passthrough(os.path.basename(job.module), done["text"])
        if done["failure"] is not None:
            return Result(job, done["seconds"], done["failure"])
        for path, data in zip(job.outputs, done["outputs"], strict=True):
            _write(path, data)
        return Result(job, done["seconds"], by=f"on Dask worker {done['where']}",
                      output=done["text"], remote=True)  # fmt: skip


class _Batch:
    """One batch on the cluster: its inputs scattered once, a task per job."""

    def __init__(
        self, client: Client, shipment: Shipment, by_index: dict[int, Job], bound: float
    ) -> None:
        self.client = client
        self.bound = bound  # seconds a scatter may take (the whole batch's bound)
        self.shipment = shipment
        self.by_index = by_index
        self.token = uuid.uuid4().hex[:12]
        self.inputs: dict[str, Future[Any]] = {}  # content key -> scattered data
        self.pending: dict[str, Job] = {}  # task key -> job
        self.futures: list[Future[Any]] = []
        self.again: set[int] = set()  # jobs sent a second time

    def submit_all(self) -> None:
        self.inputs = self.client.scatter(self.shipment.contents, hash=False, timeout=self.bound)
        for index in self.shipment.specs:
            self.futures.append(self.submit(self.by_index[index]))

    def submit(self, job: Job, again: bool = False) -> Future[Any]:
        spec, keys = self.shipment.specs[job.index]
        inputs = self.inputs
        if again:  # scatter its inputs anew: the first copies may have died with a worker
            self.again.add(job.index)
            contents = self.shipment.contents
            fresh = {f"{k}-{self.token}-{job.index}": contents[k] for k in keys}
            sent = self.client.scatter(fresh, hash=False, timeout=self.bound)
            inputs = {k: sent[f"{k}-{self.token}-{job.index}"] for k in keys}
        key = f"cached-dist-backend-{self.token}-{job.index}" + ("-again" if again else "")
        size = len(self.shipment.contents[keys[0]]) if keys else 0  # big modules first
        future: Future[Any] = self.client.submit(
            compile_job, spec, *(inputs[k] for k in keys), key=key, pure=False, priority=size
        )
        self.pending[key] = job
        return future


def _identities(job_file: JobFile, jobs: Sequence[Job], check: str) -> dict[str, str]:
    """The toolchain identity of each compiler, as the key computes it; a compiler that
    cannot be identified is left out (its jobs are refused and compile here)."""
    found: dict[str, str] = {}
    for compiler in {job_file.command(job)[0] for job in jobs}:
        if compiler:
            with contextlib.suppress(OSError, toolchain.CompilerCheckError):  # cheap after keys
                found[compiler] = toolchain.identity(compiler, toolchain.NoMemo(), check)
    return found


def _write(path: str, data: bytes) -> None:
    """Atomically, so a reader never sees half an object."""
    tmp = f"{path}.cached-dist.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _reason(error: BaseException | None) -> str:
    if error is None:
        return "unknown error"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
