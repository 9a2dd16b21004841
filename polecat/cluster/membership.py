"""Who is in the crawl: the :class:`Membership` seam and its ``local`` backend.

Rules:
1. A member is an id (stable across restarts: its data and its slices follow it) and the address its
   hand-off receiver listens on (``unix:/path`` or ``http://host:port``); in etcd also whether it is
   leaving, the lease it registered under and the wire versions it speaks (polecat/cluster/wire.py).
2. A membership view is a tuple of members sorted by id, so every member that sees the same list
   computes the same slice owners (the Ring is deterministic from this list).
3. ``changes()`` yields the current view first, then every later view; the ``local`` backend's list is
   fixed by the parent process for the whole run, so it yields once. The etcd backend
   (:mod:`polecat.cluster.etcd`) yields on every join, leave and lease expiry.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Protocol

from polecat.cluster.wire import OLD, Wire
from polecat.errors import PolecatError


@dataclass(frozen=True, slots=True, order=True)
class Member:
    """One node process of the crawl."""

    id: str
    address: str
    """Where its hand-off receiver listens: ``unix:/path/to.sock`` or ``http://127.0.0.1:port``."""
    leaving: bool = False
    """It is stopping: it receives no slices (ownership rule 8). The etcd backend only."""
    lease: int = 0
    """The etcd lease it registered under (0: unknown, or the ``local`` backend): its fencing token."""
    wire: Wire = OLD
    """The wire versions and release it speaks (wire rule 2; its record names them, or it is 0.2.0's)."""


def view(members: Iterable[Member]) -> tuple[Member, ...]:
    """The canonical view of ``members`` (rule 2); refuses duplicate ids."""
    out = tuple(sorted(members))
    ids = [m.id for m in out]
    if len(set(ids)) != len(ids):
        raise PolecatError(f"duplicate member ids in {ids}")
    return out


class Membership(Protocol):
    """The live member list as seen by one member."""

    @property
    def self_id(self) -> str:
        """This process's member id."""
        ...

    def members(self) -> tuple[Member, ...]:
        """The current view (rule 2)."""
        ...

    def changes(self) -> AsyncIterator[tuple[Member, ...]]:
        """The current view, then each new view as membership changes (rule 3)."""
        ...

    async def close(self) -> None:
        """Leave: end every ``changes()`` iterator."""
        ...


class LocalMembership:
    """The ``--workers N`` backend: a fixed member list handed down by the parent process."""

    def __init__(self, self_id: str, members: Iterable[Member]) -> None:
        self._members = view(members)
        if self_id not in {m.id for m in self._members}:
            raise PolecatError(f"member {self_id!r} is not in the member list")
        self._self_id = self_id
        self._closed = asyncio.Event()

    @property
    def self_id(self) -> str:
        return self._self_id

    def members(self) -> tuple[Member, ...]:
        return self._members

    async def changes(self) -> AsyncIterator[tuple[Member, ...]]:
        yield self._members
        await self._closed.wait()

    async def close(self) -> None:
        self._closed.set()
