"""Slices (polecat/frontier/slices.py) and the slice -> member ring (polecat/cluster/ring.py)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import xxhash
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
@given(member_lists)
def test_balance_shares_differ_by_at_most_one_slice(members: list[str]) -> None:
    ring = Ring(members)
    counts = Counter(ring.owner(s) for s in range(SLICES))
    assert set(counts) == set(members)
    # The issue asks for +-10 % of the mean at 4 and 16 members; the capacity bound gives one slice.
    assert max(counts.values()) - min(counts.values()) <= 1, counts


@settings(max_examples=30, deadline=None)
@given(member_lists, member_ids)
def test_join_and_leave_move_near_the_least(members: list[str], new: str) -> None:
    if new in members:
        return
    before, after = Ring(members), Ring([*members, new])
    moves = before.moves(after)
    # The least a join can move is the newcomer's share; the capacity cascades add a little (rule 3:
    # under 25 % in bench_ring over random member sets; bounded here at 50 %).
    assert after.slices_of(new) <= set(moves)
    assert len(moves) <= 1.5 * len(after.slices_of(new)) + 2
    assert len(after.moves(before)) == len(moves)  # leaving is the same change, reversed


def test_version_one_is_plain_rendezvous() -> None:
    members = ["a", "b", "c"]
    legacy = Ring(members, version=1)
    for s in range(0, SLICES, 97):
        best = max(members, key=lambda m: xxhash.xxh3_64_intdigest(m.encode(), seed=s))
        assert legacy.owner(s) == best
    counts = Counter(legacy.owner(s) for s in range(SLICES))
    assert max(counts.values()) - min(counts.values()) > 1  # the binomial drift the balanced rule removes
    with pytest.raises(ValueError, match="version 3"):
        Ring(members, version=3)


@pytest.mark.parametrize(("members", "version", "owners_sha256"), [
    (["w0", "w1"], 1, "3596eb7ab6e248a7"), (["w0", "w1"], 2, "8a44dd4c25763be3"),
    (["w0", "w1", "w2"], 1, "f429921cf6aa374c"), (["w0", "w1", "w2"], 2, "7e9552ef7dd21188"),
    ([f"node-{i:08x}" for i in range(7)], 1, "d6c91a541ad8e5eb"),
    ([f"node-{i:08x}" for i in range(7)], 2, "18a00e6c5a08872f"),
])
def test_ownership_is_pinned(members: list[str], version: int, owners_sha256: str) -> None:
    # Data dirs store the ring version they were written under: the owners it gives must never change.
    # These digests were taken from the numpy implementation the plain-Python one replaced.
    ring = Ring(members, version=version)
    owners = ",".join(ring.owner(s) for s in range(SLICES)).encode()
    assert hashlib.sha256(owners).hexdigest()[:16] == owners_sha256


def test_a_ring_builds_without_numpy() -> None:
    # Every --workers child builds one: numpy's import would cost it ~0.1 s of CPU and ~10 MB.
    code = ("import sys; from polecat.cluster.ring import Ring; Ring(['w0', 'w1', 'w2']); "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False"]


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
