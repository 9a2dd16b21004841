"""Hostile page bodies and robots.txt files, for tests and the worst-case benchmark of the per-page stages.

Each generator takes a target size in bytes and returns a body of about that size (never more) written
to hit one known worst case of a stage: see :mod:`polecat.parse.guard` for the parser's, and
:mod:`polecat.parse.robots_match` for robots matching. ``PAGES`` and ``ROBOTS`` name them all.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["PAGES", "ROBOTS", "ordinary_page"]


def _fill(unit: bytes, size: int, head: bytes = b"") -> bytes:
    return head + unit * max(0, (size - len(head)) // len(unit))


def nested(size: int) -> bytes:
    """``<div>`` x n: the parser walks the open elements at every start tag (O(n^2) unbounded)."""
    return _fill(b"<div>", size)


def stray_ends(size: int) -> bytes:
    """Unclosed ``<span>`` then stray end tags: every ``</x>`` walks the whole stack."""
    half = size // 2
    return _fill(b"<span>", half) + _fill(b"</x>", size - half)


def deep_then_flat(size: int) -> bytes:
    """Nesting just under the guard's cap, then stray end tags: the worst case the guard lets through."""
    return _fill(b"</x>", size, b"<span>" * 250)


def attributes(size: int) -> bytes:
    """One element with as many distinct attributes as fit (O(n^2) in the parser unbounded)."""
    n = max(1, size // 8)
    attrs = " ".join(f"a{i:x}" for i in range(n)).encode()
    return (b"<div " + attrs)[: size - 1] + b">"


def attribute_tags(size: int) -> bytes:
    """Many elements with 250 distinct attributes each (under the per-element cap)."""
    tag = b"<i " + " ".join(f"a{i:x}" for i in range(250)).encode() + b"></i>"
    return _fill(tag, size)


def tag_starts(size: int) -> bytes:
    """``<a`` x 224 then ``>``: every "<" may open a tag of many attributes, and the guard's prefilter
    (:data:`polecat.parse.guard._LONG_TAG`) reads up to 448 characters past each to see that none does."""
    return _fill(b"<a" * 224 + b">", size)


def nul_bytes(size: int) -> bytes:
    """Nothing but NUL bytes."""
    return b"\0" * size


def _numbered(template: bytes, size: int, head: bytes = b"") -> bytes:
    """``head`` then ``template % i`` for i = 0, 1, ... while the result stays under ``size``."""
    out = bytearray(head)
    i = 0
    while len(out) + len(template) + 16 < size:
        out += template % i
        i += 1
    return bytes(out)


def links(size: int) -> bytes:
    """As many distinct links as fit."""
    return _numbered(b'<a href="/p%x">x</a>', size)


def long_links(size: int) -> bytes:
    """Links of 100 KB each, all distinct."""
    out = bytearray()
    i = 0
    while len(out) + 100_030 < size:
        out += b'<a href="/%x' % i + b"y" * 100_000 + b'">x</a>'
        i += 1
    return bytes(out)


def words(size: int) -> bytes:
    """Distinct words in one paragraph: the fingerprint's input at its largest."""
    return _numbered(b"w%x ", size, b"<p>")


def ordinary_page(size: int) -> bytes:
    """A plain page of paragraphs and links, for the ordinary case beside the hostile ones."""
    block = b'<div class="c"><p>Some words of an ordinary page, and a <a href="/next">link</a>.</p></div>\n'
    return _fill(block, size, b"<!doctype html><html><head><title>t</title></head><body>")


PAGES: dict[str, Callable[[int], bytes]] = {
    "nested": nested,
    "stray_ends": stray_ends,
    "deep_then_flat": deep_then_flat,
    "attributes": attributes,
    "attribute_tags": attribute_tags,
    "tag_starts": tag_starts,
    "nul_bytes": nul_bytes,
    "links": links,
    "long_links": long_links,
    "words": words,
    "ordinary": ordinary_page,
}


def wildcard_rules(size: int) -> bytes:
    """``Disallow: /*q<n>*z`` rules up to ``size``: none matches, all must be tried (the slow case)."""
    return _numbered(b"Disallow: /*q%d*z\n", size, b"User-agent: *\n")


def literal_rules(size: int) -> bytes:
    """Literal ``Disallow`` rules up to ``size``."""
    return _numbered(b"Disallow: /a/%d/b\n", size, b"User-agent: *\n")


ROBOTS: dict[str, Callable[[int], bytes]] = {"wildcards": wildcard_rules, "literals": literal_rules}
