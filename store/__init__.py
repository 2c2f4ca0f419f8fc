"""A content-addressed store shared safely by concurrent processes and hosts.

Usable without cached-dist; see docs/store.md for the layout, guarantees and lock protocol.
Importing it stays cheap (no filelock, psutil, subprocess, shutil, tempfile): a fully cached
link must finish in about 100 ms.
"""

from .layout import LAYOUT
from .manifest import Manifest
from .store import DEFAULT_MAX_SIZE, Store

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .claims import Claim
    from .maintenance import VerifyReport

__all__ = ["DEFAULT_MAX_SIZE", "LAYOUT", "Claim", "Manifest", "Store", "VerifyReport"]


def __getattr__(name: str) -> object:
    # VerifyReport lives with the maintenance code and Claim with the claims, neither of
    # which a full hit needs.
    if name == "VerifyReport":
        from .maintenance import VerifyReport

        return VerifyReport
    if name == "Claim":
        from .claims import Claim

        return Claim
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
