"""The figures of one cluster node, as one frozen record (read by ``/metrics`` and the status page), and
the fetch rate over the last minute that ``polecat cluster status`` shows.

A node's cluster side (:class:`polecat.processes.machine.ClusterNode`) builds one per scrape with
:meth:`~polecat.processes.machine.ClusterNode.stats`; the service reads it through a callable, so it
needs nothing of the processes above it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClusterStats:
    """One node's standing in its cluster."""

    fenced: bool
    """It may lease no URL now (ownership rule 5)."""
    lease_age: float | None
    """Seconds since the last successful lease renewal (None: no lease)."""
    slices_owned: int
    """Slices it may lease URLs from (held and wanted)."""
    slices_wanted: int
    """Slices the Ring gives it."""
    bundles_sent: int
    """Hand-over bundles adopted by their receivers."""
    bundles_adopted: int
    """Hand-over bundles adopted here."""
    bundles_refused: int
    """Hand-over bundles refused here as stale (ownership rule 9)."""
    incompatible_members: int
    """Members it shares no wire version with: nothing is sent to them (polecat/cluster/wire.py rule 4)."""
    wire_refused: int
    """Internal requests refused here for their wire versions (wire rule 5)."""
    stray_urls: int
    """URLs queued here in slices it does not own (ownership rule 7 ships them)."""
    stray_slices: int
    """The slices those URLs are in."""
    checkpoint_rounds: int
    """Checkpoint rounds shipped in this run."""
    checkpoint_failures: int
    """Checkpoint rounds and manifest writes that failed in this run."""
    checkpoint_age: float | None
    """Seconds since the last round shipped (None: none yet in this run, or no checkpoints)."""
    members_ignored: int = 0
    """Member records in etcd ignored because they do not prove the cluster secret
    (:mod:`polecat.cluster.member_records` rule 2)."""
    replays_refused: int = 0
    """Signed requests refused because their proof was used before (:mod:`polecat.cluster.auth`
    rule 3)."""
    batches_refused: int = 0
    """Hand-off batches refused here as stale (ownership rule 9)."""
    fetches_per_s: float = 0.0
    """Page fetches per second over the last minute (:class:`RecentRate`)."""
    leave_failures: int = 0
    """Steps of a leave that failed (:mod:`polecat.cluster.etcd` rule 6)."""
    restored_without_body: int = 0
    """URLs restored as done from a dead member whose pages were on its disk only (no ``[store] url``:
    polecat/cluster/failover.py rule 7)."""
    manifests_refused: int = 0
    """Slices not restored from a checkpoint manifest because a newer fencing token names them
    (polecat/cluster/checkpoint_plan.py rule 8)."""
    claim_frames_streamed: int = 0
    """Content claim frames sent to peers on their claims stream (polecat/cluster/claimstream.py)."""
    claim_frames_http: int = 0
    """Content claim frames sent to peers over HTTP: a peer that offers no stream (0.3.0), or while its
    stream opens or after it broke (claimstream rule 5)."""
    claim_events: tuple[tuple[str, int], ...] = ()
    """This node's content claims by event (polecat/cluster/claimlink.py ``ClaimStats.events``): claims
    sent, pages stored as revisits of a copy (near ones among them), pages stored in full without an
    answer, answers that named no waiting page, frames refused, near copies their original's holder did
    not store; empty with claims off."""


class RecentRate:
    """Events per second over the last ``window`` seconds, from readings of a running count (sans-IO:
    the node adds a reading every second or so with its ``now``). Keeps one reading at or before the
    window's start, so the rate spans the whole window once the count is that old."""

    def __init__(self, window: float = 60.0) -> None:
        self.window = window
        self._readings: deque[tuple[float, int]] = deque()

    def add(self, now: float, count: int) -> None:
        """The count is ``count`` at ``now``; a count lower than the last (a new run) starts over."""
        readings = self._readings
        if readings and count < readings[-1][1]:
            readings.clear()
        readings.append((now, count))
        while len(readings) > 2 and readings[1][0] <= now - self.window:
            readings.popleft()

    def rate(self) -> float:
        """Events per second between the oldest reading kept and the newest (0 with fewer than two)."""
        if len(self._readings) < 2:
            return 0.0
        (t0, c0), (t1, c1) = self._readings[0], self._readings[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0
