"""A small documentation site whose pages need their requisites to be shown: stylesheets (one imported by
another, in a cycle), a web font, images (``src``, ``srcset``, CSS ``url()`` in files, ``<style>`` and
``style`` attributes), a script, an icon, and images and a stylesheet on a second host (a CDN) that is not
in the crawl's scope. Served on loopback by :class:`polecat.testing.web.TestWeb` knobs; used by the
requisite tests and the replay benchmark.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from polecat.testing.web import TestWeb

SITE = "docs.test"
CDN = "cdn.test"
HEADING_RGB = (200, 10, 20)
"""``h1`` colour, set by the site's own stylesheet."""
TEXT_RGB = (10, 120, 30)
"""``p`` colour, set by the stylesheet that stylesheet imports."""
NOTE_RGB = (20, 30, 160)
"""``.note`` colour, set by the CDN's stylesheet."""


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A valid one-colour PNG (browsers decode it: a replayed ``<img>`` gets its natural width)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


@dataclass(frozen=True, slots=True)
class Resource:
    host: str
    path: str
    content_type: str
    body: bytes
    requisite: bool
    """A requisite of some page (else a page)."""

    def url(self, port: int) -> str:
        return f"http://{self.host}:{port}{self.path}"


def _rgb(rgb: tuple[int, int, int]) -> str:
    return "rgb({}, {}, {})".format(*rgb)


def _page(port: int, title: str, own_image: str, links: list[str], cdn_host: str) -> bytes:
    cdn = f"http://{cdn_host}:{port}"
    nav = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>' + title + "</title>\n"
        '<link rel="icon" href="/favicon.png"><link rel="stylesheet" href="/css/site.css">\n'
        f'<link rel="stylesheet" href="{cdn}/lib/cdn.css"><script src="/js/app.js"></script>\n'
        "<style>.banner { background-image: url(/img/banner.png); height: 8px }</style></head>\n"
        f'<body><h1>{title}</h1><div class="banner"></div>\n'
        '<p>Text of the page, coloured by the imported stylesheet.</p><p class="note">A note.</p>\n'
        '<img id="logo" src="/img/logo.png" srcset="/img/logo-2x.png 2x" alt="logo">\n'
        f'<img id="own" src="{own_image}" alt="own"><img id="cdn" src="{cdn}/img/photo.png" alt="cdn">\n'
        '<div style="background: url(\'/img/inline.png\'); height: 4px"></div>\n'
        f"<nav>{nav}</nav></body></html>\n"
    ).encode()


def requisite_site(port: int, cdn: str = CDN) -> list[Resource]:
    """Every resource of the site: three pages and their requisites (see the module docstring), the CDN's
    on the host ``cdn``."""
    pages = ["/index.html", "/guide.html", "/reference.html"]
    titles = [path.strip("/").removesuffix(".html").title() for path in pages]
    out = [Resource(SITE, path, "text/html; charset=utf-8",
                    _page(port, title, f"/img/own{k}.png", pages, cdn), False)
           for k, (path, title) in enumerate(zip(pages, titles, strict=True))]
    css = {
        "/css/site.css": '@import url("base.css");\n'
                         '@font-face { font-family: Doc; src: url(../fonts/doc.woff2) format("woff2") }\n'
                         f'h1 {{ color: {_rgb(HEADING_RGB)}; font-family: Doc }}\n'
                         "body { background: url(../img/tile.png) }\n"
                         ".x { background: url(data:image/png;base64,AAAA) } /* url(/img/commented.png) */\n",
        "/css/base.css": f"@import 'site.css';\np {{ color: {_rgb(TEXT_RGB)} }}\n",
    }
    out += [Resource(SITE, path, "text/css", text.encode(), True) for path, text in css.items()]
    images = {"/favicon.png": (4, 4), "/img/banner.png": (20, 8), "/img/logo.png": (16, 8),
              "/img/logo-2x.png": (32, 16), "/img/inline.png": (2, 2), "/img/tile.png": (3, 3),
              **{f"/img/own{k}.png": (5 + k, 5) for k in range(len(pages))}}
    out += [Resource(SITE, path, "image/png", png(w, h, (10 * w % 256, 80, 120)), True)
            for path, (w, h) in images.items()]
    out += [Resource(SITE, "/fonts/doc.woff2", "font/woff2", b"wOF2" + bytes(range(256)) * 4, True),
            Resource(SITE, "/js/app.js", "application/javascript",
                     b"document.documentElement.dataset.script = 'ran';\n", True),
            Resource(cdn, "/lib/cdn.css", "text/css",
                     f".note {{ color: {_rgb(NOTE_RGB)}; background: url(/img/dot.png) }}\n".encode(), True),
            Resource(cdn, "/img/photo.png", "image/png", png(12, 6, (200, 200, 0)), True),
            Resource(cdn, "/img/dot.png", "image/png", png(1, 1, (0, 0, 0)), True)]
    return out


def serve_site(web: TestWeb, resources: list[Resource]) -> None:
    """Answer every resource of the site from ``web`` (its hosts resolve to loopback)."""
    for host in dict.fromkeys(r.host for r in resources):
        web.add_host(host)
    for r in resources:
        web.respond(r.host, r.path, 200, headers={"Content-Type": r.content_type}, body=r.body)
