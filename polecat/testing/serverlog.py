"""Server-side request logs and what they prove: politeness, robots compliance, duplicate fetches.

Times are ``time.monotonic()`` taken by the server (CLOCK_MONOTONIC on Linux, so logs written by several
server processes compare directly). ``start`` is when the request's headers arrived at the handler,
``end`` is just before the response was handed to the transport: the client cannot have received the
response earlier, so ``end`` is a lower bound of the client's view and an overlap found here is real.
``wall`` is the server's ``time.time()`` at arrival, for judging wall-clock instants (an HTTP-date
Retry-After) without converting between the two clocks.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from polecat.testing.sitegen import Site

__all__ = [
    "PolitenessViolation",
    "RequestRecord",
    "fetch_counts",
    "politeness_violations",
    "read_log",
    "robots_violations",
]


@dataclass(frozen=True, slots=True)
class RequestRecord:
    host: str
    """Host header, lowercased, without the port."""
    target: str
    """The request target as sent (path and query, percent-encoding kept)."""
    url: str
    """The canonical URL of the page served (``http://host:port/path?sorted-query``), else host+target."""
    method: str
    start: float
    end: float
    status: int
    wall: float = 0.0
    """``time.time()`` when the request reached the handler, read before ``start``: a wall-clock instant
    is judged on the wall clock, so a step or slew of it between test start and arrival cannot move the
    verdict (0.0 in logs written before this field existed)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class PolitenessViolation:
    host: str
    first: RequestRecord
    second: RequestRecord
    kind: Literal["overlap", "interval"]
    gap: float
    """Seconds between the two starts."""
    required: float


def read_log(paths: Iterable[Path]) -> list[RequestRecord]:
    """Records from JSON-lines log files (one file per server process), in start order."""
    records = [
        RequestRecord(**json.loads(line))
        for path in paths
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    records.sort(key=lambda r: r.start)
    return records


def politeness_violations(
    log: Iterable[RequestRecord],
    min_interval: Mapping[str, float] | float,
    slack: float = 0.0,
) -> list[PolitenessViolation]:
    """Pairs of consecutive requests to one host that overlapped (the second arrived before the first's
    response was handed over) or started less than ``interval - slack`` apart.

    ``min_interval`` is one interval for every host or a per-host mapping; in a mapping the key ``"*"``
    is the default for hosts not listed (0 when absent). Checking consecutive pairs suffices: if a later
    request overlaps an earlier one, every request between them does too.
    """
    by_host: defaultdict[str, list[RequestRecord]] = defaultdict(list)
    for record in log:
        by_host[record.host].append(record)
    found = []
    for host, records in by_host.items():
        if isinstance(min_interval, Mapping):
            required = min_interval.get(host, min_interval.get("*", 0.0))
        else:
            required = min_interval
        records.sort(key=lambda r: r.start)
        for first, second in itertools.pairwise(records):
            gap = second.start - first.start
            if second.start < first.end:
                found.append(PolitenessViolation(host, first, second, "overlap", gap, required))
            elif gap < required - slack:
                found.append(PolitenessViolation(host, first, second, "interval", gap, required))
    return found


def robots_violations(
    log: Iterable[RequestRecord], site: Site, user_agent: str = "polecat"
) -> list[RequestRecord]:
    """Requests for URLs the site's robots.txt (as generated, before any test override) disallows.

    A host whose robots.txt answers 5xx disallows everything but the robots.txt fetch itself."""
    parsers = {h: site.robots_parser(h) for h in site.hosts}
    bad = []
    for record in log:
        if record.target == "/robots.txt" or record.host not in parsers:
            continue
        parser = parsers[record.host]
        if parser is not None and not parser.can_fetch(record.url, user_agent):
            bad.append(record)
    return bad


def fetch_counts(log: Iterable[RequestRecord]) -> Counter[str]:
    """Requests per canonical URL (a count above 1 is a duplicate fetch)."""
    return Counter(record.url for record in log)
