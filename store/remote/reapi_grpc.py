"""The grpcio client of a REAPI server: writes (FindMissingBlobs, BatchUpdateBlobs, ByteStream
Write, UpdateActionResult), execution (Execute, WaitExecution), and lookups for tools and
tests. A link's own lookups go through store/remote/reapi_lookup.py, which imports neither
grpcio nor protobuf; this module is imported when a link writes or executes.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import uuid

import grpc

from .reapi_pb import remote_execution_pb2 as re
from .reapi_session import Session
from .reapi_wire import BATCH_LIMIT, packed
from .urls import RemoteError, plain

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from typing import Any, TypeVar

    from google.protobuf.message import Message

    _Req = TypeVar("_Req", bound=Message)
    _Resp = TypeVar("_Resp", bound=Message)

_AC = "/build.bazel.remote.execution.v2.ActionCache/"
_CAS = "/build.bazel.remote.execution.v2.ContentAddressableStorage/"
_EXEC = "/build.bazel.remote.execution.v2.Execution/"
_CAPS = "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities"
_BYTESTREAM = "/google.bytestream.ByteStream/"


def digest_of(data: bytes) -> re.Digest:
    return re.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


class Client(Session):
    """One channel to a REAPI server, with the calls cached-dist makes; every failure is a
    RemoteError whose message names no header value."""

    def __init__(
        self, url: str, *, connect_timeout: float, timeout: float, instance_name: str = "",
        headers: Sequence[tuple[str, str]] = (), tool_version: str = "",
        invocation_id: str = "",
    ) -> None:  # fmt: skip
        super().__init__(connect_timeout=connect_timeout, timeout=timeout,
                         instance_name=instance_name, headers=headers)  # fmt: skip
        self.url = url
        details = re.RequestMetadata(
            tool_details=re.ToolDetails(tool_name="cached-dist", tool_version=tool_version),
            tool_invocation_id=invocation_id or uuid.uuid4().hex,
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

    def error(self, e: BaseException, what: str) -> RemoteError:
        if isinstance(e, grpc.RpcError) and isinstance(e, grpc.Call):
            code = e.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                text = f"{what} timed out (after {self.deadline():g} s)"
            else:
                name = code.name if code is not None else "UNKNOWN"
                text = f"{what}: {name}: {(e.details() or '').strip()}"
        else:
            text = f"{what}: {plain(e)}"
        return self.hidden(text, what)

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
        batches, large = packed(wanted.values(), lambda d: d.size_bytes, self.batch_limit())
        self._round()
        requests = [re.BatchReadBlobsRequest(instance_name=self.instance, digests=batch)
                    for batch in batches]  # fmt: skip
        for response in self._batched(self._batch_read, requests, "BatchReadBlobs"):
            if response.status.code == 0:  # else NOT_FOUND (evicted), say: left out
                found[response.digest.hash] = response.data
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

    def _batched(self, call: Any, requests: list[Any], what: str) -> Iterator[Any]:
        """The per-blob responses of ``requests``, all sent at once (one round); an RPC's
        failure is a RemoteError naming ``what``."""
        calls = [call.future(request, timeout=self.deadline(), metadata=self.metadata)
                 for request in requests]  # fmt: skip
        try:
            for pending in calls:
                yield from pending.result().responses
        except grpc.RpcError as e:
            raise self.error(e, what) from None

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
        sent = sum(len(blobs[d.hash]) for d in missing)
        batches, large = packed(missing, lambda d: len(blobs[d.hash]), self.batch_limit())
        if batches:
            self._round()
        requests = [
            re.BatchUpdateBlobsRequest(instance_name=self.instance, requests=[
                re.BatchUpdateBlobsRequest.Request(digest=d, data=blobs[d.hash])
                for d in batch])
            for batch in batches
        ]  # fmt: skip
        for response in self._batched(self._batch_update, requests, "BatchUpdateBlobs"):
            if response.status.code != 0:
                raise RemoteError(f"BatchUpdateBlobs: {_code_name(response.status.code)}"
                                  f" {response.status.message}".rstrip())  # fmt: skip
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
