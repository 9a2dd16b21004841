"""polecat.fetch: from a URL to a response. The DNS cache with its SSRF guard (dns, guard), the connection
pool and bounded HTTP/1.1 client (pool, h1, http, decode, deadline) and their seams (seams)."""

from polecat.fetch.dns import CachingResolver, DnsStats
from polecat.fetch.http import Fetcher, Response

__all__ = ["CachingResolver", "DnsStats", "Fetcher", "Response"]
