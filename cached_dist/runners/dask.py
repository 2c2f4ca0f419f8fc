"""Compiles jobs on a Dask cluster (``--dask-scheduler``), assuming no shared file system.

Each distinct input is scattered to the cluster once per link (:mod:`.shipment` decides what
and where); every job is a task that references the inputs it needs, runs
:func:`.dask_task.compile_job` in a sandbox on some worker, and returns the outputs' bytes,
which are written here as each task finishes, so results stream to the cache. Dask moves
the inputs between workers and reschedules the tasks of a worker that dies.

Importing distributed and connecting cost ~0.5-0.7 s, paid before any task could start. So
the first link that reaches a scheduler leaves a resident client behind
(:mod:`.dask_resident`), and later links hand it their jobs over a Unix socket: they never
import distributed. Both paths run the same :func:`dispatch`.

Anything the cluster does not do ends as a failed job, which the link compiles locally with
one warning: a scheduler that cannot be reached within a couple of seconds or has no
workers, a job whose files cannot be shipped, a worker with another toolchain, a task that
fails, a resident client that stops, and whatever is unfinished when ``--dask-timeout`` runs
out (no link hangs on a cluster). distributed is imported only when jobs must run, and only
where there is no resident client.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence

from ..jobfile import Job, JobFile
from ..keys import toolchain
from ..log import Log
from ..options import Options
from . import Result, dask_resident
from .dask_task import compile_with
from .shipment import Shipment, plan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distributed import Client, Future

    from . import Report

    #: What :func:`dispatch` yields for each job: (job index, the task's result or why not).
    Outcome = tuple[int, dict[str, Any] | str]

CONNECT_TIMEOUT = 2.0  # seconds; a scheduler that does not answer by then is down
_unreachable: dict[str, str] = {}  # address -> why: tried once per process, warned once


class DaskRunner:
    """Sends jobs to the Dask scheduler at ``address``; ``timeout`` bounds the whole batch."""

    def __init__(
        self, address: str, timeout: float, log: Log, debug: bool = False,
        compiler_check: str = "content", resident_idle: float = 0.0,
    ) -> None:  # fmt: skip
        self.address = address
        self.resident_idle = resident_idle  # 0: no resident client (seconds it waits idle)
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
                   options.compiler_check, options.dask_resident_idle)  # fmt: skip

    def run(self, job_file: JobFile, jobs: Sequence[Job], report: Report) -> None:
        started = time.monotonic()
        deadline = started + self.timeout
        resident = dask_resident.connect(self.address) if self.resident_idle else None
        client = None
        if resident is None:
            client, why = open_client(self.address, self.debug)
            if client is None:
                for job in jobs:
                    report(Result(job, 0.0, why))
                return
            how = "distributed imported, workers listed"
        else:
            how = f"through the resident client, pid {resident.pid}"
        self.log.detail(f"Dask: connected to {self.address} in "
                        f"{time.monotonic() - started:.2f} s ({how})")  # fmt: skip
        by_index = {job.index: job for job in jobs}
        reported: set[int] = set()

        def report_once(result: Result) -> None:
            reported.add(result.job.index)
            report(result)

        lost = "the Dask runner lost track of it"
        try:
            shipment = self._plan(job_file, jobs, by_index, report_once)
            if shipment.specs:
                if resident is not None:
                    events = resident.run(shipment, self.timeout, deadline, self.log.detail)
                else:
                    assert client is not None
                    events = dispatch(client, shipment, self.timeout, deadline, self.log.detail,
                                      self.debug)  # fmt: skip
                for index, outcome in events:
                    report_once(self._finish(by_index[index], outcome))
        except dask_resident.ResidentLost as e:
            lost = f"the resident Dask client stopped ({e})"
        finally:
            for job in jobs:  # belt and braces: every job is reported, whatever happened
                if job.index not in reported:
                    report(Result(job, 0.0, lost))
            if resident is not None:
                resident.close()
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close(timeout=CONNECT_TIMEOUT)
        if client is not None and self.resident_idle:
            # The cluster works: keep a client for the next links.
            dask_resident.start(self.address, self.resident_idle)

    def _plan(
        self, job_file: JobFile, jobs: Sequence[Job], by_index: dict[int, Job], report: Report
    ) -> Shipment:
        identities = _identities(job_file, jobs, self.check)
        shipment = self.shipment = plan(job_file, jobs, identities)
        for spec, _ in shipment.specs.values():
            spec["check"] = self.check
        for index, why in shipment.refused.items():
            report(Result(by_index[index], 0.0, f"cannot be compiled remotely: {why}"))
        if shipment.specs:
            self.log.detail(f"Dask: sending {len(shipment.contents)} distinct inputs, "
                            f"{shipment.shipped_bytes} bytes (the jobs name "
                            f"{shipment.input_bytes} bytes of inputs in all), for "
                            f"{len(shipment.specs)} jobs")  # fmt: skip
        return shipment

    def _finish(self, job: Job, outcome: dict[str, Any] | str) -> Result:
        if isinstance(outcome, str):
            return Result(job, 0.0, outcome)
        self.log.passthrough(os.path.basename(job.module), outcome["text"])
        if outcome["failure"] is not None:
            return Result(job, outcome["seconds"], outcome["failure"])
        try:
            for path, data in zip(job.outputs, outcome["outputs"], strict=True):
                _write(path, data)
        except (OSError, ValueError) as e:
            return Result(job, 0.0, f"Dask task finished, but {_reason(e)}")
        return Result(job, outcome["seconds"], by=f"on Dask worker {outcome['where']}",
                      output=outcome["text"], remote=True)  # fmt: skip


def open_client(address: str, debug: bool = False) -> tuple[Client | None, str]:
    """A client connected to a scheduler that has workers, or (None, why not)."""
    if address in _unreachable:
        return None, _unreachable[address]
    import logging

    import dask
    from distributed import Client

    if not debug:  # its own reports of connection trouble would repeat ours
        for name in ["distributed", *logging.root.manager.loggerDict]:
            if name.startswith("distributed"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
    dask.config.set({"distributed.comm.timeouts.connect": f"{CONNECT_TIMEOUT}s"})
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except Exception as e:
        why = f"cannot reach the Dask scheduler at {address} ({_reason(e)})"
        _unreachable[address] = why
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
        why = f"the Dask scheduler at {address} cannot run jobs ({error})"
        _unreachable[address] = why
        return None, why
    return client, ""


def dispatch(
    client: Client, shipment: Shipment, timeout: float, deadline: float,
    detail: Callable[[str], None], debug: bool = False,
) -> Generator[Outcome, None, None]:  # fmt: skip
    """Runs the shipment's jobs on the cluster by ``deadline`` (the link's --dask-timeout,
    ``timeout``, after it started); yields each job's outcome as it ends, every job once.
    Closing the iterator early cancels what is still running."""
    batch = _Batch(client, shipment, timeout, max(1.0, deadline - time.monotonic()))
    done: set[int] = set()
    try:
        batch.submit_all()
        for index, outcome in _collect(batch, deadline, detail):
            done.add(index)
            yield index, outcome
    except Exception as e:  # the cluster went away: the rest compile on the link machine
        if debug:
            raise
        batch.pending.clear()  # nothing to cancel on a cluster that is gone
        for index in shipment.specs:
            if index not in done:
                yield index, f"Dask failed: {_reason(e)}"
    finally:
        if batch.pending:  # interrupted: the cluster must not keep compiling for nobody
            with contextlib.suppress(Exception):
                client.cancel(list(batch.pending))


def _collect(batch: _Batch, deadline: float, detail: Callable[[str], None]) -> Iterator[Outcome]:
    from distributed import as_completed

    remaining = max(0.0, deadline - time.monotonic())
    waiting = as_completed(batch.futures, loop=batch.client.loop, timeout=remaining)
    try:
        for future in waiting:
            key = str(future.key)
            index = batch.pending[key]
            if future.status not in ("finished", "error") and index not in batch.again:
                # Lost, e.g. with the inputs a killed worker held: send it once more.
                name = batch.shipment.specs[index][0]["name"]
                detail(f"Dask task for {name} {future.status}; sending it again")
                waiting.add(batch.resubmit(index))  # pending under its new key
                del batch.pending[key]
                continue
            del batch.pending[key]
            yield index, _outcome(future, deadline)
    except TimeoutError:
        unfinished = list(batch.pending.items())
        batch.client.cancel([key for key, _ in unfinished])
        batch.pending.clear()
        for _, index in unfinished:
            yield index, f"not finished on Dask within --dask-timeout {batch.timeout:g} s"


def _outcome(future: Future[Any], deadline: float) -> dict[str, Any] | str:
    """The finished task's result, or why there is none."""
    if future.status != "finished":
        error: BaseException | None = None
        if future.status == "error":
            try:
                error = future.exception(timeout=CONNECT_TIMEOUT)
            except Exception as e:
                error = e
        reason = _reason(error) if error is not None else future.status
        return f"Dask task failed: {reason}"
    try:
        done: dict[str, Any] = future.result(timeout=max(1.0, deadline - time.monotonic()))
    except Exception as e:  # its outputs could not be fetched
        return f"Dask task finished, but {_reason(e)}"
    return done


class _Batch:
    """One batch on the cluster: its inputs scattered once, a task per job."""

    def __init__(self, client: Client, shipment: Shipment, timeout: float, bound: float) -> None:
        self.client = client
        self.timeout = timeout  # --dask-timeout, for messages
        self.bound = bound  # seconds a scatter may take (what is left of the timeout)
        self.shipment = shipment
        self.token = uuid.uuid4().hex[:12]
        self.inputs: dict[str, Future[Any]] = {}  # content key -> scattered data
        self.pending: dict[str, int] = {}  # task key -> job index
        self.futures: list[Future[Any]] = []
        self.again: set[int] = set()  # jobs sent a second time

    def submit_all(self) -> None:
        self.inputs = self.client.scatter(self.shipment.contents, hash=False, timeout=self.bound)
        # One graph update per size class (a power of two of the module's size), largest
        # first: a call per job cost the scheduler ~8 ms each on 2 cores, and the big jobs,
        # which bound the link, still start first.
        classes: dict[int, list[int]] = {}
        for index in self.shipment.specs:
            classes.setdefault(self._size_class(index), []).append(index)
        for size_class in sorted(classes, reverse=True):
            indices = classes[size_class]
            specs = [self.shipment.specs[i] for i in indices]
            keys = [self._key(i) for i in indices]
            futures = self.client.map(
                compile_with, [spec for spec, _ in specs],
                [[self.inputs[k] for k in contents] for _, contents in specs],
                key=keys, pure=False, priority=size_class,
            )  # fmt: skip
            for key, index, future in zip(keys, indices, futures, strict=True):
                self.pending[key] = index
                self.futures.append(future)

    def _size_class(self, index: int) -> int:
        """The bit length of the job's module size: its priority (bigger runs first)."""
        keys = self.shipment.specs[index][1]
        return len(self.shipment.contents[keys[0]]).bit_length() if keys else 0

    def _key(self, index: int, again: bool = False) -> str:
        return f"cached-dist-backend-{self.token}-{index}" + ("-again" if again else "")

    def resubmit(self, index: int) -> Future[Any]:
        """Sends a job once more, with fresh copies of its inputs: the first copies may have
        died with a worker."""
        spec, keys = self.shipment.specs[index]
        self.again.add(index)
        contents = self.shipment.contents
        fresh = {f"{k}-{self.token}-{index}": contents[k] for k in keys}
        sent = self.client.scatter(fresh, hash=False, timeout=self.bound)
        key = self._key(index, again=True)
        future: Future[Any] = self.client.submit(
            compile_with, spec, [sent[f"{k}-{self.token}-{index}"] for k in keys], key=key,
            pure=False, priority=self._size_class(index),
        )  # fmt: skip
        self.pending[key] = index
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
    if text and isinstance(error, OSError):  # the system's or Dask's words: 'Timed out ...'
        return error.strerror or text[0]
    # Dask's own errors (KilledWorker, CommClosedError) are named by their class.
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
