"""A news site on loopback, for refresh that learns from the first visit (issue 37).

One origin, ``http://127.0.0.1:PORT``, served by aiohttp in a background thread (like
:mod:`polecat.testing.web`, so a test may block on a ``polecat`` subprocess):

- ``/`` links ``/news`` and ``/static`` and names the feed (``<link rel="alternate"
  type="application/rss+xml" href="/feed.xml">``);
- ``/news`` has new content every ``news_period`` seconds of the wall clock, with an ``ETag`` and a
  ``Last-Modified`` that follow each change; ``/static`` never changes (``Last-Modified`` a year before
  the server started); both answer a matching ``If-None-Match`` with 304;
- ``/feed.xml`` is an RSS 2.0 feed whose items (``/item/N``, ``pubDate`` the item's time) appear every
  ``item_period`` seconds, the newest ``FEED_ITEMS`` listed, with an ``ETag``;
- with ``sitemap_urls``, robots.txt names ``/sitemap.xml.gz``: a gzipped urlset of that many ``/s/N``
  URLs, each entry padded with an image extension to ``SITEMAP_ENTRY`` bytes (so 50,000 URLs make a 45 MB
  file, the protocol's size); with ``sitemap_gzip=False`` it is ``/sitemap.xml``, served as it is.

Every request is logged (path, status, wall time).
"""

from __future__ import annotations

import asyncio
import email.utils
import gzip
import threading
import time
from dataclasses import dataclass
from types import TracebackType

from aiohttp import web

from polecat.testing.siteserve import bind_loopback, serve_until_stopped

__all__ = ["FEED_ITEMS", "SITEMAP_ENTRY", "NewsWeb", "ServedRequest", "big_sitemap"]

FEED_ITEMS = 20
SITEMAP_ENTRY = 900
"""Bytes per ``<url>`` entry of the big sitemap."""
_YEAR = 365 * 86_400.0


@dataclass(frozen=True, slots=True)
class ServedRequest:
    path: str
    status: int
    at: float
    """Wall-clock time of the request."""


def big_sitemap(origin: str, urls: int) -> bytes:
    """A urlset of ``urls`` URLs ``origin/s/N``, each entry padded to about :data:`SITEMAP_ENTRY` bytes."""
    head = (b'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
            b' xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">\n')
    parts = [head]
    for i in range(urls):
        entry = (f"<url><loc>{origin}/s/{i}</loc><lastmod>2026-01-01</lastmod><image:image><image:loc>"
                 f"{origin}/img/{i}.jpg</image:loc><image:caption>").encode()
        tail = b"</image:caption></image:image></url>\n"
        parts.append(entry + b"x" * max(0, SITEMAP_ENTRY - len(entry) - len(tail)) + tail)
    parts.append(b"</urlset>\n")
    return b"".join(parts)


class NewsWeb:
    """The site of the module docstring; ``with NewsWeb() as site`` starts and stops it."""

    def __init__(self, *, news_period: float = 3.0, item_period: float = 3.0, sitemap_urls: int = 0,
                 sitemap_gzip: bool = True) -> None:
        self.news_period = news_period
        self.item_period = item_period
        self.sitemap_urls = sitemap_urls
        self.sitemap_path = "/sitemap.xml.gz" if sitemap_gzip else "/sitemap.xml"
        self.started = time.time()
        self.port = 0
        self._log: list[ServedRequest] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.sitemap_body = b""
        """The sitemap served (with ``sitemap_urls``), as it goes on the wire."""

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> list[ServedRequest]:
        with self._lock:
            return list(self._log)

    def requests(self, path: str) -> list[ServedRequest]:
        """The requests for ``path`` so far."""
        return [r for r in self.log if r.path == path]

    def items_so_far(self, now: float | None = None) -> int:
        """Feed items published by ``now`` (the wall clock when None)."""
        return 1 + int(((time.time() if now is None else now) - self.started) / self.item_period)

    # --- pages ---------------------------------------------------------------------------------

    def _root(self) -> tuple[bytes, dict[str, str]]:
        body = (b'<html><head><title>news</title><link rel="alternate" type="application/rss+xml" '
                b'href="/feed.xml"></head><body><a href="/news">news</a> <a href="/static">static</a>'
                b"</body></html>")
        return body, {"Content-Type": "text/html"}

    def _news(self) -> tuple[bytes, dict[str, str]]:
        version = int(time.time() / self.news_period)
        changed = version * self.news_period
        words = " ".join(f"story{version}-{i}" for i in range(200))
        body = f"<html><body><h1>Edition {version}</h1><p>{words}</p></body></html>".encode()
        return body, {"Content-Type": "text/html", "ETag": f'"n{version}"',
                      "Last-Modified": email.utils.formatdate(changed, usegmt=True)}

    def _static(self) -> tuple[bytes, dict[str, str]]:
        body = b"<html><body><h1>About</h1><p>" + b"unchanging words " * 100 + b"</p></body></html>"
        return body, {"Content-Type": "text/html", "ETag": '"s1"',
                      "Last-Modified": email.utils.formatdate(self.started - _YEAR, usegmt=True)}

    def _feed(self) -> tuple[bytes, dict[str, str]]:
        newest = self.items_so_far()
        items = "".join(
            f"<item><title>Item {n}</title><link>{self.origin}/item/{n}</link><pubDate>"
            f"{email.utils.formatdate(self.started + n * self.item_period, usegmt=True)}</pubDate></item>"
            for n in range(newest - 1, max(-1, newest - 1 - FEED_ITEMS), -1))
        body = (f'<?xml version="1.0"?><rss version="2.0"><channel><title>news</title>'
                f"<link>{self.origin}/</link>{items}</channel></rss>").encode()
        return body, {"Content-Type": "application/rss+xml", "ETag": f'"f{newest}"'}

    def _robots(self) -> tuple[bytes, dict[str, str]]:
        lines = ["User-agent: *", "Disallow:"]
        if self.sitemap_urls:
            lines.append(f"Sitemap: {self.origin}{self.sitemap_path}")
        return ("\n".join(lines) + "\n").encode(), {"Content-Type": "text/plain"}

    def _page(self, path: str) -> tuple[bytes, dict[str, str]] | None:
        fixed = {"/": self._root, "/news": self._news, "/static": self._static, "/feed.xml": self._feed,
                 "/robots.txt": self._robots}
        if path in fixed:
            return fixed[path]()
        if path == self.sitemap_path and self.sitemap_urls:
            gz = path.endswith(".gz")
            return self.sitemap_body, {"Content-Type": "application/gzip" if gz else "application/xml"}
        if path.startswith(("/item/", "/s/")):
            return f"<html><body><p>{path}</p></body></html>".encode(), {"Content-Type": "text/html"}
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        page = self._page(request.path)
        if page is None:
            response = web.Response(status=404)
        else:
            body, headers = page
            etag = headers.get("ETag")
            if etag is not None and request.headers.get("If-None-Match") == etag:
                response = web.Response(status=304, headers={"ETag": etag})
            else:
                response = web.Response(status=200, body=body, headers=headers)
        with self._lock:
            self._log.append(ServedRequest(request.path, response.status, time.time()))
        return response

    # --- the thread ----------------------------------------------------------------------------

    def start(self) -> NewsWeb:
        """Start serving; returns once the port accepts connections."""
        sock = bind_loopback(["127.0.0.1"])[0]
        self.port = sock.getsockname()[1]
        if self.sitemap_urls:
            xml = big_sitemap(self.origin, self.sitemap_urls)
            gz = self.sitemap_path.endswith(".gz")
            self.sitemap_body = gzip.compress(xml, compresslevel=6) if gz else xml
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_route("GET", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.2)
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.SockSite(runner, sock).start())
            ready.set()
            serve_until_stopped(loop, runner)

        self._thread = threading.Thread(target=run, name="NewsWeb", daemon=True)
        self._thread.start()
        if not ready.wait(30.0):
            raise RuntimeError("the news site did not start within 30 s")
        return self

    def stop(self) -> None:
        if self._thread is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10.0)
            self._thread = None

    def __enter__(self) -> NewsWeb:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
