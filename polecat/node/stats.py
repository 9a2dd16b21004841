"""The node's metrics as one frozen record, assembled from each component's own statistics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from polecat.node.verdict import nothing_fetched_cause

if TYPE_CHECKING:
    from polecat.dedup.canon import CanonStats
    from polecat.dedup.nearindex import NearStats
    from polecat.dedup.seen import SeenStats
    from polecat.fetch.dns import DnsStats
    from polecat.fetch.pool import TlsStats
    from polecat.frontier.records import FrontierStats
    from polecat.frontier.robots import RobotsStats
    from polecat.store.base import StoreStats


@dataclass(frozen=True, slots=True)
class CrawlStats:
    """What a node reports (the CLI's progress line and summary, the status API)."""

    elapsed_s: float
    fetches: int
    """Page requests started in this run (robots.txt requests not included)."""
    fetches_per_s: float
    politeness_violations: int
    """Requests the node started before the host's next-allowed time (a self-check; must be 0)."""
    errors: tuple[tuple[str, int], ...]
    queued: int
    in_flight: int
    hosts: int
    hosts_ready: int
    hosts_waiting: int
    hosts_parked: int
    parked: tuple[tuple[str, str], ...]
    """``(host, reason)`` of hosts parked in this run and still in memory (polecat/frontier/host_table.py
    rule 11); :attr:`hosts_parked` counts them all."""
    urls_accepted: int
    urls_seen_again: int
    urls_rejected: tuple[tuple[str, int], ...]
    urls_done: tuple[tuple[str, int], ...]
    canon_collapsed: int
    bloom_fp_rate: float
    bloom_memory_bytes: int
    near_duplicates: int
    near_dup_collapse_ratio: float
    """Near-duplicate pages / (pages stored whole + near-duplicates), both counted in this run (a
    near-duplicate's delta is not a page stored whole)."""
    robots_failure_rate: float
    robots_unreachable: int
    dns_hit_ratio: float
    pages_stored: int
    bytes_stored: int
    answered: int = 0
    """Page requests in this run that got an HTTP response (any status)."""
    ended: str = ""
    """Why the run ended (polecat/node/verdict.py: ``queue empty``, ``max pages reached``, ``stopped``,
    ``every host left was given up``, ``error``); empty while it runs."""
    hosts_backoff: int = 0
    """Waiting hosts that are backing off after a failure (not just paced by their interval)."""
    next_ready_in: float = 0.0
    """Seconds until the next waiting host may go (0.0: none waits)."""
    urls_done_total: tuple[tuple[str, int], ...] = ()
    """Outcomes over the whole crawl (every run on this data dir); ``urls_done`` counts this run's."""
    robots_too_complex: int = 0
    """robots.txt files whose rules are past the per-URL matching bound: those hosts are disallowed."""
    robots_over_bound: int = 0
    """URLs disallowed because matching them against their robots.txt would have passed the bound."""
    cause: str = ""
    """When the run fetched nothing though it tried: why, and the fix, in one line (else empty)."""
    refresh_queued: int = 0
    """Fetched URLs queued again in this run because their refresh was due."""
    urls_dropped_blocked: int = 0
    """Queued URLs dropped (recorded done, ``skipped:blocked``) by block patterns in this run."""
    tls_handshakes: int = 0
    """TLS handshakes in this run (a new https connection each)."""
    tls_resumed: int = 0
    """Those that resumed a kept session (polecat/fetch/pool.py rule 10)."""
    near_lookups: int = 0
    """Near-duplicate index lookups in this run."""
    near_rejected: int = 0
    """Index candidates within the distance whose verification sketch was too far (false candidates)."""
    freshness: tuple[int, int, int, int] | None = None
    """``(tracked, due, important, within)`` of the freshness SLO (refresh rule 9), as of the last
    refresh scan or the end of a run (counters kept, polecat/frontier/refresh_index.py rule 3); None
    before the first."""
    pages_cut: int = 0
    """HTML pages of this run parsed only up to the parse budget (polecat/parse/guard.py): stored whole,
    with the links read before the cut; not errors."""
    requisites_queued: int = 0
    """Page requisites queued in this run (``scope.requisites``, polecat/frontier/requisites.py); they are
    among ``urls_accepted``."""
    near_rebuild_left: int = 0
    """Store records of an older fingerprint format the background rebuild has not indexed yet
    (polecat/node/commits.py rule 7); 0 when none are owed."""
    loop_lag_p99: float = 0.0
    """Seconds the event loop ran a timer late, 99th percentile over the run (:class:`LoopLagSamples`;
    ``polecat crawl`` measures it, 0.0 where nothing did)."""
    loop_lag_max: float = 0.0
    """The most it ran one late, in seconds."""
    loop_busy_p99: float = 0.0
    """:attr:`loop_lag_p99` of the samples bounded by the process's CPU time (:class:`LoopLagSamples`)."""
    loop_busy_max: float = 0.0
    """:attr:`loop_lag_max` of the samples bounded by the process's CPU time."""
    loop_stalls: int = 0
    """Samples of the run's loop-lag timer that ran :data:`LOOP_STALL` seconds late or more (on a loaded
    machine, mostly time no CPU was free)."""
    loop_own_p99: float = 0.0
    """:attr:`loop_lag_p99` of the samples bounded by the CPU time of the loop's thread: the most a step
    of the loop itself can have held it (:class:`LoopLagSamples`)."""
    loop_own_max: float = 0.0
    """:attr:`loop_lag_max` of the samples bounded by the loop thread's CPU time."""
    loop_own_stalls: int = 0
    """:attr:`loop_stalls` of the samples bounded by the loop thread's CPU time: steps of the event loop
    that can have held it :data:`LOOP_STALL` seconds or more (issue 39's bound on a step)."""
    collector: str = ""
    """The cyclic collector's passes by generation in words (polecat/runloop.py rule 7; ``polecat crawl``
    records them, empty where nothing did)."""

    @property
    def fetched_nothing(self) -> bool:
        """The verdict a script acts on: True means exit code 3 from ``polecat crawl``."""
        return bool(self.cause)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


LAG_TICK = 0.05
"""Seconds between two loop-lag samples (:class:`LoopLagSamples`)."""
LOOP_STALL = 0.05
"""Seconds late a loop-lag sample counts as a stall: no step of the event loop may hold it that long."""


class LoopLagSamples:
    """How late the event loop ran a timer due every :data:`LAG_TICK` seconds, over a whole run: counts
    by whole milliseconds late (one entry per value seen, however long the run), for a percentile and the
    maximum. Each sample is kept three times: as measured; bounded by the CPU time this process used over
    its interval (:attr:`busy`), the part of a delay its own work (the loop, or another of its threads
    holding the GIL) can explain; and bounded by the CPU time of the loop's own thread (:attr:`own`), the
    most a step of the loop can have held it. On a loaded machine the rest is time no CPU was free."""

    def __init__(self) -> None:
        self._by_ms: Counter[int] = Counter()
        self.stalls = 0
        """Samples :data:`LOOP_STALL` seconds late or more."""
        self.busy: LoopLagSamples | None = None
        """The samples bounded by this process's CPU time (None: not kept, as in :attr:`busy` itself)."""
        self.own: LoopLagSamples | None = None
        """The samples bounded by the loop thread's CPU time (None: not kept)."""

    @classmethod
    def with_busy(cls) -> LoopLagSamples:
        samples = cls()
        samples.busy, samples.own = cls(), cls()
        return samples

    def record(self, late: float, cpu: float = 0.0, loop_cpu: float = 0.0) -> None:
        """A timer ran ``late`` seconds late; the process used ``cpu`` seconds of CPU since it was set, the
        loop's thread ``loop_cpu`` of them."""
        self._by_ms[int(late * 1000.0)] += 1
        if late >= LOOP_STALL:
            self.stalls += 1
        if self.busy is not None:
            self.busy.record(min(late, cpu))
        if self.own is not None:
            self.own.record(min(late, loop_cpu))

    def quantile(self, q: float) -> float:
        """The ``q`` quantile of the samples, in seconds (to the millisecond below; 0.0 with none)."""
        left = q * sum(self._by_ms.values())
        for ms in sorted(self._by_ms):
            left -= self._by_ms[ms]
            if left <= 0:
                return ms / 1000.0
        return self.max

    @property
    def max(self) -> float:
        return max(self._by_ms, default=0) / 1000.0


def collect_stats(*, now: float, started_at: float, fetches: int, violations: int,
                  errors: Mapping[str, int], near_dups: int, near_deltas: int, frontier: FrontierStats,
                  pages_cut: int = 0, requisites_queued: int = 0,
                  parked: Mapping[str, str], bodies_at_start: int, seen: SeenStats,
                  canon: CanonStats, robots: RobotsStats, dns: DnsStats, store: StoreStats,
                  answered: int = 0, ended: str = "",
                  seeds_refused: Sequence[tuple[str, str]] = (), seeds_refused_total: int = 0,
                  refresh_queued: int = 0,
                  freshness: tuple[int, int, int, int] | None = None,
                  near: NearStats | None = None, near_rebuild_left: int = 0,
                  tls: TlsStats | None = None) -> CrawlStats:
    elapsed = max(1e-9, now - started_at) if started_at else 0.0
    kept = store.bodies - bodies_at_start - near_deltas + near_dups
    return CrawlStats(
        elapsed_s=elapsed, fetches=fetches, fetches_per_s=fetches / elapsed if elapsed else 0.0,
        politeness_violations=violations, errors=tuple(sorted(errors.items())),
        queued=frontier.queued, in_flight=frontier.in_flight, hosts=frontier.hosts,
        hosts_ready=frontier.hosts_ready, hosts_waiting=frontier.hosts_waiting,
        hosts_parked=frontier.hosts_parked, parked=tuple(sorted(parked.items())),
        urls_accepted=frontier.accepted, urls_seen_again=frontier.seen,
        urls_rejected=frontier.rejected, urls_done=frontier.done, canon_collapsed=canon.collapsed,
        bloom_fp_rate=seen.observed_fp_rate, bloom_memory_bytes=seen.memory_bytes, near_duplicates=near_dups,
        near_dup_collapse_ratio=near_dups / kept if kept else 0.0,
        robots_failure_rate=robots.failure_rate, robots_unreachable=robots.unreachable,
        robots_too_complex=robots.too_complex, robots_over_bound=robots.over_bound,
        dns_hit_ratio=dns.hit_ratio, pages_stored=store.bodies, bytes_stored=store.stored_bytes,
        answered=answered, ended=ended, urls_done_total=frontier.done_total,
        hosts_backoff=frontier.hosts_backoff, urls_dropped_blocked=frontier.dropped_blocked,
        near_lookups=near.lookups if near else 0, near_rejected=near.rejected if near else 0,
        next_ready_in=max(0.0, frontier.next_ready_at - now) if frontier.next_ready_at else 0.0,
        cause=nothing_fetched_cause(answered=answered, attempted=fetches, parked=sorted(parked.items()),
                                    parked_total=frontier.hosts_parked,
                                    seeds_refused=seeds_refused, seeds_refused_total=seeds_refused_total,
                                    done=frontier.done) if ended else "",
        refresh_queued=refresh_queued, freshness=freshness, pages_cut=pages_cut,
        requisites_queued=requisites_queued,
        near_rebuild_left=near_rebuild_left,
        tls_handshakes=tls.handshakes if tls else 0, tls_resumed=tls.resumed if tls else 0,
    )
