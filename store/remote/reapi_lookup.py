"""A link's REAPI lookups without grpcio or protobuf: GetActionResult for all of its misses in
one round of concurrent calls (with GetCapabilities beside them, for the batch limit), then
BatchReadBlobs for the outputs not inlined, ByteStream Read for those above the limit.

HTTP/2: store/remote/h2grpc.py; the messages: store/remote/reapi_wire.py. Errors follow the
grpcio client's (store/remote/reapi_grpc.py): NOT_FOUND is a miss, any other status, a
dropped connection, a timeout or a malformed answer is a RemoteError naming the call, with
no header value in it.
"""

from __future__ import annotations

import binascii
import hashlib

from . import reapi_wire as wire
from .h2grpc import Channel, H2Error, code_name
from .reapi_session import Session
from .urls import RemoteError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from .h2grpc import Reply
    from .reapi_wire import ActionResult, Digest

_GET_RESULT = "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"
_BATCH_READ = "/build.bazel.remote.execution.v2.ContentAddressableStorage/BatchReadBlobs"
_CAPS = "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities"
_READ = "/google.bytestream.ByteStream/Read"
_NOT_FOUND = 5
_METADATA = "build.bazel.remote.execution.v2.requestmetadata-bin"


class Lookup(Session):
    """The lookup calls on one HTTP/2 connection; ``round_trips`` counts the rounds."""

    def __init__(
        self, url: str, *, connect_timeout: float, timeout: float, instance_name: str = "",
        headers: Sequence[tuple[str, str]] = (), tool_version: str = "",
        invocation_id: str = "",
    ) -> None:  # fmt: skip
        super().__init__(connect_timeout=connect_timeout, timeout=timeout,
                         instance_name=instance_name, headers=headers)  # fmt: skip
        details = wire.request_metadata("cached-dist", tool_version, invocation_id)
        encoded = binascii.b2a_base64(details, newline=False).rstrip(b"=")
        try:
            self.channel = Channel(url, connect_timeout=connect_timeout,
                                   headers=[*headers, (_METADATA, encoded)],
                                   user_agent=f"cached-dist/{tool_version}")  # fmt: skip
        except ValueError as e:
            raise RemoteError(str(e)) from None
        #: max_batch_total_size_bytes, once the server said it (0: not yet, or no limit).
        self.stated_limit: int | None = None

    def _hide(self, text: str) -> RemoteError:
        return self.hidden(text, "REAPI lookup failed")

    def _round(self, what: str, calls: Sequence[tuple[str, bytes]],
               limits: Sequence[int] | None = None) -> list[Reply]:  # fmt: skip
        self.round_trips += 1
        deadline = self.deadline()
        try:
            replies = self.channel.calls(calls, timeout=deadline, limits=limits)
        except H2Error as e:
            if e.timeout:
                raise self._hide(f"{what} timed out (after {deadline:g} s)") from None
            raise self._hide(f"{what}: {e}") from None
        self._first = False
        return replies

    def _failed(self, what: str, reply: Reply) -> RemoteError:
        return self._hide(f"{what}: {code_name(reply.code)}: {reply.message.strip()}")

    @staticmethod
    def _one(reply: Reply) -> bytes:
        if len(reply.messages) != 1:
            raise wire.Malformed(f"{len(reply.messages)} messages for a unary call")
        return reply.messages[0]

    def batch_limit(self) -> int:
        stated = self.stated_limit or 0
        return (
            min(wire.BATCH_LIMIT, stated - 64 * 2**10) if stated > 128 * 2**10 else wire.BATCH_LIMIT
        )

    def get_action_results(
        self, digests: Sequence[Digest], inline: Sequence[str] = ()
    ) -> list[ActionResult | None]:
        """One round of concurrent lookups; None where the cache has no result."""
        if not digests:
            return []
        calls = [(_GET_RESULT, wire.get_action_result_request(self.instance, d, inline))
                 for d in digests]  # fmt: skip
        ask_caps = self.stated_limit is None
        if ask_caps:
            calls.append((_CAPS, wire.capabilities_request(self.instance)))
        replies = self._round("GetActionResult", calls)
        if ask_caps:
            caps = replies.pop()
            try:  # lookups need none: on failure, the default batch limit
                self.stated_limit = (
                    wire.read_capabilities(self._one(caps)).max_batch_total_size_bytes
                    if caps.code == 0 else 0
                )  # fmt: skip
            except wire.Malformed:
                self.stated_limit = 0
        found: list[ActionResult | None] = []
        for reply in replies:
            if reply.code == _NOT_FOUND:
                found.append(None)
            elif reply.code != 0:
                raise self._failed("GetActionResult", reply)
            else:
                try:
                    found.append(wire.read_action_result(self._one(reply)))
                except wire.Malformed as e:
                    raise self._hide(f"GetActionResult: INTERNAL: malformed answer ({e})") from None
        return found

    def read_blobs(self, digests: Iterable[Digest]) -> dict[str, bytes]:
        """hash -> bytes for each digest the CAS has, every blob checked against its digest:
        one missing or damaged is left out (a miss for whoever needs it)."""
        wanted = {d[0]: d for d in digests if d[1] > 0}
        found: dict[str, bytes] = {d[0]: b"" for d in digests if d[1] == 0}
        if not wanted:
            return found
        batches, large = wire.packed(wanted.values(), lambda d: d[1], self.batch_limit())
        if batches:
            calls = [(_BATCH_READ, wire.batch_read_request(self.instance, batch))
                     for batch in batches]  # fmt: skip
            # Each answer holds at most its batch's bytes and framing (a server sending more
            # breaks the protocol: the call fails).
            limits = [sum(d[1] for d in batch) + 256 * len(batch) + 2**16 for batch in batches]
            for reply in self._round("BatchReadBlobs", calls, limits):
                if reply.code != 0:
                    raise self._failed("BatchReadBlobs", reply)
                try:
                    answered = wire.read_batch_read_response(self._one(reply))
                except wire.Malformed as e:
                    raise self._hide(f"BatchReadBlobs: INTERNAL: malformed answer ({e})") from None
                for d, data, code in answered:
                    if code == 0 and d[0] in wanted:  # else NOT_FOUND (evicted): left out
                        found[d[0]] = data
        if large:
            self._read_streams(large, found)
        for h, d in wanted.items():
            got = found.get(h)
            if got is not None and (len(got) != d[1] or hashlib.sha256(got).hexdigest() != h):
                del found[h]
        return found

    def _read_streams(self, large: Sequence[Digest], found: dict[str, bytes]) -> None:
        """Blobs above the batch limit, by ByteStream Read: one round, a stream each."""
        calls = [(_READ, wire.read_request(f"{self.instance}/blobs/{h}/{n}".lstrip("/")))
                 for h, n in large]  # fmt: skip
        limits = [n + n // 64 + 2**20 for _, n in large]
        for (h, _), reply in zip(large, self._round("ByteStream Read", calls, limits),
                                 strict=True):  # fmt: skip
            if reply.code == _NOT_FOUND:
                continue
            if reply.code != 0:
                raise self._failed("ByteStream Read", reply)
            try:
                found[h] = b"".join(wire.read_read_response(m) for m in reply.messages)
            except wire.Malformed as e:
                raise self._hide(f"ByteStream Read: INTERNAL: malformed answer ({e})") from None

    def close(self) -> None:
        self.channel.close()
