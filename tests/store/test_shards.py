"""A sharded remote tier's placement (store/remote/shards.py): weighted rendezvous hashing.

The keys are fixed, so every figure here is the same on every run; the bounds say what the
hashing must give (a weight's share, the keys a new server takes), not what it happened to.
"""

import hashlib
from typing import TYPE_CHECKING, cast

from store.remote.shards import ShardedStorage, owner, parse

if TYPE_CHECKING:
    from store.tier import Tier

KEYS = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(3000)]
A, B, C = "redis://cache-a:6379/0", "redis://cache-b:6379/0", "redis://cache-c:6379/0"


def _shares(shards: list[tuple[str, float]]) -> list[int]:
    counts = [0] * len(shards)
    for key in KEYS:
        counts[owner(key, shards)] += 1
    return counts


def test_equal_weights_share_the_keys_evenly() -> None:
    a, b = _shares([(A, 1.0), (B, 1.0)])
    assert a + b == len(KEYS) and abs(a - b) < 0.1 * len(KEYS)


def test_a_weight_of_two_takes_about_twice_the_keys() -> None:
    _, b = _shares([(A, 1.0), (B, 2.0)])
    assert 0.62 * len(KEYS) < b < 0.72 * len(KEYS)  # 2/3 expected


def test_a_new_server_takes_keys_and_moves_no_other() -> None:
    two = [owner(k, [(A, 1.0), (B, 1.0)]) for k in KEYS]
    three = [owner(k, [(A, 1.0), (B, 1.0), (C, 1.0)]) for k in KEYS]
    moved = [(x, y) for x, y in zip(two, three, strict=True) if x != y]
    assert all(y == 2 for _, y in moved)  # each moved key went to the new server
    assert 0.25 * len(KEYS) < len(moved) < 0.42 * len(KEYS)  # 1/3 expected


def test_the_order_of_the_servers_does_not_move_keys() -> None:
    forward = [(A, 1.0), (B, 2.0), (C, 1.0)]
    backward = forward[::-1]
    assert all(forward[owner(k, forward)] == backward[owner(k, backward)] for k in KEYS)


def test_credentials_do_not_change_where_a_key_lives() -> None:
    """Machines logging in as different users must agree: the hash names a server by its
    URL without user or password."""
    urls = ["redis://alice:pw@cache-a:6379/0", "redis://cache-b:6379/0"]
    logged_in = ShardedStorage(urls, _backends(urls), [1.0, 1.0])
    other = ["redis://bob:other@cache-a:6379/0", "redis://cache-b:6379/0"]
    as_bob = ShardedStorage(other, _backends(other), [1.0, 1.0])
    assert logged_in._split(KEYS) == as_bob._split(KEYS)
    plain = [(A, 1.0), (B, 1.0)]
    assert logged_in._split(KEYS)[0] == [n for n, k in enumerate(KEYS) if owner(k, plain) == 0]


def test_both_spellings_name_the_same_servers() -> None:
    assert parse(f"{A}|{B}(2)") == [(A, 1.0), (B, 2.0)]
    assert parse("redis://cache-*:6379/0|shards=a,b(2)") == [(A, 1.0), (B, 2.0)]


class _Null:
    """A backend that is never called: only placement is under test."""

    claims = False

    def __init__(self, url: str) -> None:
        self.url = url


def _backends(urls: list[str]) -> "list[Tier]":
    return cast("list[Tier]", [_Null(u) for u in urls])
