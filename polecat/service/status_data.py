"""What the node reports about itself, as JSON-ready dicts: the crawl totals and one host's detail.

One source for the operator API (``/admin/crawl/status``, ``/internal/hosts/{host}``), the status page
and ``polecat status --node``, so they always agree. Reads happen on the event-loop thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from polecat.frontier.politeness import interval
from polecat.frontier.robots import Closed, Fetch, Ready
from polecat.hosts import hostname
from polecat.parse.robots import RobotsRules
from polecat.service.activity import Activity

if TYPE_CHECKING:
    from polecat.node.crawler import Crawler

TOP_HOSTS = 10


def totals(crawler: Crawler, activity: Activity, now: float) -> dict[str, Any]:
    """Crawl-wide figures: the node's stats, paused state, the busiest and most failing hosts,
    the last hour's request rate per minute, recent errors and parked hosts."""
    s = crawler.stats()
    frontier = crawler.frontier
    return {
        "paused": crawler.paused,
        "elapsed_s": s.elapsed_s,
        "fetches": s.fetches,
        "fetches_per_s": s.fetches_per_s,
        "bytes_fetched": crawler.bytes_fetched,
        "queued": s.queued,
        "in_flight": s.in_flight,
        "hosts": s.hosts,
        "hosts_ready": s.hosts_ready,
        "hosts_waiting": s.hosts_waiting,
        "hosts_parked": s.hosts_parked,
        "politeness_violations": s.politeness_violations,
        "pages_stored": s.pages_stored,
        "bytes_stored": s.bytes_stored,
        "errors": dict(s.errors),
        "urls_done": dict(s.urls_done),
        "urls_rejected": dict(s.urls_rejected),
        "top_queues": [{"host": h, "queued": n} for h, n in frontier.busiest(TOP_HOSTS)],
        "top_errors": [{"host": h, "errors_24h": n} for h, n in activity.top_error_hosts(now, TOP_HOSTS)],
        "rate_per_minute": [{"t": t, "requests": n} for t, n in activity.rate_series(now)],
        "recent_errors": [{"at": e.at, "host": e.host, "url": e.url, "reason": e.reason}
                          for e in activity.recent_errors()],
        "parked": [{"host": h, "reason": r} for h, r in s.parked],
        "blocks": frontier.blocks(),
        "throttles": [{"host_pattern": p, "req_per_s": r} for p, r in frontier.throttles()],
        "freshness": None if s.freshness is None else dict(zip(
            ("tracked", "due", "important", "within_window"), s.freshness, strict=True)),
        "refresh_queued": s.refresh_queued,
    }


def host_detail(crawler: Crawler, activity: Activity, host: str, now: float) -> dict[str, Any] | None:
    """One host's state (``host`` or ``host:port`` as the frontier keys it); None if it is unknown."""
    frontier = crawler.frontier
    st = frontier.host_state(host)
    if st is None:
        return None
    act = activity.host(host, now)
    rate = frontier.host_rate(host)
    return {
        "host": host,
        "queued": st.queued,
        "fetched_total": st.fetched,
        "fetched_24h": act.fetched_24h,
        "errors_24h": act.errors_24h,
        "error_rate": act.error_rate,
        "last_fetch": act.last_fetch,
        "next_allowed": st.next_allowed,
        "in_flight": st.in_flight,
        "req_per_s": rate,
        "aimd_factor": st.rate_factor,
        "interval_s": interval(crawler.config.politeness, rate, st),
        "consecutive_failures": st.failures,
        "quarantined": st.failures > 0 and not st.parked,
        "parked": st.parked,
        "park_reason": frontier.parked_hosts().get(host) if st.parked else None,
        "blocked": frontier.is_blocked(host),
        "robots": robots_state(crawler, host, now),
    }


def internal_host(crawler: Crawler, host: str, now: float) -> dict[str, Any] | None:
    """What another node needs to take over ``host``: robots rules, crawl delay, next-allowed time and
    the DNS answer's remaining TTL."""
    st = crawler.frontier.host_state(host)
    if st is None:
        return None
    robots = robots_state(crawler, host, now)
    return {
        "host": host,
        "robots": robots,
        "crawl_delay_ms": round(st.crawl_delay * 1000),
        "next_allowed_ts": st.next_allowed,
        "dns_ttl": crawler.fetcher.resolver.ttl_left(hostname(host).strip("[]")),
    }


def robots_state(crawler: Crawler, host: str, now: float) -> dict[str, Any]:
    """The robots.txt decision in force for ``host`` (its https origin first, then http)."""
    for scheme in ("https", "http"):
        origin = f"{scheme}://{host}"
        decision = crawler.robots.lookup(origin, now)
        if isinstance(decision, Fetch):
            continue
        stored = crawler.robots_file(origin)
        out: dict[str, Any] = {"origin": origin, "text": stored[2].decode("utf-8", "replace") if stored
                               else None, "status": stored[0] if stored else None}
        if isinstance(decision, Closed):
            return {**out, "state": "unreachable", "retry_at": decision.until}
        assert isinstance(decision, Ready)
        rules = decision.rules
        kind = ("allow_all" if rules is RobotsRules.allow_all()
                else "disallow_all" if rules is RobotsRules.disallow_all() else "parsed")
        return {**out, "state": kind, "crawl_delay_s": rules.crawl_delay, "sitemaps": list(rules.sitemaps),
                "refresh_due": decision.refresh_due}
    return {"origin": None, "state": "unknown", "text": None, "status": None}
