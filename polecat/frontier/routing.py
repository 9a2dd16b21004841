"""Routing before dedup: which discovered URLs this frontier judges, and which go to their owner.

Rules (DESIGN.md section 5, "URL hand-off"):

1. The owner of a URL's slice (``owners.owner(slice_of(host_key(url)))``, a
   :class:`~polecat.cluster.ring.Ring` in a cluster) decides whether the URL is new. A frontier runs the
   seen-set test, and so marks a URL seen, only for URLs it owns.
2. URLs owned by another member come back as an outbox decision (owner -> URLs, in discovery order); the
   caller stages them for that owner (polecat/cluster/outbox.py) and they are never marked seen here.
3. With no routing (a single node) or a one-member ring every URL is owned, and admission is exactly
   :meth:`~polecat.frontier.frontier.Frontier.add_many`: no per-URL hashing is done.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from polecat.frontier.slices import slice_of
from polecat.hosts import host_key


class Owners(Protocol):
    """The slice -> member table (:class:`polecat.cluster.ring.Ring` is one)."""

    @property
    def members(self) -> tuple[str, ...]: ...

    def owner(self, slice_id: int) -> str: ...


@dataclass(frozen=True, slots=True)
class Admission:
    """What :meth:`Frontier.admit` decided for one batch of discovered URLs."""

    accepted: int
    """Owned URLs that were new and are now queued."""
    outbox: dict[str, list[str]] = field(default_factory=dict)
    """Owner -> URLs for other members, to stage in their outbox (rule 2); empty on a single node."""
    requisites: bool = False
    """The URLs are page requisites (polecat/frontier/requisites.py): their owners judge them as such."""


class Routing:
    """Rule 1 for one member: ``self_id`` under ``owners`` (immutable; build a new one on a change)."""

    __slots__ = ("_owner", "self_id", "single")

    def __init__(self, owners: Owners, self_id: str) -> None:
        self._owner = owners.owner
        self.self_id = self_id
        self.single = owners.members == (self_id,)
        """Every slice is this member's (rule 3)."""

    def owns(self, url: str) -> bool:
        """Whether this member judges ``url`` (a canonical URL)."""
        return self.single or self._owner(slice_of(host_key(url))) == self.self_id

    def split(self, urls: Iterable[str]) -> tuple[list[str], dict[str, list[str]]]:
        """The URLs this member owns, and the others per owner (rules 1 and 2), orders kept."""
        if self.single:
            return list(urls), {}
        mine: list[str] = []
        out: dict[str, list[str]] = {}
        owner_of, me = self._owner, self.self_id
        for url in urls:
            owner = owner_of(slice_of(host_key(url)))
            if owner == me:
                mine.append(url)
            else:
                out.setdefault(owner, []).append(url)
        return mine, out
