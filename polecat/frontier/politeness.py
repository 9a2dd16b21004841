"""When may a politeness key be fetched? Every rule lives here, and only here.

Rules (DESIGN.md section 2):

1. At most one request is in flight per key. A key is a host (``host[:port]``); with ``key_by_ip`` the
   resolved IP is a second key, and both must be free.
2. The next request to a key starts no earlier than ``max(anchor + interval, prev_end)``, where
   ``interval = max(crawl_delay, 1 / (rate * rate_factor))``. ``anchor`` is the time the previous
   response's headers arrived: the server saw the request no later than that, so gaps measured at the
   server between arrivals are never below the interval, whatever the client-side send latency was.
   When no response arrived (an error), the anchor is the end of the attempt.
3. ``rate`` is the configured default, overridden by the most specific throttle pattern; crawl-delay
   comes from robots.txt, capped by ``max_crawl_delay``; robots.txt fetches count like any request.
4. 429 and 503 cut ``rate_factor`` multiplicatively (x backoff_factor, floored at min_rate_factor);
   any other answered request raises it additively by recover_step up to 1 (AIMD). With Retry-After,
   nothing is sent before that time (capped at max_retry_after); without it the key still waits at least
   one (already cut) interval.
5. Timeouts, connection and DNS failures quarantine the key: wait ``base * 2**(n-1)`` (capped) times a
   jitter in [1, 1.5) after the n-th consecutive failure, and never less than the interval (the failed
   request may have reached the server); after ``park_after_failures`` consecutive
   failures the host is parked for the rest of the run and reported. Any answered request resets n.

All functions take ``now`` (wall-clock seconds, persisted across restarts) and mutate only the
:class:`HostState` they are given.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from polecat.config import PolitenessConfig

BACKOFF_STATUSES = frozenset({429, 503})


@dataclass(slots=True)
class HostState:
    """Politeness and bookkeeping for one host. Persisted in the frontier's ``hosts`` table."""

    next_allowed: float = 0.0
    rate_factor: float = 1.0
    crawl_delay: float = 0.0
    failures: int = 0
    queued: int = 0
    fetched: int = 0
    parked: bool = False
    in_flight: bool = False
    ip: str = ""
    """Last resolved address (used for per-IP keys)."""


@dataclass(slots=True)
class IpState:
    next_allowed: float = 0.0
    in_flight: bool = False


def interval(cfg: PolitenessConfig, rate: float, state: HostState) -> float:
    """Seconds between request starts for this host, per rule 2."""
    return max(min(state.crawl_delay, cfg.max_crawl_delay), 1.0 / (rate * state.rate_factor))


def quarantine_delay(cfg: PolitenessConfig, failures: int, rng: random.Random) -> float:
    """Backoff after the ``failures``-th consecutive failure, per rule 5 (jitter spreads retries)."""
    base = min(cfg.quarantine_cap, cfg.quarantine_base * 2.0 ** (failures - 1))
    return base * (1.0 + 0.5 * rng.random())


@dataclass(frozen=True, slots=True)
class Attempt:
    """What happened on the wire, in wall-clock seconds."""

    started: float
    ended: float
    headers_at: float | None
    """When response headers arrived; None when no response (error)."""
    status: int | None = None
    retry_after: float | None = None
    """Seconds from ``ended`` the server asked us to wait."""
    failed: bool = False
    """A retryable network-level failure (timeout, connect, DNS)."""


def after_attempt(
    cfg: PolitenessConfig, rate: float, state: HostState, attempt: Attempt, rng: random.Random
) -> None:
    """Update ``state`` after a request to the host ends; sets ``next_allowed`` and AIMD/quarantine."""
    if attempt.failed:
        state.failures += 1
        if state.failures >= cfg.park_after_failures:
            state.parked = True
        # The failed request may still have reached the server: the interval holds too, from its end.
        wait = max(quarantine_delay(cfg, state.failures, rng), interval(cfg, rate, state))
        state.next_allowed = max(state.next_allowed, attempt.ended + wait)
        return
    state.failures = 0
    if attempt.status in BACKOFF_STATUSES:
        state.rate_factor = max(cfg.min_rate_factor, state.rate_factor * cfg.backoff_factor)
    else:
        state.rate_factor = min(1.0, state.rate_factor + cfg.recover_step)
    anchor = attempt.headers_at if attempt.headers_at is not None else attempt.ended
    nxt = max(anchor + interval(cfg, rate, state), attempt.ended)
    if attempt.status in BACKOFF_STATUSES and attempt.retry_after is not None:
        nxt = max(nxt, attempt.ended + min(max(attempt.retry_after, 0.0), cfg.max_retry_after))
    state.next_allowed = max(state.next_allowed, nxt)


def after_ip_attempt(state: IpState, host_interval: float, attempt: Attempt) -> None:
    """Per-IP key: the same spacing rule, with the interval of the host that used it."""
    anchor = attempt.headers_at if attempt.headers_at is not None else attempt.ended
    state.next_allowed = max(state.next_allowed, anchor + host_interval, attempt.ended)
