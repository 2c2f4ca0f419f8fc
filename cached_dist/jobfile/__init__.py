"""Job files: both DTLTO schemas parsed into one model, and written back in LLD's schema.

LLD 21/22 write ``common.args/inputs`` plus per-job ``args/inputs/outputs`` with reserved
positions (inputs[0] module, inputs[1] shard, inputs[2:] imports; outputs[0] object). The
design document's schema has a command-line template with placeholders and per-job arrays by
role. Both become :class:`JobFile`, so nothing downstream knows which one it came from.
"""

from __future__ import annotations

import os
import stat

from store.jsonload import detect_encoding, loads

from ..errors import JobFileError

try:
    from . import _scan  # the C scanner of LLD's plain form (setup.py builds it)
except ImportError:  # built without a C compiler: the Python parser reads every file
    _scan = None  # type: ignore[assignment]

TYPE_CHECKING = False  # typing and dataclasses cost ~15 ms of a ~100 ms cache hit
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, Literal

    Schema = Literal["lld", "design"]
    Strings = tuple[str, ...]
    Scanned = tuple[str | None, str | None, Strings, Strings,
                    list[tuple[Strings, Strings, Strings]]]  # fmt: skip


class Job:
    """One backend compilation: its command line and its files by role."""

    __slots__ = ("args", "extra_inputs", "imports", "index", "module", "outputs", "shard")

    def __init__(
        self,
        index: int,
        args: tuple[str, ...],  # the job's own part; the full command is common_args + args
        module: str,
        shard: str | None,
        imports: tuple[str, ...],
        extra_inputs: tuple[str, ...],
        outputs: tuple[str, ...],
    ) -> None:
        self.index = index
        self.args = args
        self.module = module
        self.shard = shard
        self.imports = imports
        self.extra_inputs = extra_inputs
        self.outputs = outputs

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"Job(index={self.index}, module={self.module!r}, outputs={self.outputs!r})"

    def replace(self, *, args: tuple[str, ...], outputs: tuple[str, ...]) -> Job:
        """The same job with another command tail and other outputs."""
        return Job(self.index, args, self.module, self.shard, self.imports,
                   self.extra_inputs, outputs)  # fmt: skip

    @property
    def primary_output(self) -> str:
        return self.outputs[0]

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every input in LLD's reserved order: module, shard, imports, then extras."""
        shard = (self.shard,) if self.shard is not None else ()
        return (self.module, *shard, *self.imports, *self.extra_inputs)


def _lld_job(
    index: int, args: tuple[str, ...], inputs: tuple[str, ...], outputs: tuple[str, ...]
) -> Job:
    """A job of LLD's schema, whose inputs are the module, the shard, then the imports."""
    return Job(index, args, inputs[0], inputs[1] if len(inputs) > 1 else None, inputs[2:], (),
               outputs)  # fmt: skip


class JobFile:
    """A whole job file: what every job shares, and the jobs."""

    __slots__ = ("common_args", "common_inputs", "jobs", "linker_output", "linker_version",
                 "path", "schema")  # fmt: skip

    def __init__(
        self,
        path: str,
        schema: Schema,
        linker_output: str,
        linker_version: str | None,
        common_args: tuple[str, ...],
        common_inputs: tuple[str, ...],
        jobs: tuple[Job, ...],
    ) -> None:
        self.path = path
        self.schema = schema
        self.linker_output = linker_output
        self.linker_version = linker_version
        self.common_args = common_args
        self.common_inputs = common_inputs
        self.jobs = jobs

    def command(self, job: Job) -> list[str]:
        return [*self.common_args, *job.args]


def load(path: str, on_read: Callable[[bytes], object] | None = None) -> JobFile:
    """Reads and validates a job file; every defect is a :class:`JobFileError` naming the spot.
    ``on_read`` is shown its bytes before they are parsed (what a served link's early worker
    is told: cached_dist/link/flow.py)."""
    try:
        # stat before open: opening a FIFO waits for a writer, and a device may never end.
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError
        if not stat.S_ISREG(mode):
            raise JobFileError(f"job file is not a regular file: {path}")
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise JobFileError(f"job file not found: {path}") from None
    except IsADirectoryError:
        raise JobFileError(f"job file is a directory: {path}") from None
    except OSError as e:
        raise JobFileError(f"cannot read job file {path}: {e.strerror}") from None
    if on_read is not None:
        on_read(raw)
    if _scan is not None:
        scanned = _scan.lld(raw)
        if scanned is not None:
            return _scanned(path, scanned)
    try:
        # One copy of the text at a time: a 100,000-job file is ~30 MB of it.
        text = raw.decode(detect_encoding(raw), "surrogatepass")  # as json.loads(raw)
        del raw
        parser = _Parser(path)
        document = loads(text, object_hook=parser.early_job)
        del text
    except (ValueError, RecursionError) as e:
        raise JobFileError(f"job file {path}: invalid JSON: {e}") from None
    return parser.parse(document)


def _scanned(path: str, scanned: Scanned) -> JobFile:
    """The job file the C scanner read (``_scan.lld``): what :class:`_Parser` makes of it."""
    linker_output, linker_version, common_args, common_inputs, raw_jobs = scanned
    jobs = tuple([_lld_job(i, args, ins, outs) for i, (args, ins, outs) in enumerate(raw_jobs)])
    return JobFile(path, "lld", linker_output or "", linker_version, common_args, common_inputs,
                   jobs)  # fmt: skip


def parse(document: object, path: str = "<job file>") -> JobFile:
    return _Parser(path).parse(document)


class _Parser:
    """Equal strings become one object: a module imported by thousands of jobs is named
    thousands of times."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.names: dict[str, str] = {}

    def early_job(self, table: dict[str, Any]) -> object:
        """``json.loads``' object hook: a well-formed LLD job becomes a :class:`Job` (index
        set later) the moment it is decoded, so a huge job file is never held as JSON objects
        and as jobs at once. Anything else stays a dict, for :meth:`lld` to judge and name."""
        if len(table) != 3:
            return table
        args, inputs, outputs = table.get("args"), table.get("inputs"), table.get("outputs")
        if not (isinstance(args, list) and isinstance(inputs, list) and inputs
                and isinstance(outputs, list) and outputs):  # fmt: skip
            return table
        # Strings only (join refuses anything else), no NUL, no empty path: checked in C,
        # not string by string (a job names its module and every module it imports).
        try:
            text = "".join(args) + "".join(inputs) + "".join(outputs)
        except TypeError:
            return table
        if "\0" in text or "" in inputs or "" in outputs:
            return table
        names = self.names
        return _lld_job(-1, tuple([names.setdefault(a, a) for a in args]),
                        tuple([names.setdefault(p, p) for p in inputs]),
                        tuple([names.setdefault(p, p) for p in outputs]))  # fmt: skip

    def fail(self, where: str, problem: str) -> JobFileError:
        return JobFileError(f"job file {self.path}: {where}: {problem}")

    def obj(self, value: object, where: str) -> dict[str, Any]:
        if isinstance(value, Job):  # decoded early; this spot wants the object it came from
            value = {"args": list(value.args), "inputs": list(value.inputs),
                     "outputs": list(value.outputs)}  # fmt: skip
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {_kind(value)}")
        return value

    def strings(
        self, value: object, where: str, *, min_len: int = 0, paths: bool = True
    ) -> tuple[str, ...]:
        """A list of strings; ``paths`` (inputs, outputs) may not hold empty ones. Arguments
        may: LLD writes "" as the compiler when no --thinlto-remote-compiler is given."""
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list of strings, got {_kind(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(f"{where}[{i}]", f"expected a string, got {_kind(item)}")
            if paths and not item:
                raise self.fail(f"{where}[{i}]", "empty path")
            if "\0" in item:  # no path or command-line argument can hold one
                raise self.fail(f"{where}[{i}]", "contains a NUL character")
        if len(value) < min_len:
            raise self.fail(where, f"expected at least {min_len} entries, got {len(value)}")
        names = self.names
        return tuple([names.setdefault(item, item) for item in value])

    def optional_str(self, table: dict[str, Any], key: str, where: str) -> str | None:
        value = table.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(f"{where}.{key}", f"expected a string, got {_kind(value)}")
        return value

    def parse(self, document: object) -> JobFile:
        top = self.obj(document, "top level")
        if "common" not in top:
            raise self.fail("top level", "missing field 'common'")
        if "jobs" not in top:
            raise self.fail("top level", "missing field 'jobs'")
        common = self.obj(top["common"], "common")
        jobs = top["jobs"]
        if not isinstance(jobs, list):
            raise self.fail("jobs", f"expected a list, got {_kind(jobs)}")
        if "args" not in common:
            raise self.fail("common", "missing field 'args'")
        design = any(
            isinstance(j, dict) and ("primary_input" in j or "primary_output" in j) for j in jobs
        ) or (isinstance(common["args"], list) and any(isinstance(a, list) for a in common["args"]))
        return self.design(common, jobs) if design else self.lld(common, jobs)

    def common_inputs(self, common: dict[str, Any]) -> tuple[str, ...]:
        return self.strings(common.get("inputs", []), "common.inputs")

    def lld(self, common: dict[str, Any], raw_jobs: list[Any]) -> JobFile:
        common_args = self.strings(common["args"], "common.args", paths=False)
        jobs = []
        for i, raw in enumerate(raw_jobs):
            if isinstance(raw, Job):
                raw.index = i
                jobs.append(raw)
                continue
            where = f"jobs[{i}]"
            job = self.obj(raw, where)
            for key in ("args", "inputs", "outputs"):
                if key not in job:
                    raise self.fail(where, f"missing field '{key}'")
            args = self.strings(job["args"], f"{where}.args", paths=False)
            inputs = self.strings(job["inputs"], f"{where}.inputs", min_len=1)
            outputs = self.strings(job["outputs"], f"{where}.outputs", min_len=1)
            jobs.append(_lld_job(i, args, inputs, outputs))
        return JobFile(
            self.path, "lld", self.optional_str(common, "linker_output", "common") or "",
            self.optional_str(common, "linker_version", "common"), common_args,
            self.common_inputs(common), tuple(jobs),
        )  # fmt: skip

    def design(self, common: dict[str, Any], raw_jobs: list[Any]) -> JobFile:
        template = common["args"]
        if not isinstance(template, list):
            raise self.fail("common.args", f"expected a list, got {_kind(template)}")
        for i, item in enumerate(template):
            self.check_template_item(item, f"common.args[{i}]")
        # The template's leading plain strings are the same for every job: LLD's common.args.
        split = next((i for i, a in enumerate(template) if not isinstance(a, str)), len(template))
        jobs = []
        for i, raw in enumerate(raw_jobs):
            where = f"jobs[{i}]"
            job = self.obj(raw, where)
            arrays: dict[str, tuple[str, ...]] = {}
            for key, minimum in (("primary_input", 1), ("primary_output", 1)):
                if key not in job:
                    raise self.fail(where, f"missing field '{key}'")
                arrays[key] = self.strings(job[key], f"{where}.{key}", min_len=minimum)
            for key in ("summary_index", "imports", "additional_inputs"):
                arrays[key] = self.strings(job.get(key, []), f"{where}.{key}")
            for key, value in job.items():  # other per-job arrays may feed placeholders
                if key not in arrays and isinstance(value, list):
                    arrays[key] = self.strings(value, f"{where}.{key}")
            args = tuple(
                self.expand(item, arrays, f"{where}: common.args[{split + k}]")
                for k, item in enumerate(template[split:])
            )
            module, *more_modules = arrays["primary_input"]
            shard = arrays["summary_index"][0] if arrays["summary_index"] else None
            jobs.append(
                Job(
                    i, args, module, shard, arrays["imports"],
                    (*more_modules, *arrays["summary_index"][1:], *arrays["additional_inputs"]),
                    arrays["primary_output"],
                )
            )  # fmt: skip
        return JobFile(
            self.path, "design", self.optional_str(common, "linker_output", "common") or "",
            self.optional_str(common, "linker_version", "common"),
            tuple(template[:split]), self.common_inputs(common), tuple(jobs),
        )  # fmt: skip

    def check_template_item(self, item: object, where: str) -> None:
        if isinstance(item, str):
            if "\0" in item:
                raise self.fail(where, "contains a NUL character")
            return
        if not isinstance(item, list) or not item or not isinstance(item[0], str):
            raise self.fail(where, 'expected a string or a placeholder ["field", ...]')
        for k, piece in enumerate(item[1:], 1):
            if isinstance(piece, bool) or not isinstance(piece, str | int):
                raise self.fail(f"{where}[{k}]", f"expected a string or index, got {_kind(piece)}")
            if isinstance(piece, str) and "\0" in piece:
                raise self.fail(f"{where}[{k}]", "contains a NUL character")

    def expand(self, item: str | list[Any], arrays: dict[str, tuple[str, ...]], where: str) -> str:
        """``["summary_index", "-fthinlto-index=", 0]`` -> "-fthinlto-index=" + summary_index[0]."""
        if isinstance(item, str):
            return item
        name, *pieces = item
        if name not in arrays:
            raise self.fail(where, f"placeholder refers to unknown field '{name}'")
        array = arrays[name]
        out = []
        for piece in pieces:
            if isinstance(piece, str):
                out.append(piece)
            elif 0 <= piece < len(array):
                out.append(array[piece])
            else:
                raise self.fail(
                    where, f"placeholder refers to {name}[{piece}], which does not exist"
                )
        return "".join(out)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)  # fmt: skip


def write_lld(job_file: JobFile, jobs: Sequence[Job], path: str) -> None:
    """Writes ``jobs`` as an LLD-schema job file, the form any DTLTO distributor reads."""
    common: dict[str, Any] = {
        "linker_output": job_file.linker_output,
        "args": list(job_file.common_args),
        "inputs": list(job_file.common_inputs),
    }
    if job_file.linker_version is not None:
        common["linker_version"] = job_file.linker_version
    document = {
        "common": common,
        "jobs": [
            {"args": list(j.args), "inputs": list(j.inputs), "outputs": list(j.outputs)}
            for j in jobs
        ],
    }
    import json  # writing job files is for the wrapped distributor, never a full hit

    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1)
    os.replace(tmp, path)
