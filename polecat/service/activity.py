"""Recent crawl history for the operator API, the status page and metrics (sans-IO).

Rules:
- Fed one call per finished page request (:meth:`Activity.record`) with wall-clock ``now``.
- An *error* is a request that failed (network error, retry, gave up) or answered HTTP >= 400.
- Crawl-wide counts are kept per minute for the last hour (the status page's rate plot); per-host counts
  per hour for the last 24 h, only for hosts that had a request, so memory follows active hosts.
- The last ``recent`` errors are kept with host, URL and reason.
- Tests drive it with explicit times; nothing here reads a clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from polecat.frontier.records import Completion, Lease

MINUTE = 60.0
HOUR = 3600.0
DAY_HOURS = 24


def is_error(completion: Completion) -> bool:
    """Whether a finished request counts as an error (see the module rules)."""
    if completion.outcome in ("failed", "retry"):
        return True
    status = completion.attempt.status
    return status is not None and status >= 400


@dataclass(frozen=True, slots=True)
class RecentError:
    at: float
    host: str
    url: str
    reason: str


@dataclass(frozen=True, slots=True)
class HostActivity:
    fetched_24h: int
    errors_24h: int
    error_rate: float
    """errors_24h / fetched_24h (0.0 when nothing was fetched)."""
    last_fetch: float | None
    """Wall-clock start of the host's last request in this run."""


@dataclass(slots=True)
class _HostWindow:
    hours: deque[list[int]] = field(default_factory=deque)
    """``[hour number, requests, errors]`` for hours with requests, oldest first."""
    last_fetch: float = 0.0


class Activity:
    """See the module docstring."""

    def __init__(self, recent: int = 50) -> None:
        self._minutes: deque[list[int]] = deque()
        """``[minute number, requests, errors]`` for the last hour's minutes with requests."""
        self._hosts: dict[str, _HostWindow] = {}
        self._recent: deque[RecentError] = deque(maxlen=recent)

    def record(self, lease: Lease, completion: Completion, now: float) -> None:
        """Count one finished page request of ``lease``."""
        error = is_error(completion)
        _bump(self._minutes, int(now // MINUTE), error, 60)
        win = self._hosts.get(lease.host)
        if win is None:
            win = self._hosts[lease.host] = _HostWindow()
        _bump(win.hours, int(now // HOUR), error, DAY_HOURS)
        win.last_fetch = max(win.last_fetch, completion.attempt.started)
        if error:
            self._recent.append(RecentError(now, lease.host, lease.url, completion.reason))

    def rate_series(self, now: float) -> list[tuple[float, int]]:
        """Requests per minute over the last hour: 60 ``(minute start, requests)``, oldest first."""
        current = int(now // MINUTE)
        counts = {m: n for m, n, _ in self._minutes}
        return [(m * MINUTE, counts.get(m, 0)) for m in range(current - 59, current + 1)]

    def host(self, host: str, now: float) -> HostActivity:
        win = self._hosts.get(host)
        if win is None:
            return HostActivity(0, 0, 0.0, None)
        fetched, errors = _window_sums(win.hours, int(now // HOUR), DAY_HOURS)
        return HostActivity(fetched, errors, errors / fetched if fetched else 0.0, win.last_fetch or None)

    def top_error_hosts(self, now: float, n: int = 10) -> list[tuple[str, int]]:
        """Hosts with the most errors in the last 24 h, most first (hosts without errors left out)."""
        hour = int(now // HOUR)
        counts = ((h, _window_sums(w.hours, hour, DAY_HOURS)[1]) for h, w in self._hosts.items())
        return sorted((c for c in counts if c[1] > 0), key=lambda c: (-c[1], c[0]))[:n]

    def recent_errors(self) -> list[RecentError]:
        """The last errors, newest first."""
        return list(reversed(self._recent))


def _bump(buckets: deque[list[int]], bucket: int, error: bool, keep: int) -> None:
    if buckets and buckets[-1][0] == bucket:
        buckets[-1][1] += 1
        buckets[-1][2] += error
    else:
        buckets.append([bucket, 1, int(error)])
    while buckets[0][0] <= bucket - keep:
        buckets.popleft()


def _window_sums(buckets: deque[list[int]], current: int, keep: int) -> tuple[int, int]:
    requests = errors = 0
    for b, n, e in buckets:
        if b > current - keep:
            requests += n
            errors += e
    return requests, errors
