"""When each outbox batch goes to its peer: the sans-IO sending state machine of the hand-off.

Rules:
1. Batches to one peer go oldest first, at most ``window`` in flight to that peer at once; peers are
   independent (a slow or dead peer never holds up another).
2. A batch is forgotten only when its receiver acknowledged it (the receiver committed its URLs).
3. "Busy" (the receiver's inbox is full) is back-pressure, not failure: that peer is not sent to again
   before its ``retry_after`` (at least ``min_busy_wait``); the batch stays first in line.
4. A transport error or an unexpected answer backs the peer off exponentially (``base_backoff`` doubling
   up to ``max_backoff``); the first acknowledgement resets it. Nothing is ever dropped for failing.
5. The machine takes ``now`` and returns decisions; the async driver does the sending.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Send:
    """Send batch ``seq`` of the outbox to ``peer`` now."""

    peer: str
    seq: int


@dataclass(frozen=True, slots=True)
class Plan:
    """What to send now, and when to ask again if nothing changes (None: only when a batch is queued or
    a reply arrives)."""

    sends: tuple[Send, ...]
    wake_at: float | None


@dataclass(slots=True)
class _Peer:
    queue: list[int] = field(default_factory=list)
    """Unacknowledged seqs, oldest first (in flight ones included)."""
    in_flight: set[int] = field(default_factory=set)
    not_before: float = 0.0
    failures: int = 0


class HandoffSender:
    """Tracks every unacknowledged batch per peer and decides what goes next (see the rules)."""

    def __init__(self, *, window: int = 4, base_backoff: float = 0.2, max_backoff: float = 10.0,
                 min_busy_wait: float = 0.05) -> None:
        self._window = window
        self._base = base_backoff
        self._cap = max_backoff
        self._min_busy = min_busy_wait
        self._peers: dict[str, _Peer] = defaultdict(_Peer)
        self.sent = self.acked_batches = self.busy_replies = self.failures = 0

    def queued(self, peer: str, seq: int) -> None:
        """A batch was sealed (or found in the outbox at start)."""
        self._peers[peer].queue.append(seq)

    def next(self, now: float) -> Plan:
        sends: list[Send] = []
        wake: float | None = None
        for name, p in self._peers.items():
            waiting = [s for s in p.queue if s not in p.in_flight]
            if not waiting:
                continue
            if p.not_before > now:
                wake = p.not_before if wake is None else min(wake, p.not_before)
                continue
            for seq in waiting[: max(0, self._window - len(p.in_flight))]:
                p.in_flight.add(seq)
                sends.append(Send(name, seq))
        self.sent += len(sends)
        return Plan(tuple(sends), wake)

    def acked(self, peer: str, seq: int) -> None:
        """The receiver committed the batch: it may leave the outbox (rule 2)."""
        p = self._peers[peer]
        p.in_flight.discard(seq)
        if seq in p.queue:
            p.queue.remove(seq)
        p.failures = 0
        self.acked_batches += 1

    def forget(self, peer: str, seq: int) -> bool:
        """Drop a queued batch whose peer left the cluster; False while it is in flight."""
        p = self._peers[peer]
        if seq in p.in_flight:
            return False
        if seq in p.queue:
            p.queue.remove(seq)
        return True

    def busy(self, peer: str, seq: int, now: float, retry_after: float) -> None:
        """The receiver's inbox is full (rule 3)."""
        p = self._peers[peer]
        p.in_flight.discard(seq)
        p.not_before = max(p.not_before, now + max(retry_after, self._min_busy))
        self.busy_replies += 1

    def failed(self, peer: str, seq: int, now: float) -> None:
        """The batch did not get through (rule 4)."""
        p = self._peers[peer]
        p.in_flight.discard(seq)
        p.failures += 1
        p.not_before = max(p.not_before, now + min(self._cap, self._base * 2 ** (p.failures - 1)))
        self.failures += 1

    def failing(self, peer: str) -> bool:
        """Whether the last attempt to ``peer`` failed (rule 4's back-off is running)."""
        return self._peers[peer].failures > 0

    def backlog(self) -> int:
        """Unacknowledged batches over all peers."""
        return sum(len(p.queue) for p in self._peers.values())
