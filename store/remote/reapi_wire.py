"""The REAPI messages of a lookup and of a key's Action, without protobuf (protowire.py).

Encoded: the Action of a key (Command, Platform, Directory, FileNode, Action), the requests
GetActionResult, BatchReadBlobs, GetCapabilities and ByteStream Read, and the
RequestMetadata header. Decoded (from an untrusted server, Malformed on anything wrong):
ActionResult with its OutputFiles and auxiliary metadata, BatchReadBlobsResponse with each
google.rpc.Status, ServerCapabilities (the batch limit) and ByteStream ReadResponse. Field
numbers are those of remote_execution.proto v2, bytestream.proto and status.proto.
"""

from __future__ import annotations

from .protowire import (
    Malformed,
    as_bytes,
    as_int32,
    as_int64,
    as_text,
    fields,
    packed_varints,
    put_always,
    put_text,
    put_varint,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import TypeVar

    _D = TypeVar("_D")

__all__ = ["Malformed"]

#: The most a batch call carries (request or response): under gRPC's default 4 MiB message
#: limit with room for the framing, unless the server states a smaller one.
BATCH_LIMIT = 4 * 2**20 - 64 * 2**10

#: A Digest: (SHA-256 hex, size in bytes).
Digest = tuple[str, int]
SHA256 = 1  # DigestFunction.Value


def digest(d: Digest) -> bytes:
    return put_text(1, d[0]) + put_varint(2, d[1])


def read_digest(buf: bytes) -> Digest:
    h, size = "", 0
    for number, wt, value in fields(buf):
        if (number, wt) == (1, 2):
            h = as_text(value)
        elif (number, wt) == (2, 0):
            size = as_int64(value)
    if size < 0:
        raise Malformed("a negative size")
    return h, size


# -- a key's Action ---------------------------------------------------------------------


def platform(properties: Sequence[tuple[str, str]]) -> bytes:
    return b"".join(put_always(1, put_text(1, n) + put_text(2, v)) for n, v in properties)


def command(arguments: Sequence[str], output_paths: Sequence[str], plat: bytes) -> bytes:
    return b"".join(
        [*(put_always(1, a.encode()) for a in arguments), put_always(5, plat),
         *(put_always(7, p.encode()) for p in output_paths)]
    )  # fmt: skip


def directory(files: Sequence[tuple[str, Digest]]) -> bytes:
    return b"".join(put_always(1, put_text(1, name) + put_always(2, digest(d)))
                    for name, d in files)  # fmt: skip


def action(command_digest: Digest, input_root: Digest, plat: bytes) -> bytes:
    return (put_always(1, digest(command_digest)) + put_always(2, digest(input_root))
            + put_always(10, plat))  # fmt: skip


# -- requests ---------------------------------------------------------------------------


def get_action_result_request(instance: str, d: Digest, inline: Sequence[str]) -> bytes:
    return (put_text(1, instance) + put_always(2, digest(d)) + put_varint(4, 1)
            + b"".join(put_always(5, n.encode()) for n in inline))  # fmt: skip


def batch_read_request(instance: str, digests: Sequence[Digest]) -> bytes:
    return put_text(1, instance) + b"".join(put_always(2, digest(d)) for d in digests)


def capabilities_request(instance: str) -> bytes:
    return put_text(1, instance)


def read_request(resource_name: str) -> bytes:
    return put_text(1, resource_name)


def request_metadata(tool_name: str, tool_version: str, invocation_id: str) -> bytes:
    tool = put_text(1, tool_name) + put_text(2, tool_version)
    return put_always(1, tool) + put_text(3, invocation_id)


# -- answers ----------------------------------------------------------------------------


class OutputFile:
    __slots__ = ("contents", "digest", "path")

    def __init__(self, path: str, d: Digest, contents: bytes) -> None:
        self.path = path
        self.digest = d
        self.contents = contents

    @property
    def inlined(self) -> bool:
        return bool(self.contents) or self.digest[1] == 0


class ActionResult:
    """The parts of an ActionResult the tier reads."""

    __slots__ = ("auxiliary", "exit_code", "output_files")

    def __init__(self) -> None:
        self.output_files: list[OutputFile] = []
        self.exit_code = 0
        #: execution_metadata.auxiliary_metadata: (type_url, value) of each Any.
        self.auxiliary: list[tuple[str, bytes]] = []


def read_action_result(buf: bytes) -> ActionResult:
    result = ActionResult()
    for number, wt, value in fields(buf):
        if (number, wt) == (2, 2):
            result.output_files.append(_output_file(as_bytes(value)))
        elif (number, wt) == (4, 0):
            result.exit_code = as_int32(value)
        elif (number, wt) == (9, 2):
            for n, vt, v in fields(as_bytes(value)):
                if (n, vt) == (11, 2):
                    result.auxiliary.append(_any(as_bytes(v)))
    return result


def _output_file(buf: bytes) -> OutputFile:
    path, d, contents = "", ("", 0), b""
    for number, wt, value in fields(buf):
        if (number, wt) == (1, 2):
            path = as_text(value)
        elif (number, wt) == (2, 2):
            d = read_digest(as_bytes(value))
        elif (number, wt) == (5, 2):
            contents = as_bytes(value)
    return OutputFile(path, d, contents)


def _any(buf: bytes) -> tuple[str, bytes]:
    type_url, value = "", b""
    for number, wt, v in fields(buf):
        if (number, wt) == (1, 2):
            type_url = as_text(v)
        elif (number, wt) == (2, 2):
            value = as_bytes(v)
    return type_url, value


def read_string_value(buf: bytes) -> str:
    """google.protobuf.StringValue."""
    text = ""
    for number, wt, value in fields(buf):
        if (number, wt) == (1, 2):
            text = as_text(value)
    return text


def read_batch_read_response(buf: bytes) -> list[tuple[Digest, bytes, int]]:
    """(digest, data, status code) of each blob answered."""
    out = []
    for number, wt, value in fields(buf):
        if (number, wt) != (1, 2):
            continue
        d, data, code = ("", 0), b"", 0
        for n, vt, v in fields(as_bytes(value)):
            if (n, vt) == (1, 2):
                d = read_digest(as_bytes(v))
            elif (n, vt) == (2, 2):
                data = as_bytes(v)
            elif (n, vt) == (3, 2):
                code = read_status(as_bytes(v))[0]
        out.append((d, data, code))
    return out


def read_status(buf: bytes) -> tuple[int, str]:
    """google.rpc.Status: (code, message)."""
    code, message = 0, ""
    for number, wt, value in fields(buf):
        if (number, wt) == (1, 0):
            code = as_int32(value)
        elif (number, wt) == (2, 2):
            message = as_text(value)
    return code, message


class Capabilities:
    """What a lookup needs of ServerCapabilities.cache_capabilities."""

    __slots__ = ("digest_functions", "max_batch_total_size_bytes")

    def __init__(self) -> None:
        self.digest_functions: list[int] = []
        self.max_batch_total_size_bytes = 0


def read_capabilities(buf: bytes) -> Capabilities:
    caps = Capabilities()
    for number, wt, value in fields(buf):
        if (number, wt) != (1, 2):
            continue
        for n, vt, v in fields(as_bytes(value)):
            if n == 1 and vt in (0, 2):
                caps.digest_functions += packed_varints(v)
            elif (n, vt) == (4, 0):
                caps.max_batch_total_size_bytes = as_int64(v)
    return caps


def read_read_response(buf: bytes) -> bytes:
    """google.bytestream.ReadResponse's data."""
    data = b""
    for number, wt, value in fields(buf):
        if (number, wt) == (10, 2):
            data = as_bytes(value)
    return data


def packed(
    digests: Iterable[_D], size_of: Callable[[_D], int], limit: int
) -> tuple[list[list[_D]], list[_D]]:
    """The digests in batches of at most ``limit`` bytes (in order, none empty), and those
    too large for any batch (for ByteStream)."""
    batches: list[list[_D]] = []
    large: list[_D] = []
    size = limit + 1  # no batch open yet
    for d in digests:
        n = size_of(d)
        if n > limit:
            large.append(d)
            continue
        if size + n > limit:
            batches.append([])
            size = 0
        batches[-1].append(d)
        size += n
    return batches, large
