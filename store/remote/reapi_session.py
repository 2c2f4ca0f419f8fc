"""What both REAPI clients share (store/remote/reapi_lookup.py, the link's lookups without
grpcio; store/remote/reapi_grpc.py, writes and execution): the instance, the deadline rule
and keeping header values (API keys) out of every message they raise."""

from __future__ import annotations

from .urls import RemoteError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


class Session:
    """A client's calls to one REAPI server; ``round_trips`` counts the rounds."""

    def __init__(
        self, *, connect_timeout: float, timeout: float, instance_name: str,
        headers: Sequence[tuple[str, str]],
    ) -> None:  # fmt: skip
        self.instance = instance_name
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.round_trips = 0
        self._secrets = [value for _, value in headers if value]
        self._first = True  # the first call's deadline includes connecting

    def deadline(self) -> float:
        """Seconds a call may take: the first also connects."""
        return self.timeout + (self.connect_timeout if self._first else 0.0)

    def hidden(self, text: str, empty: str) -> RemoteError:
        """``text``'s first line as a RemoteError, no header value in it (``empty`` if none)."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return RemoteError(text.splitlines()[0] if text else empty)
