"""Page requisites end to end (issue 34): a loopback doc site whose pages use a stylesheet that imports
another, a web font, images in ``src``, ``srcset``, CSS ``url()`` and ``style``, a script and a CDN host out
of scope (polecat/testing/requisite_web.py). Crawled with ``scope.requisites``, every requisite is fetched
once (counted by the server), stored with its content type and exported; pywb replays each byte for byte;
and, with Chromium, a replayed page loads its stylesheets and images."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import warcio.archiveiterator

from polecat.cluster.ring import Ring
from polecat.commands.crawl import build_settings
from polecat.commands.main import make_parser
from polecat.config import Config, StoreConfig, config_from_mapping
from polecat.dedup.canon import Canonicalizer
from polecat.errors import ConfigError
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.store.base import FetchRecord
from polecat.store.segstore import open_store
from polecat.testing.browser import Browser, find_chromium
from polecat.testing.pywb import get, in_replay_frame, pywb_serving, stamp_now
from polecat.testing.requisite_web import (
    CDN,
    HEADING_RGB,
    NOTE_RGB,
    SITE,
    TEXT_RGB,
    Resource,
    png,
    requisite_site,
    serve_site,
)
from polecat.testing.web import TestWeb
from tests.conftest import TestWebFactory
from tests.pywb_helpers import NEEDS_PYWB, pywb_bin
from tests.test_crawl_dedup import crawl, crawl_config

CHROMIUM = find_chromium()
RATE = 50.0
CANON = Canonicalizer()


def _canon(url: str) -> str:
    got = CANON.canonicalize(url)
    assert got is not None
    return got


def _crawl(web: TestWeb, data: Path, site: list[Resource], **scope: Any) -> Config:
    seed = next(r for r in site if r.path == "/index.html").url(web.port)
    cfg = crawl_config(web, data, scope={"seeds": [seed], "mode": "host", **scope},
                       politeness={"rate": RATE})
    stats, _ = asyncio.run(crawl(cfg))
    assert stats.queued == 0
    return cfg


def test_every_requisite_is_fetched_once_and_stored_with_its_type(test_web: TestWebFactory,
                                                                  tmp_path: Path) -> None:
    web = test_web()
    site = requisite_site(web.port)
    serve_site(web, site)
    cfg = _crawl(web, tmp_path / "data", site, requisites=True)
    counts = web.fetch_counts()
    wanted = {_canon(r.url(web.port)) for r in site}
    assert {url: counts[url] for url in wanted} == dict.fromkeys(wanted, 1)
    commented = _canon(f"http://{SITE}:{web.port}/img/commented.png")
    cdn_robots = _canon(f"http://{CDN}:{web.port}/robots.txt")
    assert counts[commented] == 0 and counts[cdn_robots] == 1  # robots.txt is asked on the CDN host too
    store = open_store(cfg.data_dir / "store", cfg.store, read_only=True)
    try:
        records = {rec.url: rec for rec in store.records()}
        for r in site:
            rec = records[_canon(r.url(web.port))]
            assert rec.header("content-type") == r.content_type and store.get(rec.own_hash) == r.body
    finally:
        store.close()


def test_with_workers_a_requisite_another_worker_owns_is_fetched_there(test_web: TestWebFactory,
                                                                        tmp_path: Path) -> None:
    """The CDN's host belongs to the other worker: the page's worker hands its requisites over marked as
    requisites (polecat/cluster/batch.py), and the owner fetches them though its scope holds no such host."""
    web = test_web()
    ring = Ring(["w0", "w1"])

    def owner(host: str) -> str:
        return ring.owner(slice_of(host_key(_canon(f"http://{host}:{web.port}/"))))

    cdn = next(name for name in (f"cdn{k}.test" for k in range(64)) if owner(name) != owner(SITE))
    site = requisite_site(web.port, cdn)
    serve_site(web, site)
    run = subprocess.run([sys.executable, "-m", "polecat", "crawl", site[0].url(web.port), "--workers", "2",
                          "--requisites", "--data", str(tmp_path / "data"), "--rate", str(RATE),
                          "--dns-server", web.dns_address, "--allow-private"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    counts = web.fetch_counts()
    wanted = {_canon(r.url(web.port)) for r in site}
    assert {url: counts[url] for url in wanted} == dict.fromkeys(wanted, 1)


def test_without_requisites_only_pages_are_fetched(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web()
    site = requisite_site(web.port)
    serve_site(web, site)
    _crawl(web, tmp_path / "data", site)
    fetched = {url for url, n in web.fetch_counts().items() if n and not url.endswith("/robots.txt")}
    assert fetched == {_canon(r.url(web.port)) for r in site if not r.requisite}


HTML = {"Content-Type": "text/html"}


def _records_by_name(data: Path) -> dict[str, FetchRecord]:
    """The store's fetch records by the last segment of their URL's path."""
    store = open_store(data / "store", StoreConfig(), read_only=True)
    try:
        return {rec.url.rsplit("/", 1)[-1]: rec for rec in store.records()}
    finally:
        store.close()


def _crawl_page(web: TestWeb, data: Path, body: str, **scope: Any) -> Counter[str]:
    """Crawl, with requisites, the one page ``body`` at /index.html of the site: the server's counts."""
    web.respond(SITE, "/index.html", 200, headers=HTML, body=body.encode())
    seed = f"http://{SITE}:{web.port}/index.html"
    cfg = crawl_config(web, data, scope={"seeds": [seed], "requisites": True, **scope},
                       politeness={"rate": RATE})
    asyncio.run(crawl(cfg))
    return web.fetch_counts()


def test_a_requisite_that_answers_html_is_stored_not_followed(test_web: TestWebFactory,
                                                              tmp_path: Path) -> None:
    web = test_web()
    web.add_host(SITE)
    trap = b'<html><body><a href="/followed.html">y</a><img src="/deeper.png"></body></html>'
    web.respond(SITE, "/not-an-image", 200, headers=HTML, body=trap)
    web.respond(SITE, "/linked.html", 200, headers=HTML, body=b"<html><body>linked</body></html>")
    counts = _crawl_page(web, tmp_path / "data",
                         '<html><body><img src="/not-an-image"><a href="/linked.html">x</a></body></html>')
    base = f"http://{SITE}:{web.port}"
    assert counts[_canon(base + "/not-an-image")] == 1 and counts[_canon(base + "/linked.html")] == 1
    assert counts[_canon(base + "/followed.html")] == 0 and counts[_canon(base + "/deeper.png")] == 0


def test_a_stylesheet_that_imports_ever_deeper_copies_of_itself_ends(test_web: TestWebFactory,
                                                                     tmp_path: Path) -> None:
    """A hostile CDN answers every path with a stylesheet importing one a level deeper (an endless chain of
    new URLs): the trap rules bind requisites as links (a segment repeated more than twice is refused)."""
    web = test_web()
    for host in (SITE, CDN):
        web.add_host(host)
    web.respond(CDN, "*", 200, headers={"Content-Type": "text/css"}, body=b'@import "x/s.css"; a {}')
    page = f'<html><head><link rel=stylesheet href="http://{CDN}:{web.port}/s.css"></head></html>'
    counts = _crawl_page(web, tmp_path / "data", page)
    chain = sorted(url for url, n in counts.items() if CDN in url and not url.endswith("/robots.txt") and n)
    assert 2 <= len(chain) <= 4 and all(counts[url] == 1 for url in chain), chain


def test_a_requisite_past_its_size_cap_is_stored_cut(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web()
    web.add_host(SITE)
    big = png(400, 300, (9, 9, 9)) + bytes(64 * 1024)  # past the cap whatever zlib makes of the pixels
    web.respond(SITE, "/big.png", 200, headers={"Content-Type": "image/png"}, body=big)
    filler = "<p>" + "words " * 20_000 + "</p>"  # the page itself is larger than the cap: not cut
    _crawl_page(web, tmp_path / "data", f'<html><body><img src="/big.png">{filler}</body></html>',
                max_requisite_bytes=8192)
    records = _records_by_name(tmp_path / "data")
    assert (records["big.png"].size, records["big.png"].truncated) == (8192, True)
    assert records["index.html"].size > 8192 and not records["index.html"].truncated


REPLAYED_PAGE = in_replay_frame("""
  const style = sel => win.getComputedStyle(doc.querySelector(sel));
  return {h1: style("h1").color, p: style("p").color, note: style(".note").color,
          banner: style(".banner").backgroundImage,
          images: Object.fromEntries([...doc.images].map(i => [i.id, i.naturalWidth])),
          script: doc.documentElement.dataset.script || ""};""")


@NEEDS_PYWB
@pytest.mark.slow
def test_requisites_replay_in_pywb(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web()
    site = requisite_site(web.port)
    serve_site(web, site)
    data = tmp_path / "data"
    _crawl(web, data, site, requisites=True)
    warc = tmp_path / "crawl.warc.gz"
    subprocess.run([sys.executable, "-m", "polecat", "store", "export", str(data), "--warc", str(warc)],
                   check=True, capture_output=True, timeout=120)
    with warc.open("rb") as f:
        types = {rec.rec_headers.get_header("WARC-Target-URI"): rec.http_headers.get_header("Content-Type")
                 for rec in warcio.archiveiterator.ArchiveIterator(f) if rec.rec_type == "response"}
    assert all(types[_canon(r.url(web.port))] == r.content_type for r in site)

    with pywb_serving(pywb_bin(), warc, tmp_path / "pywb") as base:
        stamp = stamp_now()
        wrong = [r.path for r in site if get(f"{base}{stamp}id_/{r.url(web.port)}") != r.body]
        assert wrong == [], f"{len(wrong)} of {len(site)} resources replay other bytes: {wrong}"
        if CHROMIUM is None:  # the replay's bytes are checked; what a browser shows needs one
            assert not os.environ.get("POLECAT_REQUIRE_BROWSER"), "a browser is required: no chromium"
            return
        page = f"{base}{stamp}/{site[0].url(web.port)}"
        shown, image = asyncio.run(_show(page))
    (tmp_path / "replayed.png").write_bytes(image)
    if os.environ.get("POLECAT_SCREENSHOT"):  # for a person to look at
        Path(os.environ["POLECAT_SCREENSHOT"]).write_bytes(image)
    rgb = "rgb({}, {}, {})".format
    assert shown["h1"] == rgb(*HEADING_RGB) and shown["p"] == rgb(*TEXT_RGB), shown  # CSS and its @import
    assert shown["note"] == rgb(*NOTE_RGB), shown  # the CDN's stylesheet
    assert "banner.png" in shown["banner"] and shown["script"] == "ran", shown
    assert shown["images"] == {"logo": 16, "own": 5, "cdn": 12}, shown


async def _show(url: str) -> tuple[dict[str, Any], bytes]:
    """What Chromium shows of the replayed page, and its screenshot."""
    assert CHROMIUM is not None
    async with Browser(CHROMIUM) as browser:
        await browser.open(url)
        shown: dict[str, Any] = await browser.wait_for(REPLAYED_PAGE, within=60.0)
        return shown, await browser.screenshot()


def test_a_moved_requisite_is_followed_off_scope(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web()
    for host in (SITE, CDN):
        web.add_host(host)
    cdn = f"http://{CDN}:{web.port}"
    web.redirect(CDN, "/old.png", f"{cdn}/new.png")
    web.respond(CDN, "/new.png", 200, headers={"Content-Type": "image/png"}, body=png(2, 2, (1, 2, 3)))
    counts = _crawl_page(web, tmp_path / "data", f'<html><body><img src="{cdn}/old.png"></body></html>')
    assert counts[_canon(cdn + "/old.png")] == 1 and counts[_canon(cdn + "/new.png")] == 1


def test_a_requisite_of_any_type_is_stored_and_a_link_of_that_type_is_not(test_web: TestWebFactory,
                                                                           tmp_path: Path) -> None:
    web = test_web()
    web.add_host(SITE)
    octets = {"Content-Type": "application/octet-stream"}
    web.respond(SITE, "/font.woff2", 200, headers=octets, body=b"wOF2 font bytes")  # as many servers do
    web.respond(SITE, "/data.bin", 200, headers=octets, body=b"a download")
    page = '<html><head><link rel=preload href=/font.woff2 as=font></head><a href=/data.bin>d</a></html>'
    _crawl_page(web, tmp_path / "data", page)
    records = _records_by_name(tmp_path / "data")
    assert records["font.woff2"].size == len(b"wOF2 font bytes")
    assert records["data.bin"].size == 0  # a link of a type not stored: recorded skipped


def test_robots_txt_binds_requisites(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web()
    for host in (SITE, CDN):
        web.add_host(host)
    cdn = f"http://{CDN}:{web.port}"
    web.set_robots(CDN, body="User-agent: *\nDisallow: /private/\n")
    for path in ("/ok.png", "/private/no.png"):
        web.respond(CDN, path, 200, headers={"Content-Type": "image/png"}, body=png(1, 1, (0, 0, 0)))
    page = f'<html><body><img src="{cdn}/ok.png"><img src="{cdn}/private/no.png"></body></html>'
    counts = _crawl_page(web, tmp_path / "data", page)
    assert counts[_canon(cdn + "/ok.png")] == 1 and counts[_canon(cdn + "/private/no.png")] == 0


@pytest.mark.parametrize(("flags", "on"), [
    ([], False), (["--requisites"], True), (["--archive"], True), (["--archive", "--no-requisites"], False),
])
def test_requisites_flag_and_archive_preset(tmp_path: Path, flags: list[str], on: bool) -> None:
    args = make_parser().parse_args(["crawl", "http://docs.test/", "--data", str(tmp_path / "d"), *flags])
    assert build_settings(args).config.scope.requisites is on


def test_requisite_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"scope\.max_requisites_per_page: must be > 0"):
        config_from_mapping({"scope": {"max_requisites_per_page": 0}})
    with pytest.raises(ConfigError, match=r"scope\.requisite_hosts"):
        config_from_mapping({"scope": {"requisite_hosts": "cdn"}})
