"""The warm server: fully cached links without starting an interpreter each.

A fully cached link through ``cached-dist`` spends more time starting Python and importing
than doing its own work. ``cached-dist serve`` (:mod:`.server`) keeps those imports warm and
forks a child per link; the small C program ``cached-dist-client`` (``client.c``, built at
install) is what LLD runs instead of ``cached-dist``: it hands the link to the server and
relays the outcome, or runs ``cached-dist`` itself whenever the server cannot serve the whole
link from the local cache (a miss, an option the server leaves alone, no server at all).
``cached-dist flags --server`` prints the link flags. See docs/guide.md ("The warm server").
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

#: The client, next to this file once built (setup.py).
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cached-dist-client")


def require_client() -> str:
    """CLIENT, or the error both ``serve`` and ``flags --server`` give without it."""
    if not os.access(CLIENT, os.X_OK):
        from ..errors import UsageError

        raise UsageError(f"the warm server's client {CLIENT} is not built: reinstall "
                         "cached-dist where a C compiler is available")  # fmt: skip
    return CLIENT


def default_socket() -> str:
    """The socket when neither variable names a place: in a directory of the user's own."""
    return f"/tmp/cached-dist-{os.getuid()}/server.sock"


def socket_path(environ: Mapping[str, str]) -> str:
    """Where the server listens and the client connects; client.c resolves it the same way:
    $CACHED_DIST_SOCKET, else $XDG_RUNTIME_DIR/cached-dist.sock, else a directory of the
    user's own under /tmp."""
    given = environ.get("CACHED_DIST_SOCKET")
    if given:
        return given
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if runtime.startswith("/"):
        return os.path.join(runtime, "cached-dist.sock")
    return default_socket()
