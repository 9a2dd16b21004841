"""The figures of one cluster node, as one frozen record (read by ``/metrics`` and the status page).

A node's cluster side (:class:`polecat.processes.machine.ClusterNode`) builds one per scrape with
:meth:`~polecat.processes.machine.ClusterNode.stats`; the service reads it through a callable, so it
needs nothing of the processes above it.
"""

from __future__ import annotations

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
