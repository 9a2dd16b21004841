"""Refresh end to end: pages that change on a schedule the test controls, on the loopback test web."""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from polecat import Crawler
from polecat.commands.node import node_config
from polecat.frontier.status import read_status
from polecat.service.metrics import LoopLag, NodeMetrics
from polecat.store.segstore import open_store
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.crawl_helpers import crawl_config, page_requests

FAST = {"min_interval": 0.5, "max_interval": 8.0, "default_interval": 1.0, "min_visits": 1,
        "scan_interval": 0.25}


@pytest.mark.slow
def test_changing_page_is_refetched_far_more_often_than_static_ones(test_web: TestWebFactory,
                                                                    tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=6, seed=3, robots=("allow",)))
    root = web.seeds[0]
    changing = web.change_every("h01.test", "/", 2.0)
    assert changing == root
    cfg = crawl_config(web, tmp_path / "data", politeness={"rate": 20.0},
                       refresh={"enabled": True, **FAST})

    async def main() -> None:
        async with Crawler(cfg) as crawler:
            run = asyncio.ensure_future(crawler.run(serve=True))
            await asyncio.sleep(14.0)
            crawler.stop()
            stats = await run
            scrape = generate_latest(NodeMetrics(crawler, LoopLag()).registry).decode()
        assert "polecat_freshness_slo_ratio " in scrape and 'polecat_freshness_urls{state="due"} ' in scrape
        assert stats.politeness_violations == 0
        assert stats.refresh_queued > 0
        assert stats.freshness is not None and stats.freshness[0] == 6

    asyncio.run(main())
    counts = Counter(page_requests(web))
    static = [n for url, n in counts.items() if url != changing]
    assert len(static) == 5
    # The changing page is re-fetched about every change (2 s, floor 0.5 s); static ones back off to 8 s.
    assert counts[changing] >= 2 * max(static), counts
    assert min(static) >= 2  # static pages are still revisited (to keep their estimate), less often
    # Static pages answer their re-fetches 304 (conditional GET): their bodies were stored once.
    not_modified = Counter(r.url for r in web.log if r.status == 304)
    assert sum(not_modified.values()) >= sum(n - 1 for n in static)
    # (The changing page may answer 304 too, when re-fetched within one 2 s version.)
    store = open_store(tmp_path / "data" / "store", cfg.store, read_only=True)
    try:
        bodies = Counter(r.url for r in store.records() if r.kind == "response" and r.size)
        revisits = Counter(r.url for r in store.records() if r.kind == "revisit")
    finally:
        store.close()
    assert all(bodies[url] == 1 for url in counts if url != changing)
    assert bodies[changing] >= 3
    assert sum(revisits.values()) >= sum(not_modified.values())


def stored_pages(summary: str) -> int:
    found = re.search(r"store (\d+) bodies", summary)
    assert found is not None, summary
    return int(found.group(1))


def polecat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "polecat", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_crawl_refresh_refetches_what_is_due_then_exits_and_304s_store_nothing_new(
        test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=5, seed=4, robots=("allow",)))
    data = tmp_path / "data"
    common = ["--data", str(data), "--dns-server", web.dns_address, "--allow-private", "--rate", "20", "-q"]
    first = polecat("crawl", *web.seeds, *common, "--refresh-max", "8s", "--refresh-min", "1s")
    finished = time.monotonic()
    assert first.returncode == 0, first.stderr
    fetched = Counter(page_requests(web))
    assert len(fetched) == 5 and set(fetched.values()) == {1}
    status = read_status(data / "frontier")
    assert status.freshness.tracked == 5 and status.revisited == 0
    # A one-off crawl so far: no freshness figures, which would describe a refresh that never ran.
    one_off = polecat("status", str(data))
    assert one_off.returncode == 0 and "freshness" not in one_off.stdout and "refresh" not in one_off.stdout

    # Nothing is due yet (due 8 s after each fetch): a refresh run fetches nothing and says so.
    started = time.monotonic()
    early = polecat("crawl", *common, "--refresh")
    assert early.returncode == 0, early.stderr
    if started - finished < 7.0:  # a very loaded machine may start it too late to tell
        assert Counter(page_requests(web)) == fetched
        assert "0 due now" in early.stdout and "0 queued again" in early.stdout

    time.sleep(max(0.0, finished + 8.5 - time.monotonic()))
    web.clear_log()
    again = polecat("crawl", *common, "--refresh")
    assert again.returncode == 0, again.stderr
    assert "refresh: 5 URLs scheduled" in again.stdout and "5 queued again" in again.stdout
    assert stored_pages(again.stdout) == stored_pages(early.stdout)  # five 304s: nothing new stored
    requests = [r for r in web.log if r.target != "/robots.txt"]
    assert sorted(r.url for r in requests) == sorted(fetched)
    assert {r.status for r in requests} == {304}
    # A plain crawl of the same data dir (no --refresh) re-fetches nothing.
    web.clear_log()
    plain = polecat("crawl", *common, "--refresh-max", "1s", "--refresh-min", "0.5s")
    assert page_requests(web) == []
    assert plain.returncode in (0, 3)
    out = polecat("status", str(data))
    assert "refresh: 5 URLs scheduled" in out.stdout
    assert read_status(data / "frontier").revisited == 5


def _urlset(*locs: str) -> bytes:
    return ("<urlset>" + "".join(f"<url><loc>{u}</loc><changefreq>daily</changefreq></url>" for u in locs)
            + "</urlset>").encode()


def test_sitemaps_from_robots_discover_pages_and_hostile_ones_are_refused(test_web: TestWebFactory,
                                                                          tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=5, seed=5, robots=("allow",)))
    base = web.base_url("h01.test")
    html = {"Content-Type": "text/html"}
    for name in ("hidden-1", "hidden-2"):
        web.respond("h01.test", f"/{name}.html", 200, headers=html,
                    body=f"<html><body><p>only in the sitemap: {name}</p></body></html>".encode())
    xml = {"Content-Type": "application/xml"}
    web.respond("h01.test", "/sitemap.xml", 200, headers=xml,
                body=_urlset(f"{base}/hidden-1.html", f"{base}/hidden-2.html", f"{base}/"))
    # A gzip bomb: 256 MiB of XML whitespace in about 250 kB.
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = comp.compress(b"<urlset>") + b"".join(comp.compress(b" " * (1 << 20)) for _ in range(256))
    web.respond("h01.test", "/bomb.xml.gz", 200, headers={"Content-Type": "application/gzip"},
                body=bomb + comp.flush())
    # An endless chain of sitemap indexes: each names the next.
    for n in range(12):
        web.respond("h01.test", f"/index-{n}.xml", 200, headers=xml,
                    body=f"<sitemapindex><sitemap><loc>{base}/index-{n + 1}.xml</loc></sitemap>"
                         "</sitemapindex>".encode())
    web.set_robots("h01.test", body="User-agent: *\nDisallow:\n" + "".join(
        f"Sitemap: {base}/{name}\n" for name in ("sitemap.xml", "bomb.xml.gz", "index-0.xml")))
    cfg = crawl_config(web, tmp_path / "data", politeness={"rate": 10.0})

    async def main() -> None:
        async with Crawler(cfg) as crawler:
            stats = await crawler.run()
        errors = dict(stats.errors)
        assert errors.get("sitemap:too_large") == 1
        assert errors.get("sitemap:too_deep") == 1
        assert stats.politeness_violations == 0

    asyncio.run(main())
    requested = Counter(r.target for r in web.log)
    assert requested["/hidden-1.html"] == requested["/hidden-2.html"] == 1
    assert requested["/sitemap.xml"] == requested["/bomb.xml.gz"] == 1
    # Depth 3 below the root: index-0 .. index-3 fetched, index-4 refused.
    assert [requested[f"/index-{n}.xml"] for n in range(6)] == [1, 1, 1, 1, 0, 0]
    # Sitemap fetches are requests of their host: spaced like every other request, measured at the server.
    assert politeness_violations(web.log, web.min_intervals(cfg.politeness.rate)) == []


def test_a_node_refreshes_unless_its_config_says_not(tmp_path: Path) -> None:
    args = argparse.Namespace(config=None, listen=None, data=tmp_path / "d")
    assert node_config(args).refresh.enabled
    off = tmp_path / "node.toml"
    off.write_text("[refresh]\nenabled = false\nmin_interval = 600.0\n")
    cfg = node_config(argparse.Namespace(config=off, listen=None, data=None))
    assert not cfg.refresh.enabled and cfg.refresh.min_interval == 600.0


def test_guess_sitemap_finds_sitemap_xml_without_a_robots_line(test_web: TestWebFactory,
                                                               tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=3, seed=6, robots=("allow",)))
    base = web.base_url("h01.test")
    web.respond("h01.test", "/only-in-sitemap.html", 200, headers={"Content-Type": "text/html"},
                body=b"<html><body><p>listed in /sitemap.xml only</p></body></html>")
    web.respond("h01.test", "/sitemap.xml", 200, headers={"Content-Type": "application/xml"},
                body=_urlset(f"{base}/only-in-sitemap.html"))

    async def crawl(guess: bool, data: Path) -> None:
        cfg = crawl_config(web, data, politeness={"rate": 10.0}, refresh={"guess_sitemap": guess})
        async with Crawler(cfg) as crawler:
            await crawler.run()

    asyncio.run(crawl(False, tmp_path / "off"))
    assert Counter(r.target for r in web.log)["/sitemap.xml"] == 0  # an option, off by default
    asyncio.run(crawl(True, tmp_path / "on"))
    requested = Counter(r.target for r in web.log)
    assert requested["/sitemap.xml"] == requested["/only-in-sitemap.html"] == 1
