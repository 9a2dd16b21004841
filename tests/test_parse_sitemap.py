"""Sitemap parsing (polecat/parse/sitemap.py): fields, gzip, caps and hostile inputs."""

from __future__ import annotations

import gzip
import zlib

import pytest

from polecat.parse.sitemap import (
    SitemapResult,
    SitemapWalk,
    parse_lastmod,
    parse_sitemap,
)

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*entries: str) -> bytes:
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {NS}>{"".join(entries)}</urlset>'.encode()


def url(loc: str, extra: str = "") -> str:
    return f"<url><loc>{loc}</loc>{extra}</url>"


def index(*locs: str) -> bytes:
    body = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f'<sitemapindex {NS}>{body}</sitemapindex>'.encode()


def test_urlset_fields() -> None:
    r = parse_sitemap(urlset(
        url("http://a.test/x", "<lastmod>2024-01-02</lastmod><changefreq>Daily</changefreq>"
                               "<priority>0.8</priority>"),
        url("http://a.test/y",
            "<lastmod>garbage</lastmod><changefreq>often</changefreq><priority>7</priority>"),
        url("ftp://a.test/z"), url("  "),
    ))
    assert r.error is None and r.kind == "urlset"
    assert [u.loc for u in r.urls] == ["http://a.test/x", "http://a.test/y"]
    assert r.urls[0].lastmod == parse_lastmod("2024-01-02T00:00:00Z")
    assert (r.urls[0].changefreq, r.urls[0].priority) == ("daily", 0.8)
    assert (r.urls[1].lastmod, r.urls[1].changefreq, r.urls[1].priority) == (None, None, None)
    assert r.skipped == 2


def test_lastmod_forms() -> None:
    assert parse_lastmod("2024") == parse_lastmod("2024-01-01")
    assert parse_lastmod("2024-03") == parse_lastmod("2024-03-01T00:00Z")
    assert parse_lastmod("2024-03-01T10:00:00+01:00") == parse_lastmod("2024-03-01T09:00:00Z")
    whole = parse_lastmod("2024-03-01T09:00:00Z")
    assert whole is not None and parse_lastmod("2024-03-01T09:00:00.5Z") == pytest.approx(whole + 0.5)
    assert parse_lastmod("yesterday") is None


def test_index_and_unprefixed_namespace_and_cdata() -> None:
    r = parse_sitemap(index("http://a.test/s1.xml", "http://a.test/s2.xml.gz"))
    assert (r.kind, r.urls) == ("sitemapindex", [])
    assert r.sitemaps == ["http://a.test/s1.xml", "http://a.test/s2.xml.gz"]
    r = parse_sitemap(b"<urlset><url><loc><![CDATA[http://a.test/c]]></loc></url></urlset>")
    assert [u.loc for u in r.urls] == ["http://a.test/c"]


def test_gzip_body_fed_in_small_chunks() -> None:
    body = urlset(*(url(f"http://a.test/{i}") for i in range(2000)))
    r = parse_sitemap(gzip.compress(body), chunk=7)
    assert r.error is None and len(r.urls) == 2000


def test_gzip_bomb_stops_at_the_cap_without_inflating_it() -> None:
    # 1 GiB of zeros compresses to about 1 MB; the parser stops after the cap (here 1 MiB).
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = comp.compress(b"<urlset>") + b"".join(comp.compress(b" " * (1 << 20)) for _ in range(1024))
    bomb += comp.flush()
    assert len(bomb) < 2 * 1024 * 1024
    r = parse_sitemap(bomb, max_bytes=1024 * 1024)
    assert r.error == "too_large"


def test_plain_body_over_the_cap_is_too_large() -> None:
    body = urlset(*(url(f"http://a.test/{i}") for i in range(1000)))
    assert parse_sitemap(body, max_bytes=len(body) - 1).error == "too_large"
    assert parse_sitemap(body, max_bytes=len(body)).error is None


@pytest.mark.parametrize("doc", [
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]>'
    b"<urlset><url><loc>http://a.test/&lol2;</loc></url></urlset>",
    b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]><urlset>&x;</urlset>',
    b'<?xml version="1.0"?><!DOCTYPE urlset SYSTEM "http://a.test/evil.dtd"><urlset/>',
], ids=["billion-laughs", "external-entity", "external-dtd"])
def test_entities_and_doctype_refused(doc: bytes) -> None:
    r = parse_sitemap(doc)
    assert r.error == "entities" and r.urls == []


def test_too_many_entries() -> None:
    body = urlset(*(url(f"http://a.test/{i}") for i in range(11)))
    r = parse_sitemap(body, max_entries=10)
    assert r.error == "too_many_entries" and len(r.urls) == 10


@pytest.mark.parametrize(("body", "reason"), [
    (b"<html><body>not a sitemap</body></html>", "not_a_sitemap"),
    (b"", "malformed"),
    (b"<urlset><url><loc>http://a.test/</loc></url>", "malformed"),
    (b"<urlset><url></urlset>", "malformed"),
    (gzip.compress(urlset(url("http://a.test/")))[:-12], "bad_gzip"),
    (b"\x1f\x8bnot gzip at all", "bad_gzip"),
])
def test_bad_documents_named(body: bytes, reason: str) -> None:
    assert parse_sitemap(body).error == reason


def test_long_text_is_not_kept() -> None:
    r = parse_sitemap(urlset(url("http://a.test/" + "a" * 100_000), url("http://a.test/ok")))
    assert [u.loc for u in r.urls] == ["http://a.test/ok"] and r.skipped == 1


def test_walk_depth_repeats_and_file_budget() -> None:
    walk = SitemapWalk(max_depth=2, max_files=5)
    assert walk.add_root("http://a.test/sitemap.xml")
    assert not walk.add_root("http://a.test/sitemap.xml")
    # An index pointing at a chain of indexes: depth 1, 2 followed, depth 3 refused.
    level1 = walk.children("http://a.test/sitemap.xml", parse_sitemap(index("http://a.test/i1.xml")))
    level2 = walk.children(level1[0], parse_sitemap(index("http://a.test/i2.xml", "http://a.test/sitemap.xml")))
    assert (level1, level2) == (["http://a.test/i1.xml"], ["http://a.test/i2.xml"])
    assert walk.children(level2[0], parse_sitemap(index("http://a.test/i3.xml"))) == []
    assert walk.errors == {"repeated": 2, "too_deep": 1}
    # A wide index stops at the per-walk file budget.
    wide = walk.children(level1[0], parse_sitemap(index(*(f"http://a.test/w{i}.xml" for i in range(10)))))
    assert len(wide) == 2 and walk.errors["too_many_files"] == 8
    walk.children("http://a.test/w0.xml", SitemapResult(error="too_large"))
    assert walk.errors["too_large"] == 1
