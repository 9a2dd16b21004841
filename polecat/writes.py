"""The LMDB writes a frontier decision wants done, as records (decide, then do the I/O).

Rules:
1. A decision (every :class:`~polecat.frontier.frontier.Frontier` method that changes state: adding,
   leasing, completing, refresh requeues, operator controls, adoption and release) reads the frontier's
   tables but writes none: it updates its in-memory index and returns the writes, in order (a
   :class:`Decided` when it also has an answer, a plain list otherwise).
2. Its caller applies them (:meth:`~polecat.frontier.db.FrontierDB.apply`, or
   :meth:`~polecat.frontier.db.FrontierDB.applied` for a :class:`Decided`) before the frontier's next
   call, in the same write transaction, so the next decision and the next commit see them. Writes
   returned but not applied are lost exactly like uncommitted ones at a crash: the URL stays queued and
   is replayed.
3. A decision never reads back a key it wrote itself: it keeps what it needs of its own writes in memory
   (e.g. the seen keys an adoption has marked, the queue keys a lease skipped), because they are not in
   the transaction until applied.
4. Opening a frontier is the one decision with no caller in between: the constructor applies the writes
   its open decides (configured blocks and throttles, refetch requests) itself, through the same applier.

Not decisions, and why: the schema upgrade (polecat/frontier/migrate.py) rewrites whole tables inside
``FrontierDB``'s open, before any frontier exists; ``polecat store repair`` (refetch.py) is an offline
tool that writes refetch requests into a stopped node's ``ops`` table; ``Frontier.commit`` is the convenience
for tools and tests that applies :meth:`prepare_commit`'s writes and commits, where no node runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Literal, NamedTuple, TypeVar

Table = Literal["queue", "urls", "robots", "seen", "hosts", "ops", "priors", "near", "meta", "ready",
                "resident", "refresh", "due", "fresh", "claims"]
"""The tables a decision writes (FrontierDB attributes of the same names)."""

T = TypeVar("T")


class Put(NamedTuple):
    """Set ``key`` to ``value`` in ``table`` (in the dupsort ``near`` table: add ``value`` under ``key``).

    A named tuple, as :class:`Delete` is: a seed or a link admitted makes four or five writes, and a
    frozen dataclass's construction (one ``object.__setattr__`` a field) cost three times a tuple's."""

    table: Table
    key: bytes
    value: bytes


class Delete(NamedTuple):
    """Remove ``key`` from ``table`` (nothing if absent)."""

    table: Table
    key: bytes


@dataclass(frozen=True, slots=True)
class DeleteSlices:
    """Remove every record of ``slices`` from every slice-keyed table (a release, handover.py)."""

    slices: frozenset[int]


Write = Put | Delete | DeleteSlices


@dataclass(frozen=True, slots=True)
class Decided(Generic[T]):
    """A decision's answer and the writes that record it (rule 1), applied with
    :meth:`~polecat.frontier.db.FrontierDB.applied`."""

    value: T
    writes: list[Write]
