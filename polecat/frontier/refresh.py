"""When is a fetched URL due again? Every refresh rule lives here, and only here. Sans-IO.

Model. A page changes as a Poisson process of unknown rate λ (changes per second). A visit only tells
whether the page changed since the previous visit (one bit per interval), never how many times.
Cho and Garcia-Molina ("Estimating frequency of change", ACM TOIT 2003) give the estimators used here.

Rules:

1. History (:class:`History`) per URL: observed intervals ``n`` (visits after the first), intervals in which
   a change was detected ``x``, total observed time, unchanged time (sum of intervals with no change), the
   changed intervals binned by ``floor(log2(seconds))`` as (count, seconds), the shortest and longest
   interval, the last change seen (the visit that saw it) and the last visit. A change is a new body: a
   304, the same content hash or a near-duplicate of the previous version all count as "unchanged".
2. Estimate of λ:
   - regular intervals (longest <= ``REGULAR_SPREAD`` x shortest), or ``x == 0`` or ``x == n`` (where the
     likelihood has no finite positive maximum): the bias-reduced form
     ``λ = -ln((n - x + 0.5) / (n + 0.5)) / I`` with ``I`` the mean interval;
   - irregular intervals: the maximum-likelihood ``λ``, the root of
     ``Σ_changed t / (exp(λ t) - 1) = Σ_unchanged t``, found by bisection; each bin stands in for its
     intervals by their mean (within a factor 2 of each of them; the convexity of the left side makes
     this err slightly low).
3. Next interval = ``clamp(k / λ, min_interval, max_interval)``; ``λ = 0`` gives ``max_interval``.
4. Before ``min_visits`` observed intervals the interval comes from a prior: the sitemap ``changefreq``
   (:data:`CHANGEFREQ_SECONDS`), else the sitemap ``lastmod`` (a page last changed ``a`` seconds ago is
   taken to change about once per ``a``), else ``default_interval``; clamped like rule 3.
5. Operator overrides win over rules 2-4: a host pattern in ``never`` is never refreshed, a pattern in
   ``overrides`` has that fixed interval (not clamped: the operator chose it).
6. A URL is due at ``max(last_visit + interval, host_ready)``: never earlier than its host's politeness
   allows (``host_ready`` is the host's ``next_allowed``).
7. Priority among due URLs = importance x staleness, staleness = (now - last_visit) / interval.
8. Each host's fetches are shared between refresh and discovery: when both kinds wait, the kind that is
   furthest below its share (``refresh_share`` for refresh) goes next.
9. Freshness SLO: an important page is within its window while ``now - last_visit <= interval``.

Limits of the model: real pages are not Poisson (news sites change on a daily rhythm, many pages change in
bursts); the estimate weighs all history equally, so a page whose rate changes is followed slowly (the
``min_interval``/``max_interval`` clamp bounds the damage, operators can override); with the one-bit
observation a page changing much faster than it is visited looks like ``x == n``, whose estimate saturates
at ``ln(2n + 1) / I``; a cosmetic change that escapes near-duplicate detection counts as a change.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace
from typing import Literal

from polecat.config import RefreshConfig
from polecat.frontier.patterns import HostPatternMap

REGULAR_SPREAD = 1.25
"""Intervals within this factor of each other are treated as regular (rule 2)."""
MAX_BIN = 40
"""Changed intervals of 2**40 s or more share the last bin."""

CHANGEFREQ_SECONDS: dict[str, float] = {
    "always": 0.0,
    "hourly": 3_600.0,
    "daily": 86_400.0,
    "weekly": 7 * 86_400.0,
    "monthly": 30 * 86_400.0,
    "yearly": 365 * 86_400.0,
    "never": math.inf,
}
"""Sitemap ``changefreq`` values as a prior interval (clamped by rule 4: ``always`` gives the floor)."""


@dataclass(frozen=True, slots=True)
class History:
    """What the crawler has seen of one URL's changes (rule 1). Times are wall-clock seconds."""

    n: int = 0
    x: int = 0
    observed: float = 0.0
    unchanged: float = 0.0
    bins: tuple[tuple[int, int, float], ...] = ()
    """Changed intervals: ``(floor(log2 seconds), count, total seconds)``, sorted by bin."""
    shortest: float = math.inf
    longest: float = 0.0
    last_change: float = 0.0
    last_visit: float = 0.0
    """0.0 until the first visit."""

    def encode(self) -> bytes:
        head = _HEAD.pack(self.n, self.x, self.observed, self.unchanged, self.shortest, self.longest,
                          self.last_change, self.last_visit, len(self.bins))
        return head + b"".join(_BIN.pack(*b) for b in self.bins)

    @classmethod
    def decode(cls, raw: bytes | memoryview) -> History:
        n, x, observed, unchanged, shortest, longest, last_change, last_visit, nbins = _HEAD.unpack_from(raw)
        bins = tuple(_BIN.unpack_from(raw, _HEAD.size + i * _BIN.size) for i in range(nbins))
        return cls(n, x, observed, unchanged, bins, shortest, longest, last_change, last_visit)


_HEAD = struct.Struct(">IIddddddB")
_BIN = struct.Struct(">BId")


def observe(h: History, now: float, changed: bool) -> History:
    """The history after a visit at ``now`` that did (or did not) see a new version of the page."""
    if h.last_visit <= 0.0:
        return replace(h, last_visit=now, last_change=now)
    t = now - h.last_visit
    if t <= 0.0:
        return h  # a repeat at the same instant (replayed fetch) carries no information
    out = replace(h, n=h.n + 1, observed=h.observed + t, shortest=min(h.shortest, t),
                  longest=max(h.longest, t), last_visit=now)
    if not changed:
        return replace(out, unchanged=h.unchanged + t)
    b = min(MAX_BIN, max(0, int(math.log2(t))))
    bins = {i: (c, s) for i, c, s in h.bins}
    c, s = bins.get(b, (0, 0.0))
    bins[b] = (c + 1, s + t)
    return replace(out, x=h.x + 1, last_change=now,
                   bins=tuple((i, c, s) for i, (c, s) in sorted(bins.items())))


def regular_rate(n: int, x: int, mean_interval: float) -> float:
    """Bias-reduced Cho-Garcia-Molina estimate for ``n`` equal intervals with ``x`` changes (rule 2)."""
    return -math.log((n - x + 0.5) / (n + 0.5)) / mean_interval


def irregular_rate(bins: tuple[tuple[int, int, float], ...], unchanged: float) -> float:
    """Maximum-likelihood rate for irregular intervals (rule 2); needs changes and unchanged time."""
    means = [(c, s / c) for _, c, s in bins]

    def excess(lam: float) -> float:
        # Decreasing in lam: +inf at 0, -unchanged at infinity; its root is the MLE.
        return sum(c * t / math.expm1(min(lam * t, 700.0)) for c, t in means) - unchanged

    lo, hi = 1e-15, 1.0
    while excess(hi) > 0 and hi < 1e9:
        hi *= 16
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def estimate_rate(h: History) -> float:
    """Estimated changes per second from ``h`` (rule 2); 0.0 without observed intervals."""
    if h.n == 0:
        return 0.0
    if h.x in (0, h.n) or h.longest <= REGULAR_SPREAD * h.shortest:
        return regular_rate(h.n, h.x, h.observed / h.n)
    return irregular_rate(h.bins, h.unchanged)


def clamp_interval(cfg: RefreshConfig, seconds: float) -> float:
    return min(cfg.max_interval, max(cfg.min_interval, seconds))


@dataclass(frozen=True, slots=True)
class Prior:
    """What a sitemap said about a URL (rule 4)."""

    lastmod: float | None = None
    changefreq: str | None = None
    priority: float | None = None


def prior_interval(cfg: RefreshConfig, prior: Prior | None, now: float) -> float:
    """The interval before enough history (rule 4)."""
    if prior is not None and prior.changefreq in CHANGEFREQ_SECONDS:
        return clamp_interval(cfg, CHANGEFREQ_SECONDS[prior.changefreq])
    if prior is not None and prior.lastmod is not None and prior.lastmod < now:
        return clamp_interval(cfg, cfg.k * (now - prior.lastmod))
    return clamp_interval(cfg, cfg.default_interval)


class RefreshPolicy:
    """Rules 3-9 for one crawl's :class:`RefreshConfig`."""

    __slots__ = ("_cfg", "_never", "_overrides")

    def __init__(self, cfg: RefreshConfig) -> None:
        self._cfg = cfg
        self._never: HostPatternMap[bool] = HostPatternMap((p, True) for p in cfg.never)
        self._overrides: HostPatternMap[float] = HostPatternMap(cfg.overrides)

    @property
    def config(self) -> RefreshConfig:
        return self._cfg

    def interval(self, host: str, h: History, prior: Prior | None, now: float) -> float | None:
        """Seconds from the last visit to the next one; None when the host is never refreshed (rule 5)."""
        if host in self._never:
            return None
        fixed = self._overrides.get(host)
        if fixed is not None:
            return fixed
        if h.n < self._cfg.min_visits:
            return prior_interval(self._cfg, prior, now)
        lam = estimate_rate(h)
        return self._cfg.max_interval if lam <= 0.0 else clamp_interval(self._cfg, self._cfg.k / lam)

    def due_at(self, host: str, h: History, prior: Prior | None, host_ready: float) -> float | None:
        """When the URL may be fetched again (rules 5 and 6); None: never."""
        every = self.interval(host, h, prior, h.last_visit)
        if every is None:
            return None
        return max(h.last_visit + every, host_ready)

    @staticmethod
    def priority(importance: float, h: History, interval: float, now: float) -> float:
        """Importance x staleness (rule 7)."""
        return importance * max(0.0, now - h.last_visit) / interval

    @staticmethod
    def within_window(h: History, interval: float, now: float) -> bool:
        """Whether a page meets the freshness SLO at ``now`` (rule 9)."""
        return h.last_visit > 0.0 and now - h.last_visit <= interval


Kind = Literal["refresh", "discovery"]


def next_kind(share: float, refreshed: int, discovered: int, refresh_waiting: bool,
              discovery_waiting: bool) -> Kind | None:
    """Which kind of URL a host fetches next (rule 8), from what it fetched of each so far."""
    if not refresh_waiting:
        return "discovery" if discovery_waiting else None
    if not discovery_waiting:
        return "refresh"
    total = refreshed + discovered + 1
    return "refresh" if refreshed < share * total else "discovery"
