"""A mixed crawl at a lowered TLS cap, on loopback (polecat/frontier/leasing.py rule 11, polecat/fetch/pool.py
rules 12 and 15): half the hosts of a :class:`BreadthWeb` are served over HTTPS (a certificate from a
local CA, trustme), half over plain HTTP; with two TLS connections at most, the https hosts go a couple at
a time while the plain-HTTP hosts, which need no TLS connection, are crawled beside them. Politeness and
the connections are judged at the server; the order is judged by what the server had seen when the last
plain-HTTP host was complete, not by time."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest

from polecat import Crawler
from polecat.config import config_from_mapping
from polecat.fetch import pool as pool_module
from polecat.testing.breadth import BreadthStats, BreadthWeb

trustme = pytest.importorskip("trustme")

pytestmark = pytest.mark.timeout(120)

HOSTS = 40
"""Half of them https (even numbers), half plain HTTP."""
CAP = 2
"""TLS connections the pool holds at most (``max_tls``: pool rule 12's ``TLS_OPEN``, lowered)."""
RATE = 10.0


async def crawl_watching(web: BreadthWeb, tmp_path: Path) -> BreadthStats | None:
    """Crawls the web to the end (its CA's certificate in ``tmp_path / "ca.pem"``); answers what the server
    had seen when it first saw every plain-HTTP host complete (None: it never did), sampled as the crawl
    runs."""
    cfg = config_from_mapping({
        "data_dir": str(tmp_path / "data"),
        "scope": {"seeds": web.seeds()},
        "politeness": {"rate": RATE},
        "fetch": {"concurrency": CAP, "ca_bundle": str(tmp_path / "ca.pem")},
        "refresh": {"guess_sitemap": False},
        "dns": {"nameservers": [web.dns.address], "allow_private": True}})
    seen: BreadthStats | None = None
    async with Crawler(cfg) as crawler:
        run = asyncio.create_task(crawler.run())
        while not run.done():
            stats = web.stats()
            if seen is None and stats.plain_complete_hosts == HOSTS // 2:
                seen = stats
            await asyncio.sleep(0.01)
        await run
    return seen


def server_context(ca: Any) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("*.breadth.test").configure_cert(context)
    return context


async def test_at_the_tls_cap_the_plain_http_hosts_go_on(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "TLS_OPEN", CAP)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    with BreadthWeb(HOSTS, min_interval=1 / RATE, tls=server_context(ca), mixed=True) as web:
        seen = await crawl_watching(web, tmp_path)
        stats = web.stats()
    assert stats.complete_hosts == HOSTS and stats.violations == 0
    assert stats.most_tls_open <= CAP
    assert stats.tls_handshakes == HOSTS // 2  # one a host: no host in rotation lost its connection
    assert seen is not None
    # Holding every cold host at the cap, the plain-HTTP hosts went in the https hosts' turn: the last
    # one was complete with most https hosts complete too. Now they are crawled beside the two https
    # hosts in rotation.
    assert seen.complete_hosts - seen.plain_complete_hosts <= HOSTS // 4, seen
