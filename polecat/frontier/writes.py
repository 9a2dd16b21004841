"""The LMDB writes a frontier decision wants done, as records (decide, then do the I/O).

Rules:
1. A decision (:meth:`~polecat.frontier.frontier.Frontier.complete`) reads the frontier's tables but
   writes none: it updates its in-memory index and returns the writes, in order.
2. Its caller applies them (:meth:`~polecat.frontier.db.FrontierDB.apply`) before the frontier's next
   call, in the same write transaction, so the next decision and the next commit see them. Writes
   returned but not applied are lost exactly like uncommitted ones at a crash: the URL stays queued and
   is replayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Table = Literal["queue", "urls", "robots"]
"""The tables a decision writes (FrontierDB attributes of the same names)."""


@dataclass(frozen=True, slots=True)
class Put:
    """Set ``key`` to ``value`` in ``table``."""

    table: Table
    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove ``key`` from ``table`` (nothing if absent)."""

    table: Table
    key: bytes


Write = Put | Delete
