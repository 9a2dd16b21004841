"""Scrapy's side of the comparison; runs inside the harness's Scrapy virtualenv (it imports nothing from
polecat). A CrawlSpider with a default LinkExtractor, ROBOTSTXT_OBEY, one request per host at a time,
the same fixed per-host delay as polecat, page bodies written to disk.

    python scrapy_crawl.py SEEDS_FILE HOSTS_JSON OUT_DIR DELAY CONCURRENCY

HOSTS_JSON maps each benchmark host to its loopback address; a resolver installed on Twisted's reactor
answers from it, so Scrapy talks to the same virtual hosts as polecat without a DNS server.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule
from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

_HOSTS: dict[str, str] = {}


@implementer(IResolverSimple)
class MapResolver:
    """TWISTED_DNS_RESOLVER: answers the benchmark's hosts from HOSTS_JSON, fails everything else."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> MapResolver:
        return cls(reactor)

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout: Any = ()) -> Any:
        address = _HOSTS.get(name.lower())
        if address is None:
            return defer.fail(DNSLookupError(name))
        return defer.succeed(address)


class BenchSpider(CrawlSpider):  # type: ignore[misc]
    name = "bench"
    rules = (Rule(LinkExtractor(), callback="save", follow=True),)

    def __init__(self, seeds: list[str], out_dir: str, **kwargs: Any) -> None:
        self.start_urls = seeds
        self.out_dir = Path(out_dir)
        super().__init__(**kwargs)

    def parse_start_url(self, response: Any) -> list[Any]:
        self.save(response)
        return []

    def save(self, response: Any) -> None:
        name = hashlib.sha1(response.url.encode()).hexdigest()
        (self.out_dir / name).write_bytes(response.body)


def main() -> None:
    seeds_file, hosts_file, out_dir, delay, concurrency = sys.argv[1:6]
    _HOSTS.update(json.loads(Path(hosts_file).read_text()))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    process = CrawlerProcess(
        settings={
            "ROBOTSTXT_OBEY": True,
            "CONCURRENT_REQUESTS": int(concurrency),
            "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
            "DOWNLOAD_DELAY": float(delay),
            "RANDOMIZE_DOWNLOAD_DELAY": False,
            "TWISTED_DNS_RESOLVER": f"{__name__}.MapResolver",
            "USER_AGENT": "polecat-bench-scrapy",
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
        }
    )
    process.crawl(BenchSpider, seeds=Path(seeds_file).read_text().split(), out_dir=out_dir)
    process.start()


if __name__ == "__main__":
    main()
