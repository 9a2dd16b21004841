"""HTML bodies of the generated site (polecat/testing/sitegen.py): realistic markup, deterministic text,
and links written in the noisy forms a crawler's canonicalizer must undo."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from polecat.testing.sitegen import Site

__all__ = ["href", "render_page"]

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zen", "dor", "pel", "sun", "gra", "fi", "bo", "xal")
_VOCAB_SIZE = 20_000
_VOCAB_RNG = random.Random("polecat-vocab")
_DISTINCT: dict[str, None] = {}
while len(_DISTINCT) < _VOCAB_SIZE:
    _DISTINCT["".join(_VOCAB_RNG.choices(_SYLLABLES, k=_VOCAB_RNG.randint(1, 4)))] = None
VOCAB: tuple[str, ...] = tuple(sorted(_DISTINCT, key=len))
"""Distinct words, shortest first: rank r is drawn with weight 1/r (Zipf, exponent 1), like real text,
where a few short words are everywhere and most words are rare. A uniform draw from a small vocabulary
made unrelated pages share most of their word sets, which no real site does."""
CUM: tuple[float, ...] = tuple(itertools.accumulate(1 / rank for rank in range(1, _VOCAB_SIZE + 1)))


def _draw(rng: random.Random, count: int) -> list[str]:
    # One random() per word, like an unweighted choices(): the rest of the page's draws are unchanged.
    return rng.choices(VOCAB, cum_weights=CUM, k=count)


def _words(rng: random.Random, count: int) -> str:
    return " ".join(_draw(rng, count))


def href(site: Site, target: int, form: str, port: int, salt: int) -> str:
    """The href text (HTML-escaped) that points at page ``target`` in link form ``form``."""
    info = site.pages[target]
    base, *extras = form.split("+")
    path, _, query = info.path.partition("?")
    if "query_order" in extras and "&" in query:
        query = "&".join(reversed(query.split("&")))
    if "tracking" in extras:
        tracking = (
            "utm_source=feed&utm_medium=rss",
            f"gclid=G{salt}",
            f"fbclid=F{salt}",
            "utm_campaign=spring",
        )
        query = "&".join(q for q in (query, tracking[salt % len(tracking)]) if q)
    if base == "relative":
        path = ".." + path
    elif base == "dot_segments":
        path = f"/s{salt % 7}/..{path}"
    elif base == "percent" and "-" in path:
        path = path.replace("-", "%2D", 1)
    elif base == "absolute":
        path = f"http://{info.host}:{port}{path}"
    elif base == "host_case":
        path = f"http://{info.host.upper()}:{port}{path}"
    text = f"{path}?{query}" if query else path
    if "fragment" in extras:
        text += f"#sec-{salt % 5}"
    return text.replace("&", "&amp;")


def render_page(site: Site, page: int, links: Sequence[tuple[int, str]], port: int, revision: int) -> bytes:
    """Body of ``page`` with ``links``; ``revision`` is the one footer token a near duplicate changes."""
    spec = site.spec
    rng = random.Random(f"polecat-text/{spec.seed}/{page}")
    target_size = int(spec.page_bytes * rng.uniform(0.6, 1.4))
    title = _words(rng, 4).title()
    anchors = [
        f'<a href="{href(site, t, form, port, page + k)}">{_words(rng, rng.randint(1, 3))}</a>'
        for k, (t, form) in enumerate(links)
    ]
    nav, rest = anchors[:6], anchors[6:]
    parts = [
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n',
        f"<title>{title}</title>\n",
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        '<link rel="stylesheet" href="/static/site.css">\n</head>\n<body>\n<header>\n<nav><ul>\n',
        *(f"<li>{a}</li>\n" for a in nav),
        f"</ul></nav>\n</header>\n<main>\n<article>\n<h1>{title}</h1>\n",
    ]
    size = sum(map(len, parts))
    section = 0
    while rest or size < target_size:
        words = _draw(rng, rng.randint(40, 110))
        for _ in range(min(len(rest), rng.randint(1, 4))):
            words.insert(rng.randrange(len(words) + 1), rest.pop())
        if rng.random() < 0.2:
            section += 1
            words.insert(0, f'</p>\n<h2 id="sec-{section}">{_words(rng, 3)}</h2>\n<p>')
        paragraph = "<p>" + " ".join(words) + ".</p>\n"
        parts.append(paragraph)
        size += len(paragraph)
    parts.append(f"</article>\n</main>\n<footer>\n<p>Revision {revision}.")
    if "junk" in spec.noise:
        parts.append(' <a href="mailto:webmaster@example.invalid">Contact</a>')
        parts.append(' <a href="javascript:void(0)">Back to top</a>')
    parts.append("</p>\n</footer>\n</body>\n</html>\n")
    return "".join(parts).encode()
