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

5. A decision that writes many rows of one table at once (a seeds batch: five rows a seed) may return them
   as one :class:`PutRows`, which is its rows' :class:`Put` s in order: applied and logged row by row
   (polecat/frontier/wal.py's entries hold the same rows as with one ``Put`` each). Gathering rows in one
   moves them past the decision's other writes: only where none of those writes one of their keys.

Not decisions, and why: the schema upgrade (polecat/frontier/migrate.py) rewrites whole tables inside
``FrontierDB``'s open, before any frontier exists; ``polecat store repair`` (refetch.py) is an offline
tool that writes refetch requests into a stopped node's ``ops`` table; ``Frontier.commit`` is the convenience
for tools and tests that applies :meth:`prepare_commit`'s writes and commits, where no node runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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


class PutRows(NamedTuple):
    """``Put(table, keys[i], values[i])`` for each ``i``, in order (rule 5): no object a row (a seeds
    batch's rows cost a ``Put`` each to make, apply and drop)."""

    table: Table
    keys: list[bytes]
    values: list[bytes]

    def puts(self) -> list[Put]:
        """Its rows as :class:`Put` s (readers that want them one by one: tests, the memory fake)."""
        return [Put(self.table, key, value) for key, value in zip(self.keys, self.values, strict=True)]


Write = Put | Delete | DeleteSlices | PutRows


def row_count(writes: Iterable[Write]) -> int:
    """The rows ``writes`` write or delete (a :class:`PutRows` counts its rows, a ``DeleteSlices`` one)."""
    return sum(len(w.keys) if type(w) is PutRows else 1 for w in writes)


def put_bytes(writes: Iterable[Write]) -> int:
    """The bytes of the keys and values ``writes`` put (a :class:`PutRows` summed, not expanded)."""
    total = 0
    for w in writes:
        if type(w) is Put:
            total += len(w.key) + len(w.value)
        elif type(w) is PutRows:
            total += sum(map(len, w.keys)) + sum(map(len, w.values))
    return total


def expand(writes: Iterable[Write]) -> Iterator[Put | Delete | DeleteSlices]:
    """``writes`` with each :class:`PutRows` as its rows' :class:`Put` s, in order (rule 5)."""
    for w in writes:
        if isinstance(w, PutRows):
            yield from w.puts()
        else:
            yield w


@dataclass(frozen=True, slots=True)
class Decided(Generic[T]):
    """A decision's answer and the writes that record it (rule 1), applied with
    :meth:`~polecat.frontier.db.FrontierDB.applied`."""

    value: T
    writes: list[Write]
