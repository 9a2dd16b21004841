"""Hypothesis fuzzing of the pure parts that read what others wrote: canonicalization, link extraction,
robots.txt, the WARC reader and the config loader raise only their documented errors, whatever the
input, and canonicalization is idempotent."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polecat.config import config_from_mapping, load_toml
from polecat.dedup.canon import Canonicalizer
from polecat.errors import ConfigError, CorruptRecord
from polecat.parse.charset import decode_html
from polecat.parse.guard import MAX_LINKS, MAX_TEXT_CHARS, bound_body, bound_html, bound_links
from polecat.parse.html import parse_html
from polecat.parse.robots import RobotsRules
from polecat.store import warc
from polecat.store.base import FetchRecord

# Text as hostile pages write it: any code point (lone surrogates and NUL included), and the characters
# that matter to URLs and HTML, often.
_NASTY = st.text(alphabet=st.characters(codec=None) | st.sampled_from(list("<>/\"'=&?#%:@[]\\\x00 \t\n")),
                 max_size=80)
_HREF = _NASTY | st.builds(lambda s, p: f"http://{s}:{p}/", _NASTY, st.integers(-(10**6), 10**6))
_BASE = st.sampled_from(["http://h.test/a/b", "https://xn--pple-43d.com/", "http://[::1]:8080/?q#f"])

canon = Canonicalizer()


@settings(max_examples=250, deadline=None)
@given(st.lists(_HREF, max_size=8), _BASE)
def test_canonicalize_links_never_raises_and_is_idempotent(hrefs: list[str], base: str) -> None:
    for url in canon.canonicalize_links(hrefs, base):
        assert url.startswith(("http://", "https://"))
        assert canon.canonicalize(url) == url


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000) | _NASTY.map(lambda s: s.encode("utf-8", "surrogatepass")),
       st.sampled_from([None, "utf-8", "shift_jis", "utf-16", "punycode", "x-bogus"]))
def test_link_extraction_never_raises_and_stays_bounded(body: bytes, charset: str | None) -> None:
    head, cut = bound_body(body)
    bounded = bound_html(decode_html(head, charset), cut=cut)
    parsed = parse_html(bounded.html, "http://h.test/")
    links, _ = bound_links(parsed.links)
    assert len(links) <= MAX_LINKS and len(parsed.text[:MAX_TEXT_CHARS]) <= MAX_TEXT_CHARS


_ROBOTS_LINES = ["User-agent: *", "User-agent: polecat", "Disallow: /*a*b$", "Allow: /", "Disallow: /%zz",
                 "Disallow: /\x00", "Crawl-delay: 1e999", "Crawl-delay: nan", "Sitemap: \ud800",
                 "Disallow: " + "*" * 50]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600) | st.lists(st.sampled_from(_ROBOTS_LINES), max_size=30).map("\n".join),
       st.lists(_NASTY, max_size=4))
def test_robots_parsing_and_matching_never_raise(text: str, paths: list[str]) -> None:
    rules = RobotsRules(text, "polecat/1.0")
    for path in paths:
        assert isinstance(rules.allowed("http://h.test/" + path), bool)


def _record() -> bytes:
    rec = FetchRecord("http://h.test/", 1.0, 200, (("Content-Type", "text/html"),), b"\0" * 32, 3)
    return warc.encode_response(rec, b"abc", b"\1" * 32)


def _flip(data: bytes, at: int, mask: int) -> bytes:
    return data[:at] + bytes([data[at] ^ mask]) + data[at + 1:] if at < len(data) else data[: at // 4]


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=400)
       | st.builds(_flip, st.just(_record()), st.integers(0, 400), st.integers(1, 255)))
def test_warc_reader_raises_only_corrupt_record(data: bytes) -> None:
    with contextlib.suppress(CorruptRecord):
        warc.decode(data)


_SCALAR = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
_VALUE = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
_KEYS = ["seeds", "rate", "mode", "nameservers", "max_bytes", "concurrency", "user_agent", "bogus",
         "tracking_params", "segment_bytes", "minhash_distance", "simhash_distance", "block", "throttle"]
_SECTION = st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=8), _VALUE, max_size=4)
_SECTIONS = ["scope", "politeness", "fetch", "dns", "robots", "dedup", "store", "frontier", "data_dir", "x"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_SECTIONS), _SECTION | _VALUE, max_size=4))
def test_config_loader_raises_only_config_error(data: dict[str, Any]) -> None:
    with contextlib.suppress(ConfigError):
        config_from_mapping(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")) | st.binary(max_size=200))
def test_toml_loader_raises_only_config_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(data)
    with contextlib.suppress(ConfigError):
        config_from_mapping(load_toml(path))
