"""Refresh rule 3's budget optimum (polecat/frontier/refresh.py has the rules): numpy, loaded by the first
refresh scan that plans a host's budget, so a crawl that never plans one never loads numpy."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from polecat.config import RefreshConfig

_R = np.logspace(-8, 3, 4096)
_G = -np.expm1(-_R) - _R * np.exp(-_R)
"""``g(r) = 1 - (1 + r) e^-r`` on a grid, increasing: :func:`budget_intervals` inverts it by interpolation."""


def budget_intervals(rates: NDArray[np.float64], weights: NDArray[np.float64], budget: NDArray[np.float64],
                     cfg: RefreshConfig) -> NDArray[np.float64]:
    """Intervals for each host's URLs under its refresh budget (rule 3).

    ``rates`` and ``weights`` (importance) have one row per host and one column per URL; ``budget`` is
    each host's refresh visits per second. Rows whose clamped ``k / rate`` intervals fit their budget keep
    them; the others get the weighted freshness optimum, clamped.
    """
    with np.errstate(divide="ignore"):
        wanted = np.where(rates > 0, cfg.k / rates, np.inf)
    wanted = np.clip(wanted, cfg.min_interval, cfg.max_interval)
    over = (1.0 / wanted).sum(axis=1) > budget
    if not over.any():
        return wanted
    lam, w, b = rates[over], np.maximum(weights[over], 1e-12), budget[over][:, None]
    lo = np.full((lam.shape[0], 1), 1e-12)
    hi = np.full((lam.shape[0], 1), 1e12)

    def intervals(mu: NDArray[np.float64]) -> NDArray[np.float64]:
        y = mu * lam / w
        r = np.interp(y, _G, _R)
        with np.errstate(divide="ignore", invalid="ignore"):
            every = np.where((y < 1.0) & (lam > 0), r / lam, np.inf)
        return np.clip(every, cfg.min_interval, cfg.max_interval)

    for _ in range(60):
        # mu is the price of a visit: a higher price, fewer visits. Bisect in log space.
        mid = np.sqrt(lo * hi)
        spent = (1.0 / intervals(mid)).sum(axis=1, keepdims=True)
        lo = np.where(spent > b, mid, lo)
        hi = np.where(spent > b, hi, mid)
    planned = intervals(hi)
    # Pages given up (too fast for their share) take what the others leave of the budget, evenly:
    # when every page of a host changes far faster than it can be visited, the optimum is flat and
    # the bisection alone would leave the budget unspent.
    given_up = (planned >= cfg.max_interval) & (lam > 0)
    slack = b[:, 0] - (1.0 / planned).sum(axis=1) + (given_up / planned).sum(axis=1)
    count = given_up.sum(axis=1)
    share = np.where(count > 0, count / np.maximum(slack, 1e-300), np.inf)[:, None]
    planned = np.where(given_up, np.clip(share, cfg.min_interval, cfg.max_interval), planned)
    out = wanted.copy()
    out[over] = planned
    return out
