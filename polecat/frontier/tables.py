"""What the frontier needs from its database: named tables of byte keys, read in one open transaction,
written only by applying the writes decisions return (polecat/writes.py).

:class:`~polecat.frontier.db.FrontierDB` keeps them in LMDB; :class:`polecat.testing.fakes.MemoryFrontierDB`
keeps them in dicts, for decision tests. The frontier sees only :class:`FrontierTables`, so both behave
alike by keeping these rules:

1. Keys are bytes, ordered bytewise. :meth:`TableReader.items` yields the ``(key, value)`` pairs of a
   table whose key starts with a prefix, in key order: a slice, or a host's queue, is one such range
   (polecat/frontier/keys.py).
2. Reads see every write applied so far, committed or not: there is one transaction, and nothing but
   :meth:`FrontierTables.apply` writes to it.
3. :meth:`FrontierTables.apply` does its writes in order: ``Put`` sets a key, ``Delete`` removes one
   (nothing if absent), ``DeleteSlices`` removes every record of its slices from the slice-keyed tables.
4. :meth:`FrontierTables.commit` makes everything applied so far durable and answers the commit
   counter; what is applied after the last commit is lost when the database closes (a crash).
5. A :meth:`FrontierTables.snapshot` reads the last commit, whatever is applied after it, until closed.
6. Every write applied to a slice-keyed table marks its slice (a cross-slice op, keys.py rule 4, marks
   every slice; a ``DeleteSlices`` its slices); a commit makes the marks applied before it *committed*;
   :meth:`FrontierTables.take_written` answers and clears the committed marks (a checkpoint round,
   whose snapshot is that commit, polecat/cluster/checkpoint_plan.py rule 2), and
   :meth:`FrontierTables.mark_written` puts some back (a round that failed). A database opened anew
   starts with every slice marked: what was written before a restart is not known.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from polecat.writes import Table, Write

Lookup = Callable[[bytes], bytes | None]
"""A key's value in one table, None if absent."""


class TableReader(Protocol):
    """Reads of named tables (rules 1 and 2)."""

    def get(self, table: Table, key: bytes) -> bytes | None:
        """The value of ``key`` in ``table``, None if absent."""
        ...

    def items(self, table: Table, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """The records of ``table`` whose key starts with ``prefix``, in key order (rule 1)."""
        ...


class Snapshot(TableReader, Protocol):
    """The tables as of one commit (rule 5)."""

    def close(self) -> None:
        """Stop reading the snapshot (LMDB reuses its pages only after that)."""
        ...


class FrontierTables(TableReader, Protocol):
    """The frontier's database, as the frontier uses it (see the module docstring)."""

    pending: int
    """Changes counted since the last commit; the node commits when it passes ``frontier.commit_ops``."""

    def getter(self, table: Table) -> Lookup:
        """:meth:`get` bound to ``table``, for lookups in a loop; good until the next commit."""
        ...

    def count(self, table: Table) -> int:
        """The records in ``table``."""
        ...

    def items_after(self, table: Table, key: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The records of ``table`` whose key sorts after ``key``, in key order: a scan in steps goes on
        where it stopped, whatever was committed in between (not for ``seen``)."""
        ...

    def apply(self, writes: Sequence[Write]) -> None:
        """Do a decision's writes (rule 3)."""
        ...

    def commit(self) -> int:
        """Make every write applied so far durable (rule 4); answers the new commit counter."""
        ...

    def commit_if_big(self) -> bool:
        """Commit now if the writes applied since the last commit are many (a long run of them outside a
        node's periodic commits: polecat/frontier/db.py rule 16); whether it did."""
        ...

    def snapshot(self) -> Snapshot:
        """A reader of the last commit (rule 5)."""
        ...

    def take_written(self) -> frozenset[int]:
        """The slices written up to the last commit since the last take (rule 6), cleared."""
        ...

    def mark_written(self, slices: Iterable[int]) -> None:
        """Mark ``slices`` as committed writes again (rule 6: a round that did not ship them)."""
        ...
