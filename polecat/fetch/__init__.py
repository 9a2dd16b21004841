"""polecat.fetch: from a URL to a response. DNS cache with the SSRF guard (dns, guard), robots.txt rules
and per-host policy (robots), the bounded HTTP client (http, decode) and charset sniffing (charset)."""

from polecat.fetch.charset import decode_html
from polecat.fetch.dns import CachingResolver, DnsStats
from polecat.fetch.http import Fetcher, Response
from polecat.fetch.robots import (
    Closed,
    Fetch,
    Ready,
    RobotsDecision,
    RobotsPolicy,
    RobotsRules,
    RobotsStats,
)

__all__ = [
    "CachingResolver",
    "Closed",
    "DnsStats",
    "Fetch",
    "Fetcher",
    "Ready",
    "Response",
    "RobotsDecision",
    "RobotsPolicy",
    "RobotsRules",
    "RobotsStats",
    "decode_html",
]
