"""Which member owns which slice.

Rules:

1. Ownership is a pure function of the member list: ``owner(s) = argmax over members m of
   xxh3_64(m, s)`` (rendezvous / highest-random-weight hashing). Every member that computes it from the
   same list agrees, with no messages exchanged; the order of the list does not matter.
2. Each slice has exactly one owner. When a member joins, only the slices it now wins move (to it); when
   a member leaves, only its own slices move. That is the least movement possible.
3. Slices spread evenly: each member's share is ``S / n`` within hashing noise (a binomial spread,
   about ``sqrt(S / n)``).

A one-member ring owns every slice: a single node behaves as if there were no cluster.
"""

from __future__ import annotations

from collections.abc import Iterable

import xxhash

from polecat.frontier.slices import SLICES


def _weight(member: bytes, slice_id: int) -> int:
    return xxhash.xxh3_64_intdigest(member, seed=slice_id)


class Ring:
    """The slice -> member table for one member list (immutable; build a new one on a change)."""

    __slots__ = ("_members", "_owner")

    def __init__(self, members: Iterable[str]) -> None:
        ids = sorted(set(members))
        if not ids:
            raise ValueError("a ring needs at least one member")
        if not all(ids):
            raise ValueError("member ids must be non-empty")
        self._members = tuple(ids)
        encoded = [m.encode() for m in ids]
        owners: list[str] = []
        for s in range(SLICES):
            # Ties (a 2**-64 event) go to the smallest id: only a strictly larger weight replaces the best.
            best, best_w = 0, -1
            for i, key in enumerate(encoded):
                w = _weight(key, s)
                if w > best_w:
                    best, best_w = i, w
            owners.append(ids[best])
        self._owner: tuple[str, ...] = tuple(owners)

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
        return isinstance(other, Ring) and other._members == self._members

    def __hash__(self) -> int:
        return hash(self._members)

    def __repr__(self) -> str:
        return f"Ring({list(self._members)!r})"
