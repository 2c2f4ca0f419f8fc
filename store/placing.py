"""Placing stored blobs at a link's outputs, in this process or in one that helps it.

:meth:`store.Store.materialize_many` plans the outputs (digest, size, destination and the
stage to copy through); :func:`place` carries a share of them out with the store's
:class:`Blobs`. A helper (a worker forked earlier in the link that waits for an order, see
``store.forked.start``'s ``then``) takes its share as an order, :func:`place_order`, and
builds the same ``Blobs`` from the store's root: it cannot use this process's objects.
"""

from __future__ import annotations

import errno
import os
import time

import xxhash

from .blobs import TOUCH_AFTER, Blobs, Outcome
from .fsutil import Modes, temp_name

try:  # the native placer (_link.c): copy_out's work without its Python, ~5-20 us an output
    from ._link import copy_blobs as native_copy_blobs
    from ._link import link_blobs as native_link_blobs
except ImportError:  # built without a C compiler: copy_out places every output
    native_link_blobs = native_copy_blobs = None  # type: ignore[assignment]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Protocol

    #: (digest, size, destination, stage or None)
    Plan = tuple[str, int, str, str | None]

    class Helper(Protocol):
        """A process that carries out one order (store.forked.Worker)."""

        def order(self, value: Any) -> bool: ...
        def answer(self) -> Any: ...


def place(blobs: Blobs, hard_link: bool, plans: Sequence[Plan]) -> list[Any]:
    """Each plan's [outcome, seconds]: an Outcome, or [errno, strerror, filename] for an
    OSError (told to the caller, which reports it). The native placer (store/_link.c), when
    it is built, links or copies them; what it hands back, the rare case, is placed here."""
    if not plans or native_link_blobs is None or native_copy_blobs is None:
        return _place(blobs, hard_link, plans)
    hexdigest, touch_before = xxhash.xxh3_128_hexdigest, time.time() - TOUCH_AFTER
    if hard_link:
        placed = native_link_blobs(blobs.dir, plans, hexdigest, touch_before)
    else:  # each copied to a new name in its stage, or beside its output, then renamed
        placed = native_copy_blobs(blobs.dir, [
            (digest, size, dest, temp_name(stage or os.path.dirname(dest) or ".",
                                           os.path.basename(dest)))
            for digest, size, dest, stage in plans], hexdigest, touch_before)  # fmt: skip
    if None not in placed:
        return [[Outcome.OK, took] for took in placed]
    rest = iter(_place(blobs, hard_link, [p for p, t in zip(plans, placed, strict=True)
                                          if t is None]))  # fmt: skip
    return [[Outcome.OK, took] if took is not None else next(rest) for took in placed]


def _place(blobs: Blobs, hard_link: bool, plans: Sequence[Plan]) -> list[Any]:
    """:func:`place`, one plan after another, in Python (copy_out)."""
    done: list[Any] = []
    unstaged: set[str] = set()  # output directories the stage turned out not to reach
    for digest, size, dest, stage in plans:
        started = time.monotonic()
        here = stage
        if here is not None and unstaged:
            here = None if (os.path.dirname(dest) or ".") in unstaged else here
        try:
            try:
                outcome: Any = blobs.copy_out(digest, size, dest, hard_link, here)
            except OSError as e:
                if here is None or e.errno != errno.EXDEV:
                    raise
                # Same file system, another mount (a bind mount): copy beside it.
                unstaged.add(os.path.dirname(dest) or ".")
                outcome = blobs.copy_out(digest, size, dest, hard_link)
        except OSError as e:
            outcome = [e.errno, e.strerror, e.filename]
        done.append([outcome, time.monotonic() - started])
    return done


def place_order(order: Any) -> list[Any]:
    """:func:`place` for a helper: ``order`` is (store root, group-shared, hard_link, plans)."""
    root, group_shared, hard_link, plans = order
    return place(Blobs(str(root), Modes(bool(group_shared))), bool(hard_link),
                 [(str(d), int(s), str(p), None if t is None else str(t))
                  for d, s, p, t in plans])  # fmt: skip
