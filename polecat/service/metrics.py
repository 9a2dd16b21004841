"""Prometheus metrics of a node, in the text format at ``/metrics``.

Rules:
- Figures the components already count are read at scrape time from :meth:`Crawler.stats` (one
  snapshot per scrape, the same one ``/admin/crawl/status`` reports), so the two never disagree.
- Observed as requests end (:meth:`NodeMetrics.observe`): the fetch-latency histogram and the fetch
  counter (counted when a page request ends, so it only grows; the stats' ``fetches`` also counts those
  in flight and drops a lease withdrawn before sending: both agree whenever nothing is in flight).
- Names follow Prometheus conventions: ``polecat_`` prefix, ``_total`` counters, base units
  (``_seconds``, ``_bytes``), ratios in [0, 1].
- Counters count this process's run (they restart at 0 with the node, which Prometheus handles).
- Each family is yielded once, with one HELP line: ``promtool check metrics`` refuses a second
  (tests/test_service_metrics.py runs it on a live node's scrape).
- A node in a cluster adds ``polecat_cluster_*`` from its :class:`~polecat.cluster.stats.ClusterStats`
  record (read through a callable, as the service sits below the processes that run the cluster):
  fenced, lease age, slices owned / wanted / stray, stray URLs, hand-over bundles by outcome, hand-off
  batches refused as stale, checkpoint rounds, failures and age, content claim frames sent by
  transport (the peer's claims stream, or HTTP: a count of HTTP growing with the frames says streams
  do not open) and, with claims on, its claims by event (copies, unanswered, ...). A gauge with nothing
  to say (no lease, no round yet) has no sample.
- The collector's passes by generation (polecat/runloop.py rule 7): count, CPU seconds and the longest,
  read from :data:`polecat.runloop.COLLECTOR` (all zero in a process that did not install it); and the
  objects frozen out of them (rule 8).
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.stats import ClusterStats
from polecat.frontier.records import Completion, Lease
from polecat.node.stats import LOOP_STALL
from polecat.runloop import COLLECTOR
from polecat.version import __version__

if TYPE_CHECKING:
    from polecat.node.crawler import Crawler

LAG_WINDOW = 60.0
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class LoopLag:
    """How late the event loop ran the service's timer: the worst over the last :data:`LAG_WINDOW`
    seconds, so a stall between two scrapes still shows at the next one; and since the start, the
    samples :data:`~polecat.node.stats.LOOP_STALL` late or more (stalls) and the worst."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float]] = deque()
        self.stalls = 0
        """Samples :data:`~polecat.node.stats.LOOP_STALL` seconds late or more, since the start."""
        self.worst = 0.0
        """The latest the loop ran the timer, in seconds, since the start."""

    def record(self, now: float, lag: float) -> None:
        """The timer ran ``lag`` seconds late at ``now``."""
        if lag >= LOOP_STALL:
            self.stalls += 1
        self.worst = max(self.worst, lag)
        self._samples.append((now, lag))
        while self._samples[0][0] < now - LAG_WINDOW:
            self._samples.popleft()

    @property
    def seconds(self) -> float:
        return max((lag for _, lag in self._samples), default=0.0)


class NodeMetrics(Collector):
    """The registry of one node; see the module rules. ``clock.wall()`` is the scrape's ``now``."""

    def __init__(self, crawler: Crawler, lag: LoopLag, *, clock: Clock = SYSTEM_CLOCK,
                 cluster: Callable[[], ClusterStats] | None = None) -> None:
        self._crawler = crawler
        self._cluster = cluster
        """The node's cluster figures (None: not in a cluster, no ``polecat_cluster_*`` metrics)."""
        self._lag = lag
        self._clock = clock
        self.registry = CollectorRegistry(auto_describe=False)
        self._fetches = Counter("polecat_fetches", "Page requests made (counted as they end)",
                                registry=self.registry)
        self._latency = Histogram("polecat_fetch_duration_seconds",
                                  "Page request time, from sending to the end of the body",
                                  ["kind"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(self)

    def observe(self, lease: Lease, completion: Completion) -> None:
        attempt = completion.attempt
        if lease.kind == "page":
            self._fetches.inc()
        self._latency.labels(lease.kind).observe(max(0.0, attempt.ended - attempt.started))

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        c = self._crawler
        s = c.stats()
        now = self._clock.wall()
        info = GaugeMetricFamily("polecat_build_info", "The release of polecat this node runs (always 1)",
                                 labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield _counter("polecat_politeness_violations",
                       "Requests started before their host's next-allowed time (must stay 0)",
                       s.politeness_violations)
        bands = GaugeMetricFamily("polecat_queue_urls", "Queued URLs by priority band", labels=["band"])
        for band, n in (c.frontier.queue_bands() or {}).items():  # none while first counted, in steps
            bands.add_metric([band], n)
        yield bands
        hosts = GaugeMetricFamily("polecat_hosts", "Hosts by scheduling state", labels=["state"])
        quarantined = c.frontier.quarantined_hosts()
        for state, n in (("ready", s.hosts_ready), ("waiting", s.hosts_waiting),
                         ("quarantined", quarantined), ("parked", s.hosts_parked)):
            hosts.add_metric([state], n)
        yield hosts
        known, with_queue = c.frontier.host_counts()
        yield _gauge("polecat_hosts_known", "Hosts the frontier knows, in memory or not", known)
        yield _gauge("polecat_hosts_with_queue", "Hosts with URLs queued, in memory or not", with_queue)
        yield _gauge("polecat_in_flight_requests", "Requests in flight", s.in_flight)
        yield _gauge("polecat_paused", "1 while the operator has paused leasing", int(c.paused))
        yield _gauge("polecat_bloom_false_positive_ratio", "Observed Bloom filter false-positive rate",
                     s.bloom_fp_rate)
        yield _gauge("polecat_near_duplicate_ratio",
                     "Near-duplicate pages / (pages stored + near-duplicates) in this run",
                     s.near_dup_collapse_ratio)
        robots = c.robots.stats()
        rf = CounterMetricFamily("polecat_robots_fetches", "robots.txt outcomes by class", labels=["class"])
        for klass, n in (("ok", robots.ok), ("unavailable", robots.unavailable),
                         ("unreachable", robots.unreachable)):
            rf.add_metric([klass], n)
        yield rf
        yield _labelled_counter("polecat_robots_failures", "robots.txt network failures by kind", "kind",
                                robots.errors)
        dns = c.fetcher.resolver.stats()
        dl = CounterMetricFamily("polecat_dns_lookups", "DNS lookups by result", labels=["result"])
        for result, n in (("hit", dns.hits), ("miss", dns.misses), ("coalesced", dns.coalesced)):
            dl.add_metric([result], n)
        yield dl
        yield _gauge("polecat_dns_hit_ratio", "DNS cache hits / lookups", s.dns_hit_ratio)
        yield _counter("polecat_dns_queries", "DNS queries sent (A, and AAAA where IPv6 is usable)",
                       dns.queries)
        yield _counter("polecat_dns_evictions", "Names dropped to keep the DNS cache within dns.max_entries",
                       dns.evictions)
        yield _gauge("polecat_dns_entries", "Names in the DNS cache", dns.entries)
        tls = c.fetcher.tls_stats()
        tl = CounterMetricFamily("polecat_tls_handshakes",
                                 "TLS handshakes, full or resumed (polecat/fetch/pool.py rule 10)",
                                 labels=["kind"])
        for kind, n in (("full", tls.handshakes - tls.resumed), ("resumed", tls.resumed)):
            tl.add_metric([kind], n)
        yield tl
        yield _counter("polecat_fetched_bytes", "Page body bytes received (as on the wire)", c.bytes_fetched)
        yield _counter("polecat_stored_bytes", "Bytes appended to store segments", s.bytes_stored)
        yield _gauge("polecat_stored_pages", "Distinct bodies in the store", s.pages_stored)
        yield _labelled_counter("polecat_fetch_errors", "Failed requests by kind", "kind", s.errors)
        yield _counter("polecat_pages_cut", "HTML pages parsed only up to the parse budget", s.pages_cut)
        yield _counter("polecat_requisites_queued", "Page requisites queued (scope.requisites)",
                       s.requisites_queued)
        yield _gauge("polecat_near_rebuild_left_records",
                     "Store records of an older fingerprint format the near-duplicate index still owes",
                     s.near_rebuild_left)
        yield _labelled_counter("polecat_urls_done", "URLs finished in this run by outcome", "outcome",
                                s.urls_done)
        yield _counter("polecat_refresh_queued", "Fetched URLs queued again because their refresh was due",
                       s.refresh_queued)
        yield from _freshness(s.freshness)
        at, duration = c.last_commit
        yield _gauge("polecat_commit_age_seconds", "Seconds since the node last committed its state",
                     now - at if at else 0.0)
        yield _gauge("polecat_commit_duration_seconds", "Duration of the node's last commit", duration)
        yield _gauge("polecat_event_loop_lag_seconds", "Worst event-loop lag over the last minute",
                     self._lag.seconds)
        yield _counter("polecat_loop_stalls", "Loop-lag samples (a timer every 50 ms) that ran 50 ms late or "
                       "more: steps of the event loop that held it that long", self._lag.stalls)
        yield _gauge("polecat_loop_lag_max_seconds", "The latest the event loop ran its lag timer since the "
                     "node started", self._lag.worst)
        yield from _collector()
        if self._cluster is not None:
            yield from _cluster(self._cluster())


def _collector() -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """The collector's passes by generation (polecat/runloop.py rule 7)."""
    passes = CounterMetricFamily("polecat_gc_passes", "Passes of the cyclic garbage collector",
                                 labels=["generation"])
    spent = CounterMetricFamily("polecat_gc_seconds", "CPU seconds of the collector's passes (each holds "
                                "the event loop)", labels=["generation"])
    longest = GaugeMetricFamily("polecat_gc_longest_pass_seconds", "CPU seconds of the collector's "
                                "longest pass since the node started", labels=["generation"])
    for g, gen in enumerate(COLLECTOR.generations):
        passes.add_metric([str(g)], gen.passes)
        spent.add_metric([str(g)], gen.seconds)
        longest.add_metric([str(g)], gen.longest)
    yield from (passes, spent, longest)
    yield _gauge("polecat_gc_frozen_objects", "Objects frozen out of the collector's passes "
                 "(polecat/runloop.py rules 2 and 8)", gc.get_freeze_count())


def _cluster(cs: ClusterStats) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """The node's standing in its cluster (only a node in a cluster has these)."""
    yield _gauge("polecat_cluster_fenced", "1 while this node may lease no URL (its lease is not fresh)",
                 int(cs.fenced))
    age = GaugeMetricFamily("polecat_cluster_lease_age_seconds",
                            "Seconds since the etcd lease was last renewed (no sample without a lease)")
    if cs.lease_age is not None:
        age.add_metric([], cs.lease_age)
    yield age
    slices = GaugeMetricFamily("polecat_cluster_slices", "Slices by standing", labels=["state"])
    slices.add_metric(["owned"], cs.slices_owned)
    slices.add_metric(["wanted"], cs.slices_wanted)
    slices.add_metric(["stray"], cs.stray_slices)
    yield slices
    yield _gauge("polecat_cluster_stray_urls",
                 "URLs queued here in slices this node does not own (reconciled to their owners)",
                 cs.stray_urls)
    yield _labelled_counter("polecat_cluster_bundles", "Slice hand-over bundles by outcome", "outcome",
                            (("sent", cs.bundles_sent), ("adopted", cs.bundles_adopted),
                             ("refused", cs.bundles_refused)))
    yield _labelled_counter("polecat_cluster_claim_frames", "Content claim frames sent to peers, by "
                            "transport", "transport",
                            (("stream", cs.claim_frames_streamed), ("http", cs.claim_frames_http)))
    if cs.claim_events:
        yield _labelled_counter("polecat_cluster_claims", "Content claims of this node by event: sent, pages "
                                "stored as revisits of a copy (copies, near_copies of them), stored in full "
                                "without an answer (unanswered), answers naming no waiting page "
                                "(stray_answers), frames refused (bad_frames), near copies their original's "
                                "holder did not store (deposits_refused)", "event", cs.claim_events)
    yield _counter("polecat_cluster_members_ignored",
                   "Member records in etcd ignored: unsigned, or not signed with the cluster secret",
                   cs.members_ignored)
    yield _counter("polecat_cluster_replays_refused",
                   "Signed requests refused because their X-Polecat-Auth proof was used before",
                   cs.replays_refused)
    yield _gauge("polecat_cluster_incompatible_members",
                 "Members this node shares no wire version with: nothing is sent to them until an upgrade",
                 cs.incompatible_members)
    yield _counter("polecat_cluster_wire_refused", "Internal requests refused for their wire versions",
                   cs.wire_refused)
    yield _counter("polecat_cluster_batches_refused", "Hand-off batches refused as stale (a fencing token "
                   "of a lease that is gone)", cs.batches_refused)
    yield _counter("polecat_cluster_checkpoint_rounds", "Slice checkpoint rounds shipped",
                   cs.checkpoint_rounds)
    yield _counter("polecat_cluster_checkpoint_failures", "Slice checkpoint rounds and writes that failed",
                   cs.checkpoint_failures)
    yield _counter("polecat_cluster_leave_failures", "Steps of a leave that failed (flag, release and "
                   "hand-over, revoke): its heirs restore what it could not hand over", cs.leave_failures)
    yield _counter("polecat_cluster_restored_without_body", "URLs restored as done from a dead member whose "
                   "pages were on its disk only (no [store] url)", cs.restored_without_body)
    yield _counter("polecat_cluster_manifests_refused", "Slices not restored from a checkpoint manifest "
                   "because a newer fencing token names them", cs.manifests_refused)
    ckpt = GaugeMetricFamily("polecat_cluster_checkpoint_age_seconds",
                             "Seconds since the last checkpoint round shipped (no sample before one)")
    if cs.checkpoint_age is not None:
        ckpt.add_metric([], cs.checkpoint_age)
    yield ckpt


def _freshness(fresh: tuple[int, int, int, int] | None) -> Iterator[GaugeMetricFamily]:
    """The freshness SLO as of the node's last refresh scan (no samples before the first)."""
    urls = GaugeMetricFamily("polecat_freshness_urls", "URLs under refresh at the last scan",
                             labels=["state"])
    slo = GaugeMetricFamily("polecat_freshness_slo_ratio",
                            "Important URLs whose copy is within their change window / important URLs")
    if fresh is not None:
        tracked, due, important, within = fresh
        for state, n in (("tracked", tracked), ("due", due), ("important", important),
                         ("important_within_window", within)):
            urls.add_metric([state], n)
        if important:
            slo.add_metric([], within / important)
    yield urls
    yield slo


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _labelled_counter(name: str, doc: str, label: str,
                      items: tuple[tuple[str, int], ...]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=[label])
    for key, n in items:
        family.add_metric([key], n)
    return family
