"""Which member owns which slice.

Rules:

1. Ownership is a pure function of the member list (the order of the list does not matter): every
   member that computes it from the same list agrees, with no messages exchanged.
2. Each member ``m`` ranks the slices by the weight ``xxh3_64(m, seed=s)`` (rendezvous /
   highest-random-weight hashing); each member may own ``S // n`` slices, and the first ``S % n``
   members to ask for one more get it. The owners are the greedy matching in falling weight order over
   every (member, slice) pair: a pair is taken when its slice has no owner yet and its member has room.
   So shares differ by at most one slice (plain
   rendezvous drifts by its binomial spread, about ``sqrt(S / n)``: -13..+13 % at 16 members), and
   each slice goes to the first member of its rendezvous order that has room.
3. Movement is near the least possible: a join moves the newcomer's ``S / (n + 1)`` slices plus a few
   cascades among the others (the members whose capacity fell give up their lowest-weight slices),
   a leave moves the leaver's slices plus a few; ``benchmarks/bench_ring.py`` measures both.
4. :data:`RING_VERSION` names this rule. Version 1 (plain rendezvous: each slice to its highest-weight
   member) is kept only to move the slices of a data dir written under it (``Ring(..., version=1)``).

A one-member ring owns every slice: a single node behaves as if there were no cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat

import xxhash

from polecat.frontier.slices import SLICES

RING_VERSION = 2
"""The ownership rule of :class:`Ring` (rule 4); stored with data that depends on it."""


def _weights(members: tuple[str, ...]) -> list[list[int]]:
    """``weights[i][s]``: member ``i``'s rendezvous weight for slice ``s``. Plain Python, not numpy:
    numpy's import would cost every process that builds a ring (each ``--workers`` child) ~0.1 s of CPU
    and ~10 MB, more than it saves: a 64-member ring takes ~0.12 s to build this way, ~0.06 s with it
    (benchmarks/bench_ring.py), and a ring is built once per membership change."""
    return [list(map(xxhash.xxh3_64_intdigest, repeat(m.encode(), SLICES), range(SLICES))) for m in members]


def _plain(weights: list[list[int]]) -> list[int]:
    """Version 1: each slice to its highest-weight member, ties to the first (the smallest id)."""
    return [column.index(max(column)) for column in zip(*weights, strict=True)]


def _balanced(weights: list[list[int]]) -> list[int]:
    """Rule 2: the greedy capacity-bounded matching, as a member index per slice."""
    n = len(weights)
    base, extra = divmod(SLICES, n)
    flat = [w for row in weights for w in row]  # pair (member i, slice s) at i * SLICES + s
    # Falling weight; a stable sort keeps equal weights (a 2**-64 event) in (member, slice) order, and
    # reverse=True keeps that stability.
    order = sorted(range(len(flat)), key=flat.__getitem__, reverse=True)
    owner = [-1] * SLICES
    load = [0] * n
    left = SLICES
    for pair in order:
        i, s = divmod(pair, SLICES)
        if owner[s] < 0 and (load[i] < base or (load[i] == base and extra)):
            if load[i] == base:
                extra -= 1
            owner[s] = i
            load[i] += 1
            left -= 1
            if not left:
                break
    return owner


class Ring:
    """The slice -> member table for one member list (immutable; build a new one on a change)."""

    __slots__ = ("_members", "_owner")

    def __init__(self, members: Iterable[str], *, version: int = RING_VERSION) -> None:
        ids = tuple(sorted(set(members)))
        if not ids:
            raise ValueError("a ring needs at least one member")
        if not all(ids):
            raise ValueError("member ids must be non-empty")
        if version not in (1, 2):
            raise ValueError(f"unknown ring version {version}")
        self._members = ids
        weights = _weights(ids)
        index = _plain(weights) if version == 1 else _balanced(weights)
        self._owner: tuple[str, ...] = tuple(ids[i] for i in index)

    @property
    def members(self) -> tuple[str, ...]:
        """Member ids, sorted."""
        return self._members

    def owner(self, slice_id: int) -> str:
        """The member that owns ``slice_id``."""
        return self._owner[slice_id]

    def slices_of(self, member: str) -> frozenset[int]:
        """The slices ``member`` owns (empty if it is not a member)."""
        return frozenset(s for s, m in enumerate(self._owner) if m == member)

    def moves(self, new: Ring) -> dict[int, tuple[str, str]]:
        """Slices whose owner differs in ``new``: slice -> (old owner, new owner)."""
        return {s: (a, b) for s, (a, b) in enumerate(zip(self._owner, new._owner, strict=True)) if a != b}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ring) and other._owner == self._owner

    def __hash__(self) -> int:
        return hash(self._members)

    def __repr__(self) -> str:
        return f"Ring({list(self._members)!r})"
