"""The lookup's own protobuf and HPACK codecs (store/remote/protowire.py, reapi_wire.py,
hpack.py): the same bytes as protobuf's serializer, the same answers as its parser, and on
damaged input a Malformed/HpackError, never another exception."""

from __future__ import annotations

import contextlib
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.remote import hpack
from store.remote import reapi_wire as wire
from store.remote.protowire import Malformed

rpb = pytest.importorskip("store.remote.reapi_pb.remote_execution_pb2")

text = st.text(max_size=40)
hexes = st.text("0123456789abcdef", min_size=0, max_size=64)
sizes = st.integers(0, 2**62)
digests = st.tuples(hexes, sizes)


def _pd(d: tuple[str, int]) -> object:
    return rpb.Digest(hash=d[0], size_bytes=d[1])


@settings(max_examples=200, deadline=None)
@given(st.lists(text, max_size=6), st.lists(text, max_size=3),
       st.lists(st.tuples(text, text), max_size=4), digests, text)  # fmt: skip
def test_the_action_is_protobufs_bytes(
    arguments: list[str], outputs: list[str], props: list[tuple[str, str]],
    marker: tuple[str, int], name: str,
) -> None:  # fmt: skip
    plat = rpb.Platform(properties=[rpb.Platform.Property(name=n, value=v) for n, v in props])
    assert wire.platform(props) == plat.SerializeToString()
    ours = wire.command(arguments, outputs, wire.platform(props))
    theirs = rpb.Command(arguments=arguments, output_paths=outputs, platform=plat)
    assert ours == theirs.SerializeToString()
    root = rpb.Directory(files=[rpb.FileNode(name=name, digest=_pd(marker))])
    assert wire.directory([(name, marker)]) == root.SerializeToString()
    action = rpb.Action(command_digest=_pd(marker), input_root_digest=_pd(marker), platform=plat)
    assert wire.action(marker, marker, wire.platform(props)) == action.SerializeToString()


@settings(max_examples=200, deadline=None)
@given(text, st.lists(digests, min_size=1, max_size=5), st.lists(text, max_size=3), text, text)
def test_the_requests_are_protobufs_bytes(
    instance: str, ds: list[tuple[str, int]], inline: list[str], version: str, invocation: str
) -> None:
    from store.remote.reapi_pb import bytestream_pb2

    request = rpb.GetActionResultRequest(instance_name=instance, action_digest=_pd(ds[0]),
                                         inline_stderr=True, inline_output_files=inline)  # fmt: skip
    assert wire.get_action_result_request(instance, ds[0], inline) == request.SerializeToString()
    batch = rpb.BatchReadBlobsRequest(instance_name=instance, digests=[_pd(d) for d in ds])
    assert wire.batch_read_request(instance, ds) == batch.SerializeToString()
    caps = rpb.GetCapabilitiesRequest(instance_name=instance)
    assert wire.capabilities_request(instance) == caps.SerializeToString()
    read = bytestream_pb2.ReadRequest(resource_name=instance)
    assert wire.read_request(instance) == read.SerializeToString()
    meta = rpb.RequestMetadata(
        tool_details=rpb.ToolDetails(tool_name="cached-dist", tool_version=version),
        tool_invocation_id=invocation,
    )  # fmt: skip
    assert wire.request_metadata("cached-dist", version, invocation) == meta.SerializeToString()


def _result(files: list[tuple[str, tuple[str, int], bytes]], code: int, aux: list[str]) -> bytes:
    from google.protobuf import any_pb2, wrappers_pb2

    result = rpb.ActionResult(exit_code=code, stderr_raw=b"warning: x\n")
    for path, d, contents in files:
        result.output_files.append(rpb.OutputFile(path=path, digest=_pd(d), contents=contents,
                                                  is_executable=True))  # fmt: skip
    result.output_directories.append(rpb.OutputDirectory(path="unknown/to/us"))
    result.execution_metadata.worker = "w"
    for value in aux:
        packed = wrappers_pb2.StringValue(value=value).SerializeToString()
        result.execution_metadata.auxiliary_metadata.append(
            any_pb2.Any(type_url="type.googleapis.com/google.protobuf.StringValue", value=packed)
        )
    data: bytes = result.SerializeToString()
    return data


files = st.lists(st.tuples(text, digests, st.binary(max_size=30)), max_size=4)
codes = st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=200, deadline=None)
@given(files, codes, st.lists(text, max_size=2))
def test_answers_decode_as_protobuf_parses_them(
    outputs: list[tuple[str, tuple[str, int], bytes]], code: int, aux: list[str]
) -> None:
    from google.protobuf import wrappers_pb2

    data = _result(outputs, code, aux)
    ours = wire.read_action_result(data)
    theirs = rpb.ActionResult.FromString(data)
    assert ours.exit_code == theirs.exit_code
    assert [(f.path, f.digest, f.contents) for f in ours.output_files] == [
        (f.path, (f.digest.hash, f.digest.size_bytes), f.contents) for f in theirs.output_files
    ]
    assert [(t, wire.read_string_value(v)) for t, v in ours.auxiliary] == [
        (a.type_url, wrappers_pb2.StringValue.FromString(a.value).value)
        for a in theirs.execution_metadata.auxiliary_metadata]  # fmt: skip
    response = rpb.BatchReadBlobsResponse(responses=[
        rpb.BatchReadBlobsResponse.Response(digest=_pd(d), data=c, status={"code": 5 * (i % 2),
                                                                           "message": p})
        for i, (p, d, c) in enumerate(outputs)]).SerializeToString()  # fmt: skip
    assert wire.read_batch_read_response(response) == [
        (d, c, 5 * (i % 2)) for i, (_, d, c) in enumerate(outputs)
    ]


@pytest.mark.parametrize("limit", [0, 2**20, 2**40])
def test_capabilities_give_the_batch_limit(limit: int) -> None:
    caps = rpb.ServerCapabilities(cache_capabilities=rpb.CacheCapabilities(
        digest_functions=[rpb.DigestFunction.SHA256, rpb.DigestFunction.MD5],
        max_batch_total_size_bytes=limit,
        action_cache_update_capabilities=rpb.ActionCacheUpdateCapabilities(update_enabled=True),
    ), execution_capabilities=rpb.ExecutionCapabilities(exec_enabled=True))  # fmt: skip
    found = wire.read_capabilities(caps.SerializeToString())
    assert found.max_batch_total_size_bytes == limit
    assert found.digest_functions == [rpb.DigestFunction.SHA256, rpb.DigestFunction.MD5]


_DECODERS = (wire.read_action_result, wire.read_batch_read_response, wire.read_capabilities,
             wire.read_status, wire.read_read_response, wire.read_string_value)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(files, codes, st.data())
def test_damaged_answers_are_malformed_never_a_crash(
    outputs: list[tuple[str, tuple[str, int], bytes]], code: int, data: st.DataObject
) -> None:
    """Truncated, flipped, inserted or random bytes: each decoder returns or raises
    Malformed; what it returns for a message protobuf also parses agrees with protobuf."""
    good = _result(outputs, code, ["{}"])
    damage = data.draw(st.sampled_from(["cut", "flip", "insert", "random"]))
    if damage == "cut":
        bad = good[: data.draw(st.integers(0, max(0, len(good) - 1)))]
    elif damage == "flip" and good:
        i = data.draw(st.integers(0, len(good) - 1))
        bad = good[:i] + bytes([good[i] ^ data.draw(st.integers(1, 255))]) + good[i + 1 :]
    elif damage == "insert":
        i = data.draw(st.integers(0, len(good)))
        bad = good[:i] + data.draw(st.binary(min_size=1, max_size=12)) + good[i:]
    else:
        bad = data.draw(st.binary(max_size=200))
    for decode in _DECODERS:
        with contextlib.suppress(Malformed):
            decode(bad)
    try:
        ours = wire.read_action_result(bad)
    except Malformed:
        return
    try:
        theirs = rpb.ActionResult.FromString(bad)
    except Exception:  # protobuf refuses what we accept (e.g. a bad UTF-8 we never read)
        return
    if len(theirs.output_files) == len(ours.output_files) and all(
        o.path == t.path for o, t in zip(ours.output_files, theirs.output_files, strict=True)
    ):
        assert ours.exit_code == theirs.exit_code


def test_length_and_varint_bounds() -> None:
    for bad in (b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x05abc", b"\x08" + b"\xff" * 11,
                b"\x0b", b"\x0c", b"\x00\x01", b"\x09\x01\x02", b"\x12"):  # fmt: skip
        with pytest.raises(Malformed):
            wire.read_action_result(bad)
    with pytest.raises(Malformed):
        wire.read_digest(b"\x10" + b"\xff" * 9 + b"\x01")  # a negative size
    with pytest.raises(Malformed):
        wire.read_read_response(b"\x52\x02\xc3")  # data's length beyond the message


# -- HPACK ----------------------------------------------------------------------------------

# RFC 7541 Appendix C.4: three requests with Huffman coding and the dynamic table, and the
# table's size after each.
_RFC_C4 = [
    ("828684418cf1e3c2e5f23a6ba0ab90f4ff", 57,
     [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")]),
    ("828684be5886a8eb10649cbf", 110,
     [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com"),
      ("cache-control", "no-cache")]),
    ("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf", 164,
     [(":method", "GET"), (":scheme", "https"), (":path", "/index.html"),
      (":authority", "www.example.com"), ("custom-key", "custom-value")]),
]  # fmt: skip


def test_hpack_decodes_rfc_7541_appendix_c4() -> None:
    decoder = hpack.Decoder()
    for block, size, headers in _RFC_C4:
        assert decoder.decode(bytes.fromhex(block)) == headers
        assert decoder.size == size


def test_the_huffman_code_is_complete_and_canonical() -> None:
    from fractions import Fraction

    lengths = hpack._LENGTHS
    assert len(lengths) == 257 and lengths[256] == 30  # EOS: 30 bits
    assert sum(Fraction(1, 2**n) for n in lengths) == 1  # a complete prefix code
    assert (
        hpack.huffman_decode(bytes.fromhex("d07abe941054d444a8200595040b8166e082a62d1bff"))
        == b"Mon, 21 Oct 2013 20:13:21 GMT"
    )  # fmt: skip  (RFC 7541 C.6.1)
    assert hpack.huffman_decode(bytes.fromhex("9d29ad171863c78f0b97c8e9ae82ae43d3")) \
        == b"https://www.example.com"  # fmt: skip


def test_hpack_round_trips_what_it_encodes() -> None:
    headers = [(":path", "/a/b"), ("x-api-key", "s" * 200), ("grpc-timeout", "3000m")]
    assert hpack.Decoder().decode(hpack.encode(headers)) == headers


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_damaged_header_blocks_are_errors_never_a_crash(block: bytes) -> None:
    decoder = hpack.Decoder()
    with contextlib.suppress(hpack.HpackError):
        decoder.decode(block)
    with contextlib.suppress(hpack.HpackError):
        hpack.huffman_decode(block)
    assert decoder.size <= 4096


def test_blob_digests_are_sha256() -> None:
    from store.remote.reapi import sha256_digest

    assert sha256_digest(b"abc") == (hashlib.sha256(b"abc").hexdigest(), 3)
