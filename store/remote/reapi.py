"""REAPI v2 servers (Bazel's Remote Execution API) as a cache tier, and the client both the
tier and the REAPI runner speak through.

URLs are Bazel's ``--remote_cache`` forms: ``grpc://HOST:PORT``, ``grpcs://HOST:PORT`` (TLS)
and ``unix:PATH``; an instance name and request headers (API keys) come with them.

An ActionCache entry answers an Action digest with an ActionResult naming output digests in
the CAS. What this tier stores under a cached-dist key K is a real Action describing the
backend compile (:meth:`ReapiStorage.describe` gives it the command line with the job's own
files by role): its Command names the files canonically (``module.o``, ``shard.thinlto.bc``,
``imports/0.o``, ``outputs/0.o``...) and carries the platform (``OSFamily``, ``ISA``,
``toolchain`` identity); its input root holds ``cached-dist.key``, a file naming K, the
XXH3-128 of every ingredient of docs/keys.md (module, imports, canonical shard...). So the
Action digest is a function of the key's ingredients, two keys never share one, and a link
computes it without reading any input again. The ActionResult lists the outputs under their
canonical names, the compiler's diagnostics as stderr, and cached-dist's entry metadata, K
included, as a StringValue in ``execution_metadata.auxiliary_metadata``: a result whose
metadata names another key is a miss (``wrong_key``), and so is one with another set of
outputs.

A lookup batch is one round of concurrent GetActionResult calls on one channel (asking the
server to inline the outputs), then one round of BatchReadBlobs for what was not inlined
(ByteStream Read for a blob above the server's batch limit). Every byte fetched is checked
against its SHA-256 digest, and the value handed to the chain is a regular entry
(:mod:`store.entry`), re-hashed again as the chain decodes it. Writes are FindMissingBlobs,
BatchUpdateBlobs (ByteStream Write above the limit) and UpdateActionResult: three rounds per
batch, behind the link. A server whose capabilities say ``update_enabled: false`` is used
read-only (``notice`` says so once).

A link's lookups (GetActionResult, BatchReadBlobs, ByteStream Read) go through
store/remote/reapi_lookup.py, which speaks gRPC over HTTP/2 itself: importing grpcio and the
generated messages would cost a full hit from this tier more than the rest of the link.
Writes use grpcio (store/remote/reapi_grpc.py), imported when the first write is made:
behind the link, and only by links that compiled something.
"""

from __future__ import annotations

import hashlib
import os

from ..jsonload import loads
from . import reapi_wire as wire
from .reapi_wire import BATCH_LIMIT
from .urls import RemoteError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .reapi_grpc import Client
    from .reapi_lookup import Lookup
    from .reapi_wire import ActionResult, Digest

#: The canonical file name of each role a job's own files play (cached_dist.keys.key.role).
_FIXED_NAMES = {"<module>": "module.o", "<shard>": "shard.thinlto.bc"}
_NUMBERED = {"import": "imports/{}.o", "extra": "extra/{}", "common": "common/{}",
             "output": "outputs/{}.o"}  # fmt: skip
KEY_FILE = "cached-dist.key"
_META_TYPE = "type.googleapis.com/google.protobuf.StringValue"
__all__ = ["BATCH_LIMIT", "ReapiStorage", "canonical_name", "host_platform", "parse_header"]


def canonical_name(role: str) -> str:
    """The file name a role (``<module>``, ``<import3>``, ``<output0>``...) has in Actions."""
    fixed = _FIXED_NAMES.get(role)
    if fixed is not None:
        return fixed
    word = role.strip("<>").rstrip("0123456789")
    return _NUMBERED[word].format(role[len(word) + 1 : -1])


def canonical_argument(argument: str) -> str:
    """An argument with a role (alone or after ``-flag=``) replaced by its canonical name."""
    flag, eq, value = argument.partition("=")
    role = value if eq else argument
    if role.startswith("<") and role.endswith(">"):
        try:
            name = canonical_name(role)
        except (KeyError, ValueError):
            return argument
        return f"{flag}={name}" if eq else name
    return argument


def sha256_digest(data: bytes) -> Digest:
    return hashlib.sha256(data).hexdigest(), len(data)


def host_platform() -> list[tuple[str, str]]:
    """OSFamily and ISA in the REAPI platform lexicon's spelling."""
    uname = os.uname()  # what platform.machine() and system() say, without importing it
    machine = uname.machine.lower()
    isa = {"x86_64": "x86-64", "amd64": "x86-64", "aarch64": "arm-a64",
           "arm64": "arm-a64"}.get(machine, machine)  # fmt: skip
    return [("ISA", isa), ("OSFamily", uname.sysname.lower())]


def parse_header(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` as gRPC metadata (names are lower case); ValueError without the value."""
    name, eq, value = text.partition("=")
    name = name.strip().lower()
    if not eq or not name or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-_." for c in name):
        raise ValueError(f"expected NAME=VALUE with a header name of letters, digits, -, _ "
                         f"or . (got {name or 'no name'!r})")  # fmt: skip
    if name.endswith("-bin"):
        raise ValueError(f"binary headers are not supported ({name})")
    return name, value


class ReapiStorage:
    """The tier: cached-dist keys as Actions in a REAPI ActionCache, outputs in its CAS."""

    claims = False

    def __init__(
        self, url: str, *, connect_timeout: float, timeout: float, instance_name: str = "",
        headers: Sequence[tuple[str, str]] = (), tool_version: str = "",
    ) -> None:  # fmt: skip
        from .reapi_lookup import Lookup

        self.url = url
        self._settings = {"connect_timeout": connect_timeout, "timeout": timeout,
                          "instance_name": instance_name, "headers": headers,
                          "tool_version": tool_version,
                          "invocation_id": os.urandom(16).hex()}  # fmt: skip
        self.lookup: Lookup = Lookup(url, **self._settings)  # type: ignore[arg-type]
        self._client: Client | None = None
        #: key -> (Action digest, the Action's own blobs, output names): see describe().
        self._actions: dict[str, tuple[Digest, dict[str, bytes], list[str]]] = {}
        self.notice = ""  # said once by the caller: why this tier is read-only
        self.wrong_key = 0  # results whose metadata named another key (misses)
        self.corrupt = 0  # inlined outputs that did not match their digests (misses)
        self.bytes_uploaded = 0
        self._read_only: bool | None = None
        self._platform = host_platform()

    @property
    def client(self) -> Client:
        """The grpcio client, for writes (imported on first use)."""
        if self._client is None:
            try:
                from .reapi_grpc import Client
            except ImportError as e:  # lookups need none of it, so opening did not say
                raise RemoteError(f"client library missing ({e.name}); "
                                  "install cached-dist[reapi]") from None  # fmt: skip
            self._client = Client(self.url, **self._settings)  # type: ignore[arg-type]
        return self._client

    @property
    def round_trips(self) -> int:
        writes = self._client.round_trips if self._client is not None else 0
        return self.lookup.round_trips + writes

    def describe(self, key: str, arguments: Sequence[str], outputs: int, toolchain: str) -> None:
        """What ``key`` stands for: the command line after the compiler with the job's own
        files as roles, its number of outputs and the toolchain identity."""
        if key in self._actions:
            return
        names = [canonical_name(f"<output{i}>") for i in range(outputs)]
        plat = wire.platform(sorted([*self._platform, ("toolchain", toolchain)]))
        command = wire.command(["clang", *map(canonical_argument, arguments)], names, plat)
        marker = f"cached-dist key {key}\n".encode()
        root = wire.directory([(KEY_FILE, sha256_digest(marker))])
        action = wire.action(sha256_digest(command), sha256_digest(root), plat)
        blobs = {hashlib.sha256(b).hexdigest(): b for b in (command, marker, root, action)}
        self._actions[key] = (sha256_digest(action), blobs, names)

    def action_digest(self, key: str) -> str | None:
        """The Action digest ``key`` is stored under (hash/size), once described."""
        found = self._actions.get(key)
        return f"{found[0][0]}/{found[0][1]}" if found else None

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Entry values for described keys; others (memos, keys never described) miss."""
        from ..entry import encode

        asked = [(i, key) for i, key in enumerate(keys) if key in self._actions]
        values: list[bytes | None] = [None] * len(keys)
        if not asked:
            return values
        names = sorted({n for _, key in asked for n in self._actions[key][2]})
        results = self.lookup.get_action_results([self._actions[key][0] for _, key in asked],
                                                 inline=names)  # fmt: skip
        usable: list[tuple[int, str, ActionResult, dict[str, object]]] = []
        wanted: list[Digest] = []
        for (i, key), result in zip(asked, results, strict=True):
            meta = self._meta(key, result) if result is not None else None
            if result is None or meta is None:
                continue
            usable.append((i, key, result, meta))
            wanted += [f.digest for f in result.output_files if not f.inlined]
        blobs = self.lookup.read_blobs(wanted) if wanted else {}
        for i, key, result, meta in usable:
            outputs: dict[str, bytes] = {}
            for n, name in enumerate(self._actions[key][2]):
                f = next(f for f in result.output_files if f.path == name)
                data = f.contents if f.inlined else blobs.get(f.digest[0])
                if data is None:
                    break  # evicted from the CAS (or damaged): a miss
                if len(data) != f.digest[1] or (
                    f.inlined and hashlib.sha256(data).hexdigest() != f.digest[0]
                ):
                    self.corrupt += 1
                    break
                outputs[f"output{n}"] = data
            else:
                values[i] = encode(key, outputs, meta)
        return values

    def _meta(self, key: str, result: ActionResult) -> dict[str, object] | None:
        """The entry metadata a result carries, if it answers ``key`` with its outputs."""
        names = self._actions[key][2]
        if result.exit_code != 0 or sorted(f.path for f in result.output_files) != sorted(names):
            return None
        for type_url, value in result.auxiliary:
            if type_url != _META_TYPE:
                continue
            try:
                found = loads(wire.read_string_value(value))
            except (ValueError, TypeError, RecursionError):  # wire.Malformed is a ValueError
                return None
            if not isinstance(found, dict) or not isinstance(found.get("meta"), dict):
                return None
            if found.get("cached-dist-key") != key:
                self.wrong_key += 1
                return None
            meta: dict[str, object] = found["meta"]
            return meta
        return None

    def put_many(self, items: Sequence[tuple[str, bytes]], release: str | None = None) -> None:
        """Uploads entry values of described keys (others are skipped): blobs, then results."""
        client = self.client  # first: says so if grpcio is missing
        import json

        from google.protobuf import any_pb2, wrappers_pb2

        from ..entry import Refused, decode
        from .reapi_grpc import digest_of
        from .reapi_pb import remote_execution_pb2 as re

        if self._read_only is None:
            self._read_only = not client.may_update()
            if self._read_only:
                self.notice = ("the server does not accept action cache updates "
                               "(update_enabled: false); using it read-only")  # fmt: skip
        if self._read_only:
            return
        blobs: dict[str, bytes] = {}
        results: list[tuple[re.Digest, re.ActionResult]] = []
        for key, value in items:
            described = self._actions.get(key)
            if described is None:
                continue
            try:
                outputs, meta = decode(value, key)
            except Refused:
                continue  # the local store exports only what it verified; belt and braces
            (h, size), action_blobs, names = described
            if sorted(outputs) != [f"output{n}" for n in range(len(names))]:
                continue
            result = re.ActionResult(exit_code=0)
            for n, name in enumerate(names):
                data = outputs[f"output{n}"][1]
                d = digest_of(data)
                blobs[d.hash] = data
                result.output_files.append(re.OutputFile(path=name, digest=d))
            printed = meta.get("diagnostics")
            if isinstance(printed, str) and printed:
                stderr = printed.encode("utf-8", "surrogateescape")
                result.stderr_digest.CopyFrom(digest_of(stderr))
                blobs[result.stderr_digest.hash] = stderr
            text = json.dumps({"cached-dist-key": key, "meta": meta}, separators=(",", ":"))
            result.execution_metadata.worker = os.uname().nodename
            result.execution_metadata.auxiliary_metadata.append(
                any_pb2.Any(type_url=_META_TYPE,
                            value=wrappers_pb2.StringValue(value=text).SerializeToString())
            )  # fmt: skip
            blobs.update(action_blobs)
            results.append((re.Digest(hash=h, size_bytes=size), result))
        if results:
            self.bytes_uploaded += client.upload(blobs)
            client.update_action_results(results)

    def close(self) -> None:
        self.lookup.close()
        if self._client is not None:
            self._client.close()
