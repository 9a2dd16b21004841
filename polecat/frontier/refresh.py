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
   Besides, what ``Last-Modified`` said of the changes: ``lm_x`` changed intervals whose response dated
   its change inside the interval (after the previous visit, not after the fetch), with ``lm_age`` the sum
   of those ages (fetch time - Last-Modified), and ``lm_miss`` changed intervals whose response did not
   (no header, unparseable, or a date outside the interval: a server whose dates do not follow its
   changes); and the prior rate fixed at the first visit (rule 4; -1 in a history written before 0.3).
2. Estimate of λ:
   - regular intervals (longest <= ``REGULAR_SPREAD`` x shortest), or ``x == 0`` or ``x == n`` (where the
     likelihood has no finite positive maximum): the bias-reduced form
     ``λ = -ln((n - x + 0.5) / (n + 0.5)) / I`` with ``I`` the mean interval;
   - irregular intervals: the maximum-likelihood ``λ``, the root of
     ``Σ_changed t / (exp(λ t) - 1) = Σ_unchanged t``, found by Newton's method; each bin stands in for its
     intervals by their mean (within a factor 2 of each of them; the convexity of the left side makes
     this err slightly low).
   - with dated changes (``lm_x > 0`` and ``lm_miss == 0``): the last-modified estimator of Cho and
     Garcia-Molina (TOIT 2003, section 5): each changed interval is known to have been quiet for its age,
     each unchanged one for its whole length, so the likelihood is ``λ^X exp(-λ T)`` and
     ``λ = lm_x / (lm_age + unchanged time)``; it uses what the one-bit forms throw away and does not
     saturate at ``x == n``.
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
4. Prior. At a URL's first visit its prior rate is fixed (``k / interval``, unclamped: the clamp of the run
   deciding applies), from the first of: the sitemap ``changefreq`` (:data:`CHANGEFREQ_SECONDS`); the gap
   between a feed's item dates (:attr:`Prior.every`, a feed changes about once per item); the response's
   ``Last-Modified``
   (a page last changed ``a`` seconds before the fetch gets ``k x a``, HTTP's heuristic freshness, RFC 9111
   4.2.2, and the estimator of rule 2 with one dated change); a sitemap ``lastmod`` or a feed item's date
   (the same, from that date); else ``default_interval``. A Last-Modified in the future is ignored. The
   prior's weight fades linearly as intervals are observed: the believed rate is
   ``w λ_prior + (1 - w) λ_estimate`` with ``w = 1 - n / min_visits`` (1 at the first visit, 0 from
   ``min_visits`` intervals on, where the estimate alone counts as before). A history written before the
   prior was kept in it takes its prior from the stored sitemap hint (or the default) at each decision.
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
9. Freshness SLO: an important page is within its window while ``now <= last_visit + interval`` (its
   boundary), and due from then on.

Limits of the model: real pages are not Poisson (news sites change on a daily rhythm, many pages change in
bursts); the estimate weighs all history equally, so a page whose rate changes is followed slowly (the
``min_interval``/``max_interval`` clamp bounds the damage, operators can override); with the one-bit
observation a page changing much faster than it is visited looks like ``x == n``, whose estimate saturates
at ``ln(2n + 1) / I`` (unless its responses date their changes: rule 2's last-modified form); a cosmetic
change that escapes near-duplicate detection counts as a change; a server that stamps every response with
the time of the request as its ``Last-Modified`` starts its pages at ``min_interval`` (as HTTP caches
would), until ``min_visits`` visits show otherwise (its dates then fall outside the intervals that saw no
change, and the one-bit forms decide).
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
    lm_x: int = 0
    """Changed intervals whose Last-Modified dated the change inside them."""
    lm_age: float = 0.0
    """Sum of those changes' ages at the visit that saw them (fetch time - Last-Modified)."""
    lm_miss: int = 0
    """Changed intervals without such a date."""
    prior_rate: float = -1.0
    """The prior rate fixed at the first visit (rule 4); -1: none kept (a history from before 0.3)."""

    @classmethod
    def from_hex(cls, text: str) -> History:
        """A history as stored in a URL record (hex; "" for none yet)."""
        return cls.decode(bytes.fromhex(text)) if text else cls()

    def encode(self) -> bytes:
        head = _HEAD.pack(self.n, self.x, self.observed, self.unchanged, self.shortest, self.longest,
                          self.last_change, self.last_visit, len(self.bins))
        tail = _TAIL.pack(self.lm_x, self.lm_age, self.lm_miss, self.prior_rate)
        return head + b"".join(_BIN.pack(*b) for b in self.bins) + tail

    @classmethod
    def decode(cls, raw: bytes | memoryview) -> History:
        """A history from :meth:`encode`, or from 0.2 and before (no tail: no dated changes, no prior)."""
        n, x, observed, unchanged, shortest, longest, last_change, last_visit, nbins = _HEAD.unpack_from(raw)
        bins = tuple(_BIN.unpack_from(raw, _HEAD.size + i * _BIN.size) for i in range(nbins))
        end = _HEAD.size + nbins * _BIN.size
        if len(raw) < end + _TAIL.size:
            return cls(n, x, observed, unchanged, bins, shortest, longest, last_change, last_visit)
        return cls(n, x, observed, unchanged, bins, shortest, longest, last_change, last_visit,
                   *_TAIL.unpack_from(raw, end))


_HEAD = struct.Struct(">IIddddddB")
_BIN = struct.Struct(">BId")
_TAIL = struct.Struct(">IdId")
"""Added in 0.3 after the bins (rule 1's Last-Modified counts and rule 4's prior); absent before."""


def observe(h: History, now: float, changed: bool, modified: float | None = None) -> History:
    """The history after a visit at ``now`` that did (or did not) see a new version of the page;
    ``modified``: the response's Last-Modified (epoch seconds), if it had one."""
    # Built field by field, not with dataclasses.replace: this runs at every completion.
    if h.last_visit <= 0.0:
        return History(h.n, h.x, h.observed, h.unchanged, h.bins, h.shortest, h.longest, now, now,
                       h.lm_x, h.lm_age, h.lm_miss, h.prior_rate)
    t = now - h.last_visit
    if t <= 0.0:
        return h  # a repeat at the same instant (replayed fetch) carries no information
    shortest, longest = min(h.shortest, t), max(h.longest, t)
    if not changed:
        return History(h.n + 1, h.x, h.observed + t, h.unchanged + t, h.bins, shortest, longest,
                       h.last_change, now, h.lm_x, h.lm_age, h.lm_miss, h.prior_rate)
    b = min(MAX_BIN, max(0, int(math.log2(t))))
    bins = {i: (c, s) for i, c, s in h.bins}
    c, s = bins.get(b, (0, 0.0))
    bins[b] = (c + 1, s + t)
    if modified is not None and h.last_visit < modified <= now:
        lm_x, lm_age, lm_miss = h.lm_x + 1, h.lm_age + now - modified, h.lm_miss
    else:
        lm_x, lm_age, lm_miss = h.lm_x, h.lm_age, h.lm_miss + 1
    return History(h.n + 1, h.x + 1, h.observed + t, h.unchanged,
                   tuple((i, c, s) for i, (c, s) in sorted(bins.items())), shortest, longest, now, now,
                   lm_x, lm_age, lm_miss, h.prior_rate)


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
    if h.lm_x > 0 and h.lm_miss == 0:
        return h.lm_x / max(h.lm_age + h.unchanged, 1e-3)  # dated "now": the fastest rate there is
    if h.x in (0, h.n) or h.longest <= REGULAR_SPREAD * h.shortest:
        return regular_rate(h.n, h.x, h.observed / h.n)
    return irregular_rate(h.bins, h.unchanged)


def clamp_interval(cfg: RefreshConfig, seconds: float) -> float:
    return min(cfg.max_interval, max(cfg.min_interval, seconds))


@dataclass(frozen=True, slots=True)
class Prior:
    """What a sitemap or a feed said about a URL (rule 4)."""

    lastmod: float | None = None
    changefreq: str | None = None
    priority: float | None = None
    every: float | None = None
    """Seconds between a feed's item dates (the prior of the feed itself)."""

    def encode(self) -> bytes:
        freq = _FREQS.index(self.changefreq) + 1 if self.changefreq in _FREQS else 0
        head = _PRIOR.pack(math.nan if self.lastmod is None else self.lastmod, freq,
                           math.nan if self.priority is None else self.priority)
        return head if self.every is None else head + _EVERY.pack(self.every)

    @classmethod
    def decode(cls, raw: bytes | memoryview) -> Prior:
        """A prior from :meth:`encode` (``every`` only since 0.3; a 0.2 prior has none)."""
        lastmod, freq, priority = _PRIOR.unpack_from(raw)
        every = _EVERY.unpack_from(raw, _PRIOR.size)[0] if len(raw) >= _PRIOR.size + _EVERY.size else None
        return cls(None if math.isnan(lastmod) else lastmod, _FREQS[freq - 1] if freq else None,
                   None if math.isnan(priority) else priority, every)


_PRIOR = struct.Struct(">dBd")
_EVERY = struct.Struct(">d")
_FREQS = tuple(CHANGEFREQ_SECONDS)


def prior_seconds(cfg: RefreshConfig, prior: Prior | None, now: float,
                  modified: float | None = None) -> float:
    """The interval a URL starts from at a visit at ``now`` whose response said ``modified``
    (Last-Modified, epoch seconds), before the clamp (rule 4)."""
    if prior is not None and prior.changefreq in CHANGEFREQ_SECONDS:
        return CHANGEFREQ_SECONDS[prior.changefreq]
    if prior is not None and prior.every is not None and prior.every > 0.0:
        return cfg.k * prior.every
    for dated in (modified, None if prior is None else prior.lastmod):
        if dated is not None and dated < now:
            return cfg.k * (now - dated)
    return cfg.default_interval


def prior_interval(cfg: RefreshConfig, prior: Prior | None, now: float,
                   modified: float | None = None) -> float:
    """:func:`prior_seconds`, clamped like rule 3."""
    return clamp_interval(cfg, prior_seconds(cfg, prior, now, modified))


def prior_rate(cfg: RefreshConfig, prior: Prior | None, now: float, modified: float | None = None) -> float:
    """The rate whose interval (rule 3) is :func:`prior_seconds`; kept unclamped, so that the clamp of
    the run deciding applies (rule 4)."""
    seconds = prior_seconds(cfg, prior, now, modified)
    return cfg.k / seconds if seconds > 0.0 else math.inf


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
        """Changes per second believed for a URL: the prior (rule 4) fading into the estimate (rule 2).
        ``prior`` and ``now`` matter only for a history that kept no prior of its own."""
        cfg = self._cfg
        if h.n >= cfg.min_visits:
            return max(estimate_rate(h), 0.5 / h.observed)
        first = h.prior_rate if h.prior_rate >= 0.0 else cfg.k / prior_interval(cfg, prior, now)
        if math.isinf(first):
            return first  # "always": the floor until the estimate alone counts
        if h.n == 0:
            return first
        w = 1.0 - h.n / cfg.min_visits
        return w * first + (1.0 - w) * max(estimate_rate(h), 0.5 / h.observed)

    def due_at(self, host: str, h: History, prior: Prior | None, host_ready: float) -> float | None:
        """When the URL may be fetched again (rules 5 and 6); None: never."""
        every = self.interval(host, h, prior, h.last_visit)
        if every is None:
            return None
        return max(h.last_visit + every, host_ready)

    def after_visit(self, host: str, history: str, at: float, changed: bool, host_ready: float,
                    prior: Prior | None = None, modified: float | None = None) -> tuple[str, float | None]:
        """A stored history (hex, "" for none) after a visit at ``at`` whose response said ``modified``
        (Last-Modified, epoch seconds), and the next due time. The first visit fixes the prior (rule 4)."""
        h = self.visit(History.from_hex(history), at, changed, prior, modified)
        return h.encode().hex(), self.due_at(host, h, prior, host_ready)

    def visit(self, before: History, at: float, changed: bool, prior: Prior | None = None,
              modified: float | None = None) -> History:
        """:func:`observe`, and at the first visit the prior it fixes (rule 4)."""
        h = observe(before, at, changed, modified)
        if before.last_visit > 0.0:
            return h
        first = prior_rate(self._cfg, prior, at, modified)
        return History(h.n, h.x, h.observed, h.unchanged, h.bins, h.shortest, h.longest, h.last_change,
                       h.last_visit, h.lm_x, h.lm_age, h.lm_miss, first)

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
        boundary = self.boundary(host, h)
        if boundary is None:
            return
        into.tracked += 1
        into.due += now >= boundary
        if self.is_important(url, importance):
            into.important += 1
            into.within += now <= boundary

    def boundary(self, host: str, h: History) -> float | None:
        """When a finished URL leaves its change window: ``last_visit + interval`` (rule 9); None: it is
        not tracked (never visited, or never refreshed by rule 5)."""
        if h.last_visit <= 0.0:
            return None
        every = self.interval(host, h, None, h.last_visit)
        return None if every is None else h.last_visit + every

    def is_important(self, url: str, importance: float) -> bool:
        """Whether a URL counts in the freshness SLO (rule 9)."""
        return importance >= self._cfg.important_min or any(rx.search(url) for rx in self._important)

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
