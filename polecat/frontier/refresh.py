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
     ``Σ_changed t / (exp(λ t) - 1) = Σ_unchanged t``, found by Newton's method; each bin stands in for its
     intervals by their mean (within a factor 2 of each of them; the convexity of the left side makes
     this err slightly low).
   The scheduler uses ``max(λ, 0.5 / observed time)``: seeing no change over a time ``T`` says the rate
   is below about ``1 / T``, not that it is 0, so a quiet page's interval grows with the time it has been
   watched instead of jumping to ``max_interval`` after ``min_visits`` quiet visits.
3. Next interval = ``clamp(k / λ, min_interval, max_interval)``; ``λ = 0`` gives ``max_interval``. When a
   host's refresh budget (its politeness rate, times ``refresh_share`` while other URLs wait on it) cannot
   visit all its URLs that often (``Σ 1 / interval > budget``), its intervals come from the freshness optimum
   instead (``budget_intervals`` in polecat/frontier/refresh_budget.py; Cho and Garcia-Molina, "Effective page
   refresh policies", ICDE 2003): visit frequencies ``f`` maximise the importance-weighted time-averaged
   freshness ``Σ w F(λ, f)``, ``F = (1 - exp(-λ/f)) f / λ``, under ``Σ f = budget``. The Lagrange condition
   ``1 - (1 + r) exp(-r) = μ λ / w`` (``r = λ / f``) gives ``f = λ / r``, and ``f = 0`` (visit only at
   ``max_interval``, to keep the estimate) for a page that changes too fast to be kept fresh with its share
   (``μ λ >= w``); ``μ`` is set by bisection so the budget is spent, and what the kept pages leave of it is
   shared evenly by the given-up ones (so a host whose pages all change too fast still spends its budget).
   Visiting in proportion to λ, which ``k / λ`` alone does under a binding budget, is worse than uniform.
4. Before ``min_visits`` observed intervals the interval comes from a prior: the sitemap ``changefreq``
   (:data:`CHANGEFREQ_SECONDS`), else the sitemap ``lastmod`` (a page last changed ``a`` seconds ago is
   taken to change about once per ``a``), else ``default_interval``; clamped like rule 3.
5. Operator overrides win over rules 2-4: a host pattern in ``never`` is never refreshed, a pattern in
   ``overrides`` has that fixed interval (not clamped: the operator chose it).
6. A URL is due at ``max(last_visit + interval, host_ready)``: never earlier than its host's politeness
   allows (``host_ready`` is the host's ``next_allowed``).
7. Priority among due URLs = importance x staleness, staleness = (now - last_visit) / interval.
8. Each host's fetches are shared between refresh and discovery: while URLs wait in a host's queue
   (new ones, or refreshes queued before), a serving node queues at most
   ``ceil(refresh_share x window / interval)`` of its due URLs per scan window (:func:`refresh_slots`;
   the highest priority first, the rest stay due), so discovery keeps the rest of the host's politeness
   budget; with nothing waiting on the host, or in a one-off ``--refresh`` run, all go.
9. Freshness SLO: an important page is within its window while ``now - last_visit <= interval``.

Limits of the model: real pages are not Poisson (news sites change on a daily rhythm, many pages change in
bursts); the estimate weighs all history equally, so a page whose rate changes is followed slowly (the
``min_interval``/``max_interval`` clamp bounds the damage, operators can override); with the one-bit
observation a page changing much faster than it is visited looks like ``x == n``, whose estimate saturates
at ``ln(2n + 1) / I``; a cosmetic change that escapes near-duplicate detection counts as a change.
"""

from __future__ import annotations

import math
import re
import struct
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polecat.config import RefreshConfig
from polecat.hosts import HostPatternMap

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

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

    @classmethod
    def from_hex(cls, text: str) -> History:
        """A history as stored in a URL record (hex; "" for none yet)."""
        return cls.decode(bytes.fromhex(text)) if text else cls()

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
    # Built field by field, not with dataclasses.replace: this runs at every completion.
    if h.last_visit <= 0.0:
        return History(h.n, h.x, h.observed, h.unchanged, h.bins, h.shortest, h.longest, now, now)
    t = now - h.last_visit
    if t <= 0.0:
        return h  # a repeat at the same instant (replayed fetch) carries no information
    shortest, longest = min(h.shortest, t), max(h.longest, t)
    if not changed:
        return History(h.n + 1, h.x, h.observed + t, h.unchanged + t, h.bins, shortest, longest,
                       h.last_change, now)
    b = min(MAX_BIN, max(0, int(math.log2(t))))
    bins = {i: (c, s) for i, c, s in h.bins}
    c, s = bins.get(b, (0, 0.0))
    bins[b] = (c + 1, s + t)
    return History(h.n + 1, h.x + 1, h.observed + t, h.unchanged,
                   tuple((i, c, s) for i, (c, s) in sorted(bins.items())), shortest, longest, now, now)


def regular_rate(n: int, x: int, mean_interval: float) -> float:
    """Bias-reduced Cho-Garcia-Molina estimate for ``n`` equal intervals with ``x`` changes (rule 2)."""
    return -math.log((n - x + 0.5) / (n + 0.5)) / mean_interval


def irregular_rate(bins: tuple[tuple[int, int, float], ...], unchanged: float) -> float:
    """Maximum-likelihood rate for irregular intervals (rule 2); needs changes and unchanged time."""
    means = [(c, s / c) for _, c, s in bins]
    changes = sum(c for c, _ in means)
    # The excess sum(c t / (e^(lam t) - 1)) - unchanged is convex and decreasing in lam, so Newton's
    # method from a point left of the root climbs to it monotonically; a step past zero is halved back.
    lam = changes / (unchanged + sum(c * t for c, t in means))
    for _ in range(100):
        excess, slope = -unchanged, 0.0
        for c, t in means:
            e = math.expm1(min(lam * t, 700.0))
            excess += c * t / e
            slope -= c * t * t * (e + 1.0) / (e * e)
        step = excess / slope
        nxt = lam - step if lam - step > 0.0 else lam / 2.0
        if abs(nxt - lam) <= 1e-12 * lam:
            return nxt
        lam = nxt
    return lam


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

    def encode(self) -> bytes:
        freq = _FREQS.index(self.changefreq) + 1 if self.changefreq in _FREQS else 0
        return _PRIOR.pack(math.nan if self.lastmod is None else self.lastmod, freq,
                           math.nan if self.priority is None else self.priority)

    @classmethod
    def decode(cls, raw: bytes | memoryview) -> Prior:
        lastmod, freq, priority = _PRIOR.unpack_from(raw)
        return cls(None if math.isnan(lastmod) else lastmod, _FREQS[freq - 1] if freq else None,
                   None if math.isnan(priority) else priority)


_PRIOR = struct.Struct(">dBd")
_FREQS = tuple(CHANGEFREQ_SECONDS)


def prior_interval(cfg: RefreshConfig, prior: Prior | None, now: float) -> float:
    """The interval before enough history (rule 4)."""
    if prior is not None and prior.changefreq in CHANGEFREQ_SECONDS:
        return clamp_interval(cfg, CHANGEFREQ_SECONDS[prior.changefreq])
    if prior is not None and prior.lastmod is not None and prior.lastmod < now:
        return clamp_interval(cfg, cfg.k * (now - prior.lastmod))
    return clamp_interval(cfg, cfg.default_interval)


@dataclass(slots=True)
class Freshness:
    """The freshness SLO (rule 9) over a set of URLs."""

    tracked: int = 0
    """URLs with a refresh schedule."""
    due: int = 0
    """Of those, due now."""
    important: int = 0
    within: int = 0
    """Important URLs within their change window."""

    @property
    def slo(self) -> float | None:
        """Share of important URLs within their window (None: no important URL fetched yet)."""
        return self.within / self.important if self.important else None


class RefreshPolicy:
    """Rules 3-9 for one crawl's :class:`RefreshConfig`."""

    __slots__ = ("_cfg", "_important", "_never", "_overrides")

    def __init__(self, cfg: RefreshConfig) -> None:
        self._cfg = cfg
        self._never: HostPatternMap[bool] = HostPatternMap((p, True) for p in cfg.never)
        self._overrides: HostPatternMap[float] = HostPatternMap(cfg.overrides)
        self._important = [re.compile(rx) for rx in cfg.important]

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
        lam = self.rate(h, prior, now)
        return self._cfg.max_interval if lam <= 0.0 else clamp_interval(self._cfg, self._cfg.k / lam)

    def rate(self, h: History, prior: Prior | None, now: float) -> float:
        """Changes per second believed for a URL: the estimate (rule 2), or the prior's (rule 4) before
        ``min_visits`` intervals."""
        if h.n < self._cfg.min_visits:
            return self._cfg.k / prior_interval(self._cfg, prior, now)
        return max(estimate_rate(h), 0.5 / h.observed)

    def due_at(self, host: str, h: History, prior: Prior | None, host_ready: float) -> float | None:
        """When the URL may be fetched again (rules 5 and 6); None: never."""
        every = self.interval(host, h, prior, h.last_visit)
        if every is None:
            return None
        return max(h.last_visit + every, host_ready)

    def after_visit(self, host: str, history: str, at: float, changed: bool, host_ready: float,
                    prior: Prior | None = None) -> tuple[str, float | None]:
        """A stored history (hex, "" for none) after a visit at ``at``, and the next due time."""
        h = observe(History.from_hex(history), at, changed)
        return h.encode().hex(), self.due_at(host, h, prior, host_ready)

    def due_priority(self, host: str, h: History, importance: float, now: float,
                     every: float | None = None) -> float | None:
        """Queue priority of a due URL (rule 7) whose interval is ``every`` (None: its own, rule 3);
        None when it is no longer refreshed (rule 5)."""
        if every is None:
            every = self.interval(host, h, None, h.last_visit)
        return None if every is None else self.priority(importance, h, every, now)

    def budget_plan(self, host: str, rates: array[float], weights: array[float],
                    budget: float) -> NDArray[np.float64] | None:
        """Intervals of one host's URLs (believed change rates and importances, in one order) under
        ``budget`` refresh visits per second (rule 3); None when an operator fixed the host's interval
        (rule 5)."""
        if host in self._never or self._overrides.get(host) is not None:
            return None
        import numpy as np

        from polecat.frontier.refresh_budget import budget_intervals

        rates_row = np.frombuffer(rates, dtype=np.float64).reshape(1, -1)
        weights_row = np.frombuffer(weights, dtype=np.float64).reshape(1, -1)
        plan: NDArray[np.float64] = budget_intervals(rates_row, weights_row, np.array([budget]), self._cfg)[0]
        return plan

    def tally(self, into: Freshness, host: str, url: str, h: History, importance: float,
              now: float) -> None:
        """Count one finished URL into the freshness SLO (rule 9). Important: at least
        ``important_min`` importance (seeds), or a URL matching a ``refresh.important`` regex."""
        if h.last_visit <= 0.0:
            return
        every = self.interval(host, h, None, h.last_visit)
        if every is None:
            return
        into.tracked += 1
        into.due += now >= h.last_visit + every
        if importance >= self._cfg.important_min or any(rx.search(url) for rx in self._important):
            into.important += 1
            into.within += self.within_window(h, every, now)

    @staticmethod
    def priority(importance: float, h: History, interval: float, now: float) -> float:
        """Importance x staleness (rule 7)."""
        return importance * max(0.0, now - h.last_visit) / interval

    @staticmethod
    def within_window(h: History, interval: float, now: float) -> bool:
        """Whether a page meets the freshness SLO at ``now`` (rule 9)."""
        return h.last_visit > 0.0 and now - h.last_visit <= interval


def refresh_slots(share: float, window: float | None, host_interval: float,
                  discovery_waiting: bool) -> int | None:
    """How many of a host's due URLs to queue now (rule 8); None: all of them. ``window``: seconds
    until the next scan (None for a one-off run); ``host_interval``: seconds between its requests."""
    if window is None or not discovery_waiting:
        return None
    return math.ceil(share * window / max(host_interval, 1e-9))
