"""The Handoff: what a warm server's child holds back until its client says go."""

import contextlib
import io
import os
import socket
import sys
from collections.abc import Iterator

import pytest

from cached_dist.serve.handoff import FallBack, Handoff, _Held


@contextlib.contextmanager
def streams() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """Standard streams of the test's own (inside the test: pytest resets them between a
    fixture and the test)."""
    saved = sys.stdout, sys.stderr
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved


def test_a_commit_prints_what_was_held_back() -> None:
    child, client = socket.socketpair()
    with child, client, streams() as (out, err):
        handoff = Handoff(child)
        print("said before the commit")
        print("a warning", file=sys.stderr)
        assert out.getvalue() == err.getvalue() == ""
        client.sendall(b"G")
        handoff.commit(True)
        assert client.recv(1) == b"R" and handoff.committed
        assert out.getvalue() == "said before the commit\n"
        assert err.getvalue() == "a warning\n"
        print("and after")
        assert out.getvalue().endswith("and after\n")
        handoff.commit(False)  # committed: nothing more to decide


def test_not_a_full_hit_or_a_client_gone_hands_back() -> None:
    child, client = socket.socketpair()
    with child, client, streams() as (out, _):
        handoff = Handoff(child)
        print("held")
        with pytest.raises(FallBack, match="--disable"):
            handoff.commit(False, "--disable")
        client.close()  # the client gave up waiting
        with pytest.raises(FallBack, match="gave up"):
            handoff.commit(True)
        handoff.discard()
        assert not handoff.committed and sys.stdout is out
        assert out.getvalue() == ""  # the client's cached-dist says it instead


def test_held_streams_say_whether_they_are_terminals() -> None:
    master, slave = os.openpty()
    with open(slave, "w") as terminal, open(os.devnull, "w") as null:
        assert _Held(terminal).isatty() and not _Held(null).isatty()
    os.close(master)
    with open(os.devnull, "w") as closed:
        pass
    assert not _Held(closed).isatty()  # closed: ValueError, read as no terminal
