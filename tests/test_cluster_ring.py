"""Slices (polecat/frontier/slices.py) and the slice -> member ring (polecat/cluster/ring.py)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.cluster.ring import Ring
from polecat.errors import FrontierError
from polecat.frontier.db import FrontierDB
from polecat.frontier.slices import SLICES, check_slices, prefix_slice, slice_of, slice_prefix

member_ids = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=12)
member_lists = st.lists(member_ids, min_size=1, max_size=12, unique=True)


def test_slice_of_is_pinned() -> None:
    # Pinned values: a change here would re-home every host of every existing data dir.
    assert SLICES == 4096
    assert slice_of("example.com") == 2931
    assert slice_of("127.0.0.1:8080") == 3157


@given(st.text(min_size=1, max_size=60))
def test_slice_of_in_range_and_prefix_round_trip(host: str) -> None:
    s = slice_of(host)
    assert 0 <= s < SLICES
    assert prefix_slice(slice_prefix(s) + b"rest") == s


def test_slice_prefix_orders_like_slices() -> None:
    prefixes = [slice_prefix(s) for s in range(SLICES)]
    assert prefixes == sorted(prefixes)
    assert len({len(p) for p in prefixes}) == 1


def test_check_slices_names_the_bad_one() -> None:
    assert check_slices([1, 2, 2]) == {1, 2}
    with pytest.raises(ValueError, match="slice 4096"):
        check_slices([0, SLICES])


@settings(max_examples=30, deadline=None)
@given(member_lists, st.randoms())
def test_deterministic_and_order_free(members: list[str], rnd: object) -> None:
    shuffled = list(members)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a, b = Ring(members), Ring(shuffled)
    assert a == b
    assert [a.owner(s) for s in range(SLICES)] == [b.owner(s) for s in range(SLICES)]


@settings(max_examples=30, deadline=None)
@given(member_lists)
def test_every_slice_owned_exactly_once(members: list[str]) -> None:
    ring = Ring(members)
    shares = [ring.slices_of(m) for m in members]
    assert sum(len(s) for s in shares) == SLICES
    assert frozenset().union(*shares) == frozenset(range(SLICES))
    for s in range(SLICES):
        assert ring.owner(s) in members


@settings(max_examples=30, deadline=None)
@given(member_lists, member_ids)
def test_join_moves_only_to_the_newcomer_and_leave_only_its_own(members: list[str], new: str) -> None:
    if new in members:
        return
    before, after = Ring(members), Ring([*members, new])
    moves = before.moves(after)
    assert all(dst == new for _, dst in moves.values())
    assert set(moves) == after.slices_of(new)
    # Leaving is the reverse: only the leaver's slices move, and nothing moves to it.
    back = after.moves(before)
    assert set(back) == after.slices_of(new)
    assert all(src == new for src, _ in back.values())


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=1, max_value=16), member_ids)
def test_balance(n: int, prefix: str) -> None:
    ring = Ring([f"{prefix}-{i}" for i in range(n)])
    counts = Counter(ring.owner(s) for s in range(SLICES))
    mean = SLICES / n
    # Binomial spread: standard deviation about sqrt(mean); 6 sigma keeps this test from flaking.
    for m in ring.members:
        assert abs(counts[m] - mean) <= 6 * math.sqrt(mean), (m, counts[m], mean)


def test_one_member_owns_everything() -> None:
    ring = Ring(["solo"])
    assert ring.slices_of("solo") == frozenset(range(SLICES))
    assert ring.slices_of("other") == frozenset()


def test_empty_ring_and_empty_id_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Ring([])
    with pytest.raises(ValueError, match="non-empty"):
        Ring(["a", ""])


def test_frontier_meta_records_slice_count(tmp_path: Path) -> None:
    db = FrontierDB(tmp_path, map_size=1 << 24, params={})
    assert db.txn.get(b"slices", db=db.meta) == str(SLICES).encode()
    db.txn.put(b"slices", b"1024", db=db.meta)
    db.commit()
    db.close()
    with pytest.raises(FrontierError, match="1024 slices"):
        FrontierDB(tmp_path, map_size=1 << 24, params={})
