"""Records the frontier hands out and takes back, and their compact LMDB encodings."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Literal

from polecat.frontier.politeness import Attempt, HostState

# --- priority ------------------------------------------------------------------------------------

SEED_IMPORTANCE = 1.0
CASH_SHARE = 0.85
"""Fraction of a page's importance passed on to its outlinks (OPIC-style cash, split among them)."""
MIN_IMPORTANCE = 2.0**-60


def child_importance(parent: float, outlinks: int) -> float:
    """Importance a discovered URL inherits: the parent's cash split over its new outlinks."""
    return max(MIN_IMPORTANCE, parent * CASH_SHARE / max(1, outlinks))


def rank(importance: float) -> int:
    """Sortable 32-bit rank: lower rank pops first. Log scale keeps 60 halvings distinguishable."""
    r = int(-math.log2(max(importance, MIN_IMPORTANCE)) * 65536) + 2**31
    return min(max(r, 0), 2**32 - 1)


# --- queue entries -------------------------------------------------------------------------------

_Q = struct.Struct(">dHBB")


@dataclass(frozen=True, slots=True)
class QueuedUrl:
    url: str
    depth: int
    importance: float
    attempts: int = 0
    hops: int = 0
    """Redirects followed to reach this URL (bounded by fetch.max_redirects)."""

    def encode(self) -> bytes:
        counts = (min(self.depth, 0xFFFF), min(self.attempts, 255), min(self.hops, 255))
        return _Q.pack(self.importance, *counts) + self.url.encode()

    @classmethod
    def decode(cls, raw: bytes | memoryview) -> QueuedUrl:
        importance, depth, attempts, hops = _Q.unpack_from(raw)
        return cls(bytes(raw[_Q.size :]).decode(), depth, importance, attempts, hops)


# --- hosts ---------------------------------------------------------------------------------------

_H = struct.Struct(">dddIQQ")


def encode_host(s: HostState) -> bytes:
    packed = _H.pack(s.next_allowed, s.rate_factor, s.crawl_delay, s.failures, s.queued, s.fetched)
    return packed + s.ip.encode()


def decode_host(raw: bytes | memoryview) -> HostState:
    na, rf, cd, fails, queued, fetched = _H.unpack_from(raw)
    return HostState(next_allowed=na, rate_factor=rf, crawl_delay=cd, failures=fails, queued=queued,
                     fetched=fetched, ip=bytes(raw[_H.size :]).decode())


_RECORD_JSON = json.JSONEncoder(separators=(",", ":"), check_circular=False)
"""What ``json.dumps(..., separators=(",", ":"))`` writes, without building an encoder per record."""

# --- leases and results --------------------------------------------------------------------------

LeaseKind = Literal["page", "robots"]


@dataclass(frozen=True, slots=True)
class Lease:
    """Permission to make one request to ``host`` now. Hand it back with :meth:`Frontier.complete`."""

    host: str
    url: str
    kind: LeaseKind
    depth: int = 0
    importance: float = SEED_IMPORTANCE
    attempts: int = 0
    key: bytes = b""
    etag: str | None = None
    last_modified: str | None = None
    not_before: float = 0.0
    """The host's next-allowed time when leased (for the self-check of rule 2)."""
    hops: int = 0


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing is ready; ask again at ``until`` (or when a lease completes). None: only on completion."""

    until: float | None


@dataclass(frozen=True, slots=True)
class Refused:
    """The request may not be made at all (a robots.txt hop whose host stays busy, politeness rule 8)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing queued and nothing in flight: the crawl is complete."""


Outcome = Literal["fetched", "not_modified", "redirect", "skipped", "failed", "retry"]


@dataclass(frozen=True, slots=True)
class RobotsOutcome:
    """How a robots.txt fetch ended (after its redirects): the final response, or the failure."""

    status: int = 0
    body: bytes = b""
    retry_after: float | None = None
    error: BaseException | None = None
    """The network failure (DNS, connect, timeout, TLS) when there was no response."""


@dataclass(frozen=True, slots=True)
class Completion:
    """How a leased request ended, as the node reports it."""

    attempt: Attempt
    outcome: Outcome
    reason: str = ""
    """Short label: HTTP status, error kind, skip reason."""
    content_hash: bytes | None = None
    etag: str | None = None
    last_modified: str | None = None
    ip: str | None = None
    changed: bool = True
    detail: str = ""
    """What went wrong, for people (``dns: h.test: NXDOMAIN``); the reason a host is reported with
    when it is parked or given up."""
    park: str = ""
    """Non-empty: no request to this host can succeed in this run (e.g. its address is refused by the
    SSRF guard); the host is parked with this reason and its queue kept for a later run."""
    robots: RobotsOutcome | None = None
    """For a robots lease: what robots.txt answered. The frontier records it (policy and persistence)
    before it spaces the host's next request, so a new Crawl-delay applies at once."""


PAGE_OUTCOMES = frozenset({"fetched", "not_modified", "redirect"})
"""The outcomes of a finished URL with a record in its fetcher's page store."""


@dataclass(slots=True)
class UrlRecord:
    """What the frontier remembers of a finished URL: the outcome and what refresh needs."""

    url: str
    outcome: str
    reason: str = ""
    fetched_at: float = 0.0
    content_hash: str = ""
    etag: str | None = None
    last_modified: str | None = None
    fetches: int = 0
    changes: int = 0
    depth: int = 0
    importance: float = SEED_IMPORTANCE
    history: str = ""
    """The URL's change history (polecat/frontier/refresh.py ``History.encode()``, hex); "" before a visit."""
    due: float | None = None
    """When a refresh is due (refresh rules 5 and 6); None: not scheduled (never refreshed, not fetched,
    or queued for its refresh right now)."""

    def encode(self) -> bytes:
        return _RECORD_JSON.encode(
            [self.url, self.outcome, self.reason, self.fetched_at, self.content_hash, self.etag,
             self.last_modified, self.fetches, self.changes, self.depth, self.importance, self.history,
             self.due],
        ).encode()

    @classmethod
    def decode(cls, raw: bytes | memoryview) -> UrlRecord:
        # Records written before refresh state existed have the first nine fields only.
        u, o, r, t, h, e, m, n, c, *refresh = json.loads(bytes(raw))
        return cls(u, o, r, t, h, e, m, n, c, *refresh)


@dataclass(frozen=True, slots=True)
class FrontierStats:
    hosts: int
    hosts_ready: int
    hosts_waiting: int
    hosts_parked: int
    queued: int
    in_flight: int
    accepted: int
    seen: int
    rejected: tuple[tuple[str, int], ...]
    done: tuple[tuple[str, int], ...]
    dropped_blocked: int
    hosts_backoff: int = 0
    """Waiting hosts whose last attempt failed (quarantine, robots.txt closed) rather than paced."""
    next_ready_at: float = 0.0
    """When the next waiting host may go (0.0: none waits)."""
    done_total: tuple[tuple[str, int], ...] = ()
    """Outcomes over the whole crawl (all runs on this data dir)."""


@dataclass(frozen=True, slots=True)
class AdoptReport:
    """What :meth:`Frontier.adopt` took over."""

    slices: int
    hosts: int
    queued: int
    """URLs queued here from the bundle."""
    duplicates: int
    """Queued URLs of the bundle this frontier had already seen (not queued twice)."""
    seen: int
    """Seen entries new to this frontier (the queued ones included)."""
    stored: int = 0
    """Finished URLs of the bundle whose exporter stored a page for them (:data:`PAGE_OUTCOMES`)."""


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a canonical URL (robots.txt is per origin)."""
    return url[: url.index("/", url.index("//") + 2)] if url.count("/") >= 3 else url
