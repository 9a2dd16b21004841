"""Refresh policies on a simulated web (sans-IO, fake clock): which keeps a collection freshest?

    python -m benchmarks.bench_refresh --pages 100000 --hosts 1000 --days 60 --budget 24

The web: ``--pages`` pages spread evenly over ``--hosts`` hosts. A page changes as a Poisson process whose
rate is drawn from a heavy-tailed distribution: ``--static`` of the pages never change, the others have
``rate = (1 / 90 days) * U ** (-1 / alpha)`` (Pareto, alpha 0.35, capped at one change per 5 minutes), so
most change monthly or slower and a few percent hourly or faster. The first ``--important`` pages of each
host (its front pages) are the important ones.

Every host fetches exactly ``--budget`` pages a day (one per slot, all hosts in step); each policy picks
the page with the highest priority in each slot. Before the run every page was fetched once, at a random
time within one uniform cycle; each response carried a ``Last-Modified``, the page's last change before it
(a page that never changes: ten years before). Figures are taken over the second half of the run (the
first half lets the learning policies learn), or with ``--first-week`` over the whole of a 7-day run
(how fast the policies get going):

- freshness: the share of page-time during which the crawler's copy equals the live page;
- important-page SLO: the share of important-page-time whose copy is younger than the page's true change
  window (``clamp(1 / rate, refresh.min_interval, refresh.max_interval)``, as the crawler would want it).

Policies: ``uniform`` (round robin: the oldest copy next); ``nutch`` (adaptive interval, x0.8 when the page
changed, x1.2 when not, clamped like polecat's; the most overdue page next); ``polecat`` (the estimator,
budget-aware intervals and priority of polecat/frontier/refresh.py, the same code the crawler runs,
re-planned every ``--replan`` hours) as it was before issue 37: every page starts from
``refresh.default_interval`` and its visits carry no date; ``polecat-priors`` (the same, with the priors of
refresh rule 4: the first interval from the first response's ``Last-Modified``, later dated changes through
the last-modified estimator of rule 2, the prior fading over ``min_visits``); ``polecat-k`` (the estimator
with ``clamp(k / rate)`` intervals only); ``oracle`` (polecat's budget-optimal intervals from the true
rates: the ceiling).
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from polecat.config import RefreshConfig
from polecat.frontier.refresh import History, RefreshPolicy, observe
from polecat.frontier.refresh_budget import budget_intervals

DAY = 86_400.0


@dataclass(frozen=True)
class Web:
    hosts: int
    per_host: int
    rate: np.ndarray
    """True change rate per page, changes per second; shape (hosts, per_host)."""
    important: np.ndarray
    """Boolean, same shape."""
    other_importance: float
    """Importance of the other pages (front pages have 1), for the policies that weigh it."""


def make_web(pages: int, hosts: int, static: float, important: int, other_importance: float,
             rng: np.random.Generator) -> Web:
    per_host = pages // hosts
    shape = (hosts, per_host)
    rate = (1 / (90 * DAY)) * rng.random(shape) ** (-1 / 0.35)
    rate = np.minimum(rate, 1 / 300.0)
    rate[rng.random(shape) < static] = 0.0
    imp = np.zeros(shape, dtype=bool)
    imp[:, :important] = True
    return Web(hosts, per_host, rate, imp, other_importance)


class Policy:
    """A refresh policy: intervals per page and how they learn from one fetch."""

    name = ""

    def __init__(self, web: Web, cfg: RefreshConfig, last: np.ndarray, budget: float,
                 first_modified: np.ndarray) -> None:
        self.interval = np.full(web.rate.shape, cfg.default_interval)
        self.weight = np.ones(web.rate.shape)

    def fetched(self, h: np.ndarray, p: np.ndarray, t: float, changed: np.ndarray,
                modified: np.ndarray) -> None:
        """Pages ``(h[i], p[i])`` were fetched at ``t``; ``changed[i]``: a new version was seen, whose
        Last-Modified is ``modified[i]``."""

    def replan(self) -> None:
        """Recompute intervals from what was learnt (once per simulated ``--replan`` hours)."""


class Uniform(Policy):
    name = "uniform"


class Nutch(Policy):
    name = "nutch"

    def __init__(self, web: Web, cfg: RefreshConfig, last: np.ndarray, budget: float,
                 first_modified: np.ndarray) -> None:
        super().__init__(web, cfg, last, budget, first_modified)
        self._cfg = cfg

    def fetched(self, h: np.ndarray, p: np.ndarray, t: float, changed: np.ndarray,
                modified: np.ndarray) -> None:
        factor = np.where(changed, 0.8, 1.2)
        cfg = self._cfg
        self.interval[h, p] = np.clip(self.interval[h, p] * factor, cfg.min_interval, cfg.max_interval)


class Polecat(Policy):
    name = "polecat"

    def __init__(self, web: Web, cfg: RefreshConfig, last: np.ndarray, budget: float,
                 first_modified: np.ndarray) -> None:
        super().__init__(web, cfg, last, budget, first_modified)
        self._cfg = cfg
        self._policy = RefreshPolicy(cfg)
        self._hist = [[observe(History(), float(last[i, j]), True) for j in range(web.per_host)]
                      for i in range(web.hosts)]
        self._rate = np.full(web.rate.shape, self._policy.rate(History(), None, 0.0))
        self._budget = np.full(web.hosts, budget)
        self.weight = np.where(web.important, 1.0, web.other_importance)
        self.replan()

    def replan(self) -> None:
        self.interval = budget_intervals(self._rate, self.weight, self._budget, self._cfg)

    def fetched(self, h: np.ndarray, p: np.ndarray, t: float, changed: np.ndarray,
                modified: np.ndarray) -> None:
        policy, hist, rate = self._policy, self._hist, self._rate
        for i, j, c in zip(h.tolist(), p.tolist(), changed.tolist(), strict=True):
            new = observe(hist[i][j], t, c)
            hist[i][j] = new
            rate[i, j] = policy.rate(new, None, t)


class PolecatPriors(Polecat):
    """Polecat with refresh rule 4's priors: the first visit's Last-Modified, dated changes after."""

    name = "polecat-priors"

    def __init__(self, web: Web, cfg: RefreshConfig, last: np.ndarray, budget: float,
                 first_modified: np.ndarray) -> None:
        super().__init__(web, cfg, last, budget, first_modified)
        policy = self._policy
        for i in range(web.hosts):
            for j in range(web.per_host):
                lm = float(first_modified[i, j])
                h = policy.visit(History(), float(last[i, j]), True, None, lm)
                self._hist[i][j] = h
                self._rate[i, j] = policy.rate(h, None, h.last_visit)
        self.replan()

    def fetched(self, h: np.ndarray, p: np.ndarray, t: float, changed: np.ndarray,
                modified: np.ndarray) -> None:
        policy, hist, rate = self._policy, self._hist, self._rate
        for i, j, c, lm in zip(h.tolist(), p.tolist(), changed.tolist(), modified.tolist(), strict=True):
            new = observe(hist[i][j], t, c, lm if c else None)
            hist[i][j] = new
            rate[i, j] = policy.rate(new, None, t)


class PolecatK(Polecat):
    """The estimator with ``clamp(k / rate)`` intervals alone, blind to the host's budget (rule 3's
    first sentence): visits in proportion to the estimated rate."""

    name = "polecat-k"

    def __init__(self, web: Web, cfg: RefreshConfig, last: np.ndarray, budget: float,
                 first_modified: np.ndarray) -> None:
        super().__init__(web, cfg, last, math.inf, first_modified)


class Oracle(Polecat):
    """Budget-optimal intervals from the true rates: the ceiling for any estimator."""

    name = "oracle"

    def __init__(self, web: Web, cfg: RefreshConfig, last: np.ndarray, budget: float,
                 first_modified: np.ndarray) -> None:
        super().__init__(web, cfg, last, budget, first_modified)
        self._rate = web.rate.copy()
        self.replan()

    def fetched(self, h: np.ndarray, p: np.ndarray, t: float, changed: np.ndarray,
                modified: np.ndarray) -> None:
        pass


POLICIES: dict[str, Callable[[Web, RefreshConfig, np.ndarray, float, np.ndarray], Policy]] = {
    "uniform": Uniform, "nutch": Nutch, "polecat": Polecat, "polecat-priors": PolecatPriors,
    "polecat-k": PolecatK, "oracle": Oracle,
}


@dataclass(frozen=True)
class Figures:
    freshness: float
    important_freshness: float
    slo: float
    cpu_s: float


def simulate(web: Web, make: Callable[[Web, RefreshConfig, np.ndarray, float, np.ndarray], Policy],
             cfg: RefreshConfig,
             days: float, budget: int, replan_h: float, seed: int, first_week: bool = False) -> Figures:
    """Run one policy over the web; figures over the second half of the run (``first_week``: all of it)."""
    rng = np.random.default_rng(seed)
    dates = np.random.default_rng(seed + 1)  # Last-Modified draws: the page's own stream stays as it was
    cpu0 = time.process_time()
    slot = DAY / budget
    shape = web.rate.shape
    last = -rng.random(shape) * (web.per_host * slot)
    with np.errstate(divide="ignore"):
        mean_gap = np.where(web.rate > 0, 1 / web.rate, np.inf)
    next_change = last + rng.exponential(1.0, shape) * mean_gap
    window = np.clip(mean_gap, cfg.min_interval, cfg.max_interval)
    # The last change before the first fetch: an exponential age back from it (reversed Poisson process).
    age = np.where(web.rate > 0, dates.exponential(1.0, shape) * mean_gap, 3650 * DAY)
    policy = make(web, cfg, last, budget / DAY, last - age)
    replan_every = max(1, int(replan_h * 3600 / slot))
    rows = np.arange(web.hosts)
    steps = int(days * budget)
    start, end = (0.0 if first_week else steps // 2 * slot), steps * slot
    fresh = np.zeros(shape)
    slo_sum, slo_n = 0.0, 0
    imp = web.important
    for k in range(steps):
        t = k * slot
        if k % replan_every == 0:
            policy.replan()
        prio = policy.weight * (t - last) / policy.interval
        p = np.argmax(prio, axis=1)
        seen = next_change[rows, p]
        changed = seen <= t
        if t >= start:
            lo = np.maximum(last[rows, p], start)
            fresh[rows, p] += np.maximum(0.0, np.minimum(seen, t) - lo)
            slo_sum += float(np.mean((t - last[imp]) <= window[imp]))
            slo_n += 1
        # The last change before t: an exponential age back from t, not before the first one seen.
        modified = np.maximum(seen, t - dates.exponential(1.0, web.hosts) * mean_gap[rows, p])
        # Memoryless: the first change after this fetch is an exponential draw from now.
        next_change[rows, p] = t + rng.exponential(1.0, web.hosts) * mean_gap[rows, p]
        last[rows, p] = t
        policy.fetched(rows, p, t, changed, modified)
    fresh += np.maximum(0.0, np.minimum(next_change, end) - np.maximum(last, start))
    share = fresh / (end - start)
    return Figures(float(share.mean()), float(share[imp].mean()), slo_sum / max(1, slo_n),
                   time.process_time() - cpu0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=1_000)
    ap.add_argument("--days", type=float, default=60.0)
    ap.add_argument("--budget", type=int, default=24, help="fetches per host per day")
    ap.add_argument("--static", type=float, default=0.4, help="share of pages that never change")
    ap.add_argument("--important", type=int, default=5, help="important pages per host")
    ap.add_argument("--other-importance", type=float, default=0.5,
                    help="importance of non-front pages (front pages: 1); 1 weighs all pages alike")
    ap.add_argument("--replan", type=float, default=6.0, help="hours between interval re-plans")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--first-week", action="store_true",
                    help="run 7 days and measure all of them (how fast each policy gets going)")
    args = ap.parse_args(argv)
    if args.first_week:
        args.days = 7.0
    web = make_web(args.pages, args.hosts, args.static, args.important, args.other_importance,
                   np.random.default_rng(args.seed))
    cfg = RefreshConfig()
    rate = web.rate
    print(f"web: {rate.size} pages, {web.hosts} hosts; static {np.mean(rate == 0):.1%}, changing at least "
          f"daily {np.mean(rate >= 1 / DAY):.1%}, at least hourly {np.mean(rate >= 1 / 3600):.1%}; "
          f"budget {args.budget} fetches/host/day over {args.days:g} days; measured over "
          f"{'all of them' if args.first_week else 'the second half'}")
    print("| policy | freshness (all pages) | freshness (important) | important-page SLO | CPU s |")
    print("|---|---|---|---|---|")
    for name in args.policies.split(","):
        f = simulate(web, POLICIES[name], cfg, args.days, args.budget, args.replan, args.seed,
                     args.first_week)
        print(f"| {name} | {f.freshness:.3f} | {f.important_freshness:.3f} | {f.slo:.3f} | {f.cpu_s:.1f} |",
              flush=True)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
