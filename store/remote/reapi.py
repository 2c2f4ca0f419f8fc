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

grpc is imported only when a REAPI URL is opened.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import threading
import uuid

import grpc

from . import RemoteError
from .reapi_pb import remote_execution_pb2 as re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from typing import TypeVar

    from google.protobuf.message import Message

    _Req = TypeVar("_Req", bound=Message)
    _Resp = TypeVar("_Resp", bound=Message)

#: The most a batch call carries (request or response): under gRPC's default 4 MiB message
#: limit with room for the framing, unless the server states a smaller one.
BATCH_LIMIT = 4 * 2**20 - 64 * 2**10
#: The canonical file name of each role a job's own files play (cached_dist.keys.key.role).
_FIXED_NAMES = {"<module>": "module.o", "<shard>": "shard.thinlto.bc"}
_NUMBERED = {"import": "imports/{}.o", "extra": "extra/{}", "common": "common/{}",
             "output": "outputs/{}.o"}  # fmt: skip
KEY_FILE = "cached-dist.key"
_META_TYPE = "type.googleapis.com/google.protobuf.StringValue"
_AC = "/build.bazel.remote.execution.v2.ActionCache/"
_CAS = "/build.bazel.remote.execution.v2.ContentAddressableStorage/"
_EXEC = "/build.bazel.remote.execution.v2.Execution/"
_CAPS = "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities"
_BYTESTREAM = "/google.bytestream.ByteStream/"


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


def digest_of(data: bytes) -> re.Digest:
    return re.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def host_platform() -> list[tuple[str, str]]:
    """OSFamily and ISA in the REAPI platform lexicon's spelling."""
    machine = platform.machine().lower()
    isa = {"x86_64": "x86-64", "amd64": "x86-64", "aarch64": "arm-a64",
           "arm64": "arm-a64"}.get(machine, machine)  # fmt: skip
    return [("ISA", isa), ("OSFamily", platform.system().lower())]


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


class Client:
    """One channel to a REAPI server, with the calls cached-dist makes; every failure is a
    RemoteError whose message names no header value."""

    def __init__(
        self, url: str, *, connect_timeout: float, timeout: float, instance_name: str = "",
        headers: Sequence[tuple[str, str]] = (), tool_version: str = "",
    ) -> None:  # fmt: skip
        self.url = url
        self.instance = instance_name
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.round_trips = 0
        self._secrets = [value for _, value in headers if value]
        details = re.RequestMetadata(
            tool_details=re.ToolDetails(tool_name="cached-dist", tool_version=tool_version),
            tool_invocation_id=uuid.uuid4().hex,
        )
        self.metadata: tuple[tuple[str, str | bytes], ...] = (
            *headers,
            ("build.bazel.remote.execution.v2.requestmetadata-bin", details.SerializeToString()),
        )
        target, secure = _target(url)
        options = [("grpc.max_receive_message_length", 64 * 2**20),
                   ("grpc.max_send_message_length", 64 * 2**20),
                   ("grpc.enable_http_proxy", 0)]  # fmt: skip
        self.channel = (
            grpc.secure_channel(target, grpc.ssl_channel_credentials(), options)
            if secure
            else grpc.insecure_channel(target, options)
        )
        self._first = True  # the first call's deadline includes connecting
        self._caps: re.ServerCapabilities | None = None
        self._lock = threading.Lock()
        ch = self.channel
        self._get_result = _unary(ch, _AC + "GetActionResult", re.GetActionResultRequest,
                                  re.ActionResult)  # fmt: skip
        self._update_result = _unary(ch, _AC + "UpdateActionResult",
                                     re.UpdateActionResultRequest, re.ActionResult)  # fmt: skip
        self._find_missing = _unary(ch, _CAS + "FindMissingBlobs", re.FindMissingBlobsRequest,
                                    re.FindMissingBlobsResponse)  # fmt: skip
        self._batch_update = _unary(ch, _CAS + "BatchUpdateBlobs", re.BatchUpdateBlobsRequest,
                                    re.BatchUpdateBlobsResponse)  # fmt: skip
        self._batch_read = _unary(ch, _CAS + "BatchReadBlobs", re.BatchReadBlobsRequest,
                                  re.BatchReadBlobsResponse)  # fmt: skip
        self._capabilities = _unary(ch, _CAPS, re.GetCapabilitiesRequest, re.ServerCapabilities)
        self._execute = ch.unary_stream(_EXEC + "Execute",
                                        request_serializer=re.ExecuteRequest.SerializeToString,
                                        response_deserializer=_operation_from_string)  # fmt: skip
        self._wait = ch.unary_stream(
            _EXEC + "WaitExecution", request_serializer=re.WaitExecutionRequest.SerializeToString,
            response_deserializer=_operation_from_string)  # fmt: skip

    # -- errors and deadlines ---------------------------------------------------------------

    def deadline(self) -> float:
        """Seconds a call may take: the first also connects."""
        return self.timeout + (self.connect_timeout if self._first else 0.0)

    def error(self, e: BaseException, what: str) -> RemoteError:
        if isinstance(e, grpc.RpcError) and isinstance(e, grpc.Call):
            code = e.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                text = f"{what} timed out (after {self.deadline():g} s)"
            else:
                name = code.name if code is not None else "UNKNOWN"
                text = f"{what}: {name}: {(e.details() or '').strip()}"
        else:
            text = f"{what}: {type(e).__name__}: {e}"
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return RemoteError(text.splitlines()[0] if text else what)

    def _round(self) -> None:
        self.round_trips += 1

    def _done(self) -> None:
        self._first = False

    # -- capabilities -----------------------------------------------------------------------

    def capabilities_future(self) -> grpc.Future[re.ServerCapabilities] | None:
        """A GetCapabilities call in flight, to overlap with the first real round."""
        if self._caps is not None:
            return None
        return self._capabilities.future(
            re.GetCapabilitiesRequest(instance_name=self.instance), timeout=self.deadline(),
            metadata=self.metadata,
        )  # fmt: skip

    def capabilities(self, pending: grpc.Future[re.ServerCapabilities] | None = None) -> (
        re.ServerCapabilities
    ):  # fmt: skip
        if self._caps is None:
            try:
                if pending is None:
                    self._round()
                    pending = self.capabilities_future()
                assert pending is not None
                self._caps = pending.result()
            except grpc.RpcError as e:
                raise self.error(e, "GetCapabilities") from None
            self._done()
            functions = self._caps.cache_capabilities.digest_functions
            if functions and re.DigestFunction.SHA256 not in functions:
                raise RemoteError("the server does not offer SHA-256 digests")
        return self._caps

    def batch_limit(self) -> int:
        stated = self._caps.cache_capabilities.max_batch_total_size_bytes if self._caps else 0
        return min(BATCH_LIMIT, stated - 64 * 2**10) if stated > 128 * 2**10 else BATCH_LIMIT

    def may_update(self) -> bool:
        caps = self.capabilities()
        cache = caps.cache_capabilities
        return not cache.HasField("action_cache_update_capabilities") or bool(
            cache.action_cache_update_capabilities.update_enabled
        )

    # -- the action cache -------------------------------------------------------------------

    def get_action_results(
        self, digests: Sequence[re.Digest], inline: Sequence[str] = ()
    ) -> list[re.ActionResult | None]:
        """One round of concurrent lookups; None where the cache has no result."""
        if not digests:
            return []
        self._round()
        caps = self.capabilities_future()
        calls = [
            self._get_result.future(
                re.GetActionResultRequest(
                    instance_name=self.instance, action_digest=d, inline_stderr=True,
                    inline_output_files=list(inline),
                ),
                timeout=self.deadline(), metadata=self.metadata,
            )
            for d in digests
        ]  # fmt: skip
        found: list[re.ActionResult | None] = []
        error: RemoteError | None = None
        for call in calls:
            try:
                found.append(call.result())
            except grpc.RpcError as e:
                if isinstance(e, grpc.Call) and e.code() == grpc.StatusCode.NOT_FOUND:
                    found.append(None)
                elif error is None:
                    error = self.error(e, "GetActionResult")
        if error is not None:
            if caps is not None:
                caps.cancel()
            raise error
        self._done()
        if caps is not None:  # lookups need none: on failure, the first upload asks again
            with contextlib.suppress(RemoteError):
                self.capabilities(caps)
        return found

    def update_action_results(self, items: Sequence[tuple[re.Digest, re.ActionResult]]) -> None:
        if not items:
            return
        self._round()
        calls = [
            self._update_result.future(
                re.UpdateActionResultRequest(instance_name=self.instance, action_digest=d,
                                             action_result=r),
                timeout=self.deadline(), metadata=self.metadata,
            )
            for d, r in items
        ]  # fmt: skip
        try:
            for call in calls:
                call.result()
        except grpc.RpcError as e:
            raise self.error(e, "UpdateActionResult") from None
        self._done()

    # -- the CAS ----------------------------------------------------------------------------

    def read_blobs(self, digests: Iterable[re.Digest]) -> dict[str, bytes]:
        """hash -> bytes for each digest the CAS has, every blob checked against its digest:
        one missing or damaged is left out (a miss for whoever needs it)."""
        wanted = {d.hash: d for d in digests if d.size_bytes > 0}
        found: dict[str, bytes] = {d.hash: b"" for d in digests if d.size_bytes == 0}
        if not wanted:
            return found
        limit = self.batch_limit()
        batches: list[list[re.Digest]] = [[]]
        size = 0
        large = []
        for d in wanted.values():
            if d.size_bytes > limit:
                large.append(d)
                continue
            if size + d.size_bytes > limit and batches[-1]:
                batches.append([])
                size = 0
            batches[-1].append(d)
            size += d.size_bytes
        self._round()
        calls = [
            self._batch_read.future(
                re.BatchReadBlobsRequest(instance_name=self.instance, digests=batch),
                timeout=self.deadline(), metadata=self.metadata,
            )
            for batch in batches
            if batch
        ]  # fmt: skip
        try:
            for call in calls:
                for response in call.result().responses:
                    if response.status.code == 0:  # else NOT_FOUND (evicted), say: left out
                        found[response.digest.hash] = response.data
        except grpc.RpcError as e:
            raise self.error(e, "BatchReadBlobs") from None
        for d in large:
            data = self.read_stream(d)
            if data is not None:
                found[d.hash] = data
        for h, d in wanted.items():
            data = found.get(h)
            if data is not None and (
                len(data) != d.size_bytes or hashlib.sha256(data).hexdigest() != h
            ):
                del found[h]
        self._done()
        return found

    def read_stream(self, d: re.Digest) -> bytes | None:
        """A blob by ByteStream Read (above the batch limit); None if the CAS lacks it."""
        from .reapi_pb import bytestream_pb2 as bs  # only for large blobs: ~10 ms to load

        read = self.channel.unary_stream(
            _BYTESTREAM + "Read", request_serializer=bs.ReadRequest.SerializeToString,
            response_deserializer=bs.ReadResponse.FromString)  # fmt: skip
        name = f"{self.instance}/blobs/{d.hash}/{d.size_bytes}".lstrip("/")
        parts = []
        try:
            for chunk in read(bs.ReadRequest(resource_name=name), timeout=self.deadline(),
                              metadata=self.metadata):  # fmt: skip
                parts.append(chunk.data)
        except grpc.RpcError as e:
            if isinstance(e, grpc.Call) and e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise self.error(e, "ByteStream Read") from None
        return b"".join(parts)

    def upload(self, blobs: dict[str, bytes]) -> int:
        """Puts what the CAS lacks of ``blobs`` (hash -> bytes); returns the bytes sent."""
        if not blobs:
            return 0
        digests = [re.Digest(hash=h, size_bytes=len(data)) for h, data in blobs.items()]
        self._round()
        try:
            missing = self._find_missing(
                re.FindMissingBlobsRequest(instance_name=self.instance, blob_digests=digests),
                timeout=self.deadline(), metadata=self.metadata,
            ).missing_blob_digests  # fmt: skip
        except grpc.RpcError as e:
            raise self.error(e, "FindMissingBlobs") from None
        limit = self.batch_limit()
        batches: list[list[re.BatchUpdateBlobsRequest.Request]] = [[]]
        size = sent = 0
        large = []
        for d in missing:
            data = blobs[d.hash]
            sent += len(data)
            if len(data) > limit:
                large.append(d)
                continue
            if size + len(data) > limit and batches[-1]:
                batches.append([])
                size = 0
            batches[-1].append(re.BatchUpdateBlobsRequest.Request(digest=d, data=data))
            size += len(data)
        if batches[-1]:
            self._round()
        calls = [
            self._batch_update.future(
                re.BatchUpdateBlobsRequest(instance_name=self.instance, requests=batch),
                timeout=self.deadline(), metadata=self.metadata,
            )
            for batch in batches
            if batch
        ]  # fmt: skip
        try:
            for call in calls:
                for response in call.result().responses:
                    if response.status.code != 0:
                        raise RemoteError(f"BatchUpdateBlobs: {_code_name(response.status.code)}"
                                          f" {response.status.message}".rstrip())  # fmt: skip
        except grpc.RpcError as e:
            raise self.error(e, "BatchUpdateBlobs") from None
        for d in large:
            self.write_stream(d, blobs[d.hash])
        self._done()
        return sent

    def write_stream(self, d: re.Digest, data: bytes) -> None:
        from .reapi_pb import bytestream_pb2 as bs

        write = self.channel.stream_unary(
            _BYTESTREAM + "Write", request_serializer=bs.WriteRequest.SerializeToString,
            response_deserializer=bs.WriteResponse.FromString)  # fmt: skip
        name = f"{self.instance}/uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}".lstrip("/")
        step = 1 << 20

        def chunks() -> Iterator[bs.WriteRequest]:
            for offset in range(0, len(data), step):
                last = offset + step >= len(data)
                yield bs.WriteRequest(resource_name=name if offset == 0 else "",
                                      write_offset=offset, finish_write=last,
                                      data=data[offset : offset + step])  # fmt: skip

        try:
            write(chunks(), timeout=self.deadline(), metadata=self.metadata)
        except grpc.RpcError as e:
            raise self.error(e, "ByteStream Write") from None

    # -- execution --------------------------------------------------------------------------

    def execute(
        self, action: re.Digest, *, skip_cache: bool, timeout: float
    ) -> Iterator[object]:  # operations (google.longrunning.Operation)
        """Execute's stream of Operation messages (grpc.RpcError passes through)."""
        request = re.ExecuteRequest(instance_name=self.instance, action_digest=action,
                                    skip_cache_lookup=skip_cache)  # fmt: skip
        stream: Iterator[object] = self._execute(request, timeout=timeout, metadata=self.metadata)
        return stream

    def wait_execution(self, name: str, *, timeout: float) -> Iterator[object]:
        stream: Iterator[object] = self._wait(re.WaitExecutionRequest(name=name),
                                              timeout=timeout, metadata=self.metadata)  # fmt: skip
        return stream

    def close(self) -> None:
        self.channel.close()


def _operation_from_string(data: bytes) -> object:
    from google.longrunning import operations_pb2

    operation: object = operations_pb2.Operation.FromString(data)
    return operation


def _unary(
    channel: grpc.Channel, path: str, request: type[_Req], response: type[_Resp]
) -> grpc.UnaryUnaryMultiCallable[_Req, _Resp]:
    return channel.unary_unary(path, request_serializer=request.SerializeToString,
                               response_deserializer=response.FromString)  # fmt: skip


_CODES = {c.value[0]: c.name for c in grpc.StatusCode}


def _code_name(code: int) -> str:
    return _CODES.get(code, f"code {code}")


def _target(url: str) -> tuple[str, bool]:
    """(gRPC target, TLS?) of a grpc://, grpcs:// or unix: URL; RemoteError if malformed."""
    lower = url.lower()
    if lower.startswith("unix:"):
        path = url[5:]
        if path.startswith("//"):
            path = path[2:]
        if not path.startswith("/"):
            raise RemoteError("a unix: URL needs an absolute socket path (unix:/path/to/socket)")
        return f"unix:{path}", False
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    if not host or "@" in host:
        raise RemoteError("expected grpc://HOST:PORT or grpcs://HOST:PORT")
    if ":" not in host.rsplit("]", 1)[-1]:
        host += ":443" if scheme.lower() == "grpcs" else ":80"
    return host, scheme.lower() == "grpcs"


class ReapiStorage:
    """The tier: cached-dist keys as Actions in a REAPI ActionCache, outputs in its CAS."""

    claims = False

    def __init__(
        self, url: str, *, connect_timeout: float, timeout: float, instance_name: str = "",
        headers: Sequence[tuple[str, str]] = (), tool_version: str = "",
    ) -> None:  # fmt: skip
        self.url = url
        self.client = Client(url, connect_timeout=connect_timeout, timeout=timeout,
                             instance_name=instance_name, headers=headers,
                             tool_version=tool_version)  # fmt: skip
        #: key -> (Action digest, the Action's own blobs, output names): see describe().
        self._actions: dict[str, tuple[re.Digest, dict[str, bytes], list[str]]] = {}
        self.notice = ""  # said once by the caller: why this tier is read-only
        self.wrong_key = 0  # results whose metadata named another key (misses)
        self.corrupt = 0  # inlined outputs that did not match their digests (misses)
        self.bytes_uploaded = 0
        self._read_only: bool | None = None
        self._platform = host_platform()

    @property
    def round_trips(self) -> int:
        return self.client.round_trips

    def describe(self, key: str, arguments: Sequence[str], outputs: int, toolchain: str) -> None:
        """What ``key`` stands for: the command line after the compiler with the job's own
        files as roles, its number of outputs and the toolchain identity."""
        if key in self._actions:
            return
        names = [canonical_name(f"<output{i}>") for i in range(outputs)]
        properties = sorted([*self._platform, ("toolchain", toolchain)])
        plat = re.Platform(properties=[re.Platform.Property(name=n, value=v)
                                       for n, v in properties])  # fmt: skip
        command = re.Command(arguments=["clang", *map(canonical_argument, arguments)],
                             output_paths=names, platform=plat).SerializeToString()  # fmt: skip
        marker = f"cached-dist key {key}\n".encode()
        root = re.Directory(
            files=[re.FileNode(name=KEY_FILE, digest=digest_of(marker))]
        ).SerializeToString()
        action = re.Action(command_digest=digest_of(command), input_root_digest=digest_of(root),
                           platform=plat).SerializeToString()  # fmt: skip
        blobs = {hashlib.sha256(b).hexdigest(): b for b in (command, marker, root, action)}
        self._actions[key] = (digest_of(action), blobs, names)

    def action_digest(self, key: str) -> str | None:
        """The Action digest ``key`` is stored under (hash/size), once described."""
        found = self._actions.get(key)
        return f"{found[0].hash}/{found[0].size_bytes}" if found else None

    def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Entry values for described keys; others (memos, keys never described) miss."""
        from ..entry import encode

        asked = [(i, key) for i, key in enumerate(keys) if key in self._actions]
        values: list[bytes | None] = [None] * len(keys)
        if not asked:
            return values
        names = sorted({n for _, key in asked for n in self._actions[key][2]})
        results = self.client.get_action_results([self._actions[key][0] for _, key in asked],
                                                 inline=names)  # fmt: skip
        usable: list[tuple[int, str, re.ActionResult, dict[str, object]]] = []
        wanted: list[re.Digest] = []
        for (i, key), result in zip(asked, results, strict=True):
            meta = self._meta(key, result) if result is not None else None
            if result is None or meta is None:
                continue
            usable.append((i, key, result, meta))
            wanted += [f.digest for f in result.output_files if not _inlined(f)]
        blobs = self.client.read_blobs(wanted) if wanted else {}
        for i, key, result, meta in usable:
            outputs: dict[str, bytes] = {}
            for n, name in enumerate(self._actions[key][2]):
                f = next(f for f in result.output_files if f.path == name)
                data = f.contents if _inlined(f) else blobs.get(f.digest.hash)
                if data is None:
                    break  # evicted from the CAS (or damaged): a miss
                if len(data) != f.digest.size_bytes or (
                    _inlined(f) and hashlib.sha256(data).hexdigest() != f.digest.hash
                ):
                    self.corrupt += 1
                    break
                outputs[f"output{n}"] = data
            else:
                values[i] = encode(key, outputs, meta)
        return values

    def _meta(self, key: str, result: re.ActionResult) -> dict[str, object] | None:
        """The entry metadata a result carries, if it answers ``key`` with its outputs."""
        names = self._actions[key][2]
        if result.exit_code != 0 or sorted(f.path for f in result.output_files) != sorted(names):
            return None
        for extra in result.execution_metadata.auxiliary_metadata:
            if extra.type_url != _META_TYPE:
                continue
            from google.protobuf import wrappers_pb2

            try:
                text = wrappers_pb2.StringValue.FromString(extra.value).value
                found = json.loads(text)
            except (ValueError, TypeError):
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
        from google.protobuf import any_pb2, wrappers_pb2

        from ..entry import Refused, decode

        if self._read_only is None:
            self._read_only = not self.client.may_update()
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
            digest, action_blobs, names = described
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
            results.append((digest, result))
        if results:
            self.bytes_uploaded += self.client.upload(blobs)
            self.client.update_action_results(results)

    def close(self) -> None:
        self.client.close()


def _inlined(f: re.OutputFile) -> bool:
    return bool(f.contents) or f.digest.size_bytes == 0
