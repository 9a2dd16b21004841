"""When may a politeness key be fetched? Every rule lives here, and only here.

Rules (DESIGN.md section 2):

1. At most one request is in flight per key. A key is a host (``host[:port]``); with ``key_by_ip`` the
   resolved IP is a second key, and both must be free.
2. The next request to a key starts no earlier than ``max(anchor + interval, prev_end)``, where
   ``interval = max(crawl_delay, 1 / (rate * rate_factor))``. ``anchor`` is the time the previous
   response's headers arrived: the server saw the request no later than that, so gaps measured at the
   server between arrivals are never below the interval, whatever the client-side send latency was
   (the fetcher stamps it on the monotonic clock; its conversion to wall time errs late: polecat/clock.py).
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
6. Giving up (bounded runs: ``give_up_after`` > 0, set by ``polecat crawl``; long-running nodes leave it
   0 and keep rule 5's long backoff). Every attempt without a usable answer is a strike: a network
   failure, a robots.txt that answers 429/5xx or cannot be read at all (a TLS failure, a malformed
   response: the host stays closed). A usable answer clears the
   strikes. Failing hosts retry after ``give_up_backoff * 2**(n-1)`` (jittered, never less than the
   interval), robots.txt too (:func:`robots_retry`), and after ``give_up_after`` strikes the host is
   given up: parked for the rest of the run and reported with the last reason. With the defaults a dead
   host ends a run within about a minute (3 attempts, 5 + 10 s apart, plus the attempts' timeouts).
7. A frontier that opens (a restart) or adopts a host (a slice hand-over) makes it wait one full
   interval from that moment (:func:`wait_one_interval`): a request may have been in flight elsewhere,
   uncommitted, and started just before.
8. A robots.txt redirect hop is a request to the host it lands on, under rules 1 and 2: a hop back to the
   leased host waits for that host's next-allowed time (the lease keeps it busy); a hop to another host
   borrows it (``Frontier.hold``) once it is free and allowed, and gives it back when the hop ends. While
   that host is busy the hop asks again every :data:`HOLD_RETRY` seconds, and it gives up (a failed
   fetch) when the host stays unavailable past :data:`ROBOTS_HOP_MAX_WAIT`. A host borrowed while it
   waited in the ready heap is not leased before its new next-allowed time. The decisions are
   ``Frontier.hop`` (polecat/frontier/hops.py); the node only runs them.

Rules kept elsewhere, each in the module named: per-IP keys (rules 1 and 2 applied to an address) in
polecat/frontier/ipkeys.py; a host whose robots.txt is unreachable is closed until its retry time
(``RobotsPolicy`` rule 5, polecat/parse/robots.py); a refresh is due no earlier than the host's
next-allowed time (polecat/frontier/refresh.py rule 6).

All functions take ``now`` (wall-clock seconds, persisted across restarts) and mutate only the
:class:`HostState` they are given.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from polecat.config import PolitenessConfig, RobotsConfig

BACKOFF_STATUSES = frozenset({429, 503})

HOLD_RETRY = 0.05
"""Seconds before a robots.txt redirect hop asks again for a host busy with another request (rule 8)."""

ROBOTS_HOP_MAX_WAIT = 30.0
"""Longest a robots.txt redirect hop waits for its target host's turn before the fetch counts as failed
(rule 8: two hosts redirecting to each other's robots.txt would otherwise wait on each other)."""


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
    strikes: int = 0
    """Attempts in a row without a usable answer in this run (rule 6; not persisted)."""
    num: int = 0
    """The host's number in its ``queue`` keys (polecat/frontier/keys.py rule 1); 0: none yet."""
    seed: bool = False
    """A seed's host: in the crawl's scope in ``host`` and ``domain`` mode (polecat/frontier/db.py rule 18,
    kept in its record's tag byte, rule 20, or a schema-6 record's number field:
    polecat/frontier/records.py)."""


@dataclass(slots=True)
class IpState:
    next_allowed: float = 0.0
    in_flight: bool = False


def interval(cfg: PolitenessConfig, rate: float, state: HostState) -> float:
    """Seconds between request starts for this host, per rule 2."""
    return max(min(state.crawl_delay, cfg.max_crawl_delay), 1.0 / (rate * state.rate_factor))


def quarantine_delay(cfg: PolitenessConfig, failures: int, rng: random.Random) -> float:
    """Backoff after the ``failures``-th consecutive failure, per rules 5 and 6 (jitter spreads retries)."""
    first = cfg.give_up_backoff if cfg.give_up_after else cfg.quarantine_base
    base = min(cfg.quarantine_cap, first * 2.0 ** (failures - 1))
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
    unusable: bool = False
    """An attempt that leaves the host closed (robots.txt 429/5xx, or not read): a strike under rule 6."""


def after_attempt(
    cfg: PolitenessConfig, rate: float, state: HostState, attempt: Attempt, rng: random.Random
) -> None:
    """Update ``state`` after a request to the host ends; sets ``next_allowed``, AIMD/quarantine, and
    parks the host per rules 5 and 6."""
    if attempt.failed or attempt.unusable:
        state.strikes += 1
        if cfg.give_up_after and state.strikes >= cfg.give_up_after:
            state.parked = True
    else:
        state.strikes = 0
    if attempt.failed:
        state.failures += 1
        if state.failures >= cfg.park_after_failures:
            state.parked = True
        # The failed request may still have reached the server: the interval holds too, from its end.
        # Rule 6 counts this run's strikes: failures persist across runs and would stretch a resumed run.
        n = state.strikes if cfg.give_up_after else state.failures
        wait = max(quarantine_delay(cfg, n, rng), interval(cfg, rate, state))
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


def gave_up(cfg: PolitenessConfig, state: HostState) -> bool:
    """Whether ``state`` was parked by rule 6 (as opposed to rule 5 or an operator decision)."""
    return bool(cfg.give_up_after) and state.strikes >= cfg.give_up_after


def robots_retry(cfg: PolitenessConfig, robots: RobotsConfig) -> RobotsConfig:
    """The robots.txt settings a run uses: under rule 6 an unreachable robots.txt is retried on the
    give-up backoff, so a closed host is given up as fast as one that does not answer."""
    if not cfg.give_up_after:
        return robots
    return dataclasses.replace(robots, retry_base=cfg.give_up_backoff,
                               retry_cap=max(cfg.give_up_backoff, min(robots.retry_cap, 60.0)))


def after_ip_attempt(state: IpState, host_interval: float, attempt: Attempt) -> None:
    """Per-IP key: the same spacing rule, with the interval of the host that used it."""
    anchor = attempt.headers_at if attempt.headers_at is not None else attempt.ended
    state.next_allowed = max(state.next_allowed, anchor + host_interval, attempt.ended)


def wait_one_interval(cfg: PolitenessConfig, rate: float, state: HostState, now: float) -> None:
    """The host's next request waits at least one full interval from ``now`` (rule 7; also a throttle
    changed while the crawl runs)."""
    state.next_allowed = max(state.next_allowed, now + interval(cfg, rate, state))
