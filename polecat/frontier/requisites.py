"""Page requisites: which of the images, stylesheets, scripts, icons and fonts a page embeds are fetched.

The parse layer reads them out of a page or a stylesheet (polecat/parse/requisites.py, polecat/parse/css.py);
this module decides which are queued and what becomes of their responses. The node runs it: it hands a
page's requisites to :meth:`polecat.frontier.intake.Intake.admit_requisites` and asks
:func:`stored_type` and :meth:`RequisiteCaps.is_requisite` about each response.

Rules:

1. Requisites are fetched only with ``scope.requisites`` (``--requisites``, or the ``--archive`` preset).
2. Of one page (or stylesheet) at most ``scope.max_requisites_per_page`` requisites are considered, in
   document order; the others are counted (``requisite_page_cap``).
3. A requisite is part of a page already in scope, so the scope's mode (host, domain) and ``max_depth``
   do not apply to it when ``scope.requisite_hosts`` is ``any`` (the default: a page's images on a CDN
   host are fetched); with ``scope`` its host must be one the scope admits. Everything else that applies
   to a discovered URL applies (intake rule 2): blocked hosts, URL length, ``allow``/``deny``, the trap
   rules, the host and queue budgets; and at fetch time robots.txt, politeness and the SSRF guard, as
   for any page of its host. A requisite another member owns is handed to it marked as one
   (polecat/cluster/batch.py), and judged there by these rules.
4. At most ``scope.max_requisites_per_host`` requisites are queued per host and ``scope.max_requisites``
   in all, per crawl (each host's count is kept in the frontier's ``ops``, with its slice, at each commit);
   past them a requisite is refused (``requisite_host_cap``, ``requisite_cap``). Like the
   crawl budgets, the caps are checked before a page's batch, so one page may pass them by its own
   requisites at most (rule 2 bounds that). A requisite of this run is fetched with its body capped at
   ``scope.max_requisite_bytes`` (the node passes the cap to the fetcher; a cut body is stored and
   recorded truncated, as at ``fetch.max_body_bytes``).
5. A requisite is queued at its page's depth + 1 with its page's importance (not a share of it): it is
   fetched about when its page is, whichever links the page has. A URL already seen (as a page or as
   another page's requisite) is not queued again: each requisite is fetched once per crawl.
6. With requisites on, a requisite of this run (:meth:`RequisiteCaps.is_requisite`) is stored whatever
   its type (fonts are often served as ``application/octet-stream``), and so is a response of a requisite
   type (:func:`stored_type`: images, fonts, stylesheets, scripts, manifests, subtitles) however its URL
   was found (a restart forgets which queued URLs were requisites); ``fetch.store_types`` still decides
   for the others. A stylesheet is read for its ``url()`` and
   ``@import`` references, which are requisites of it (rules 2-5); nothing else of a requisite is read,
   and a requisite of this run that answers HTML (:meth:`RequisiteCaps.is_requisite`) is stored, not
   parsed for links.
"""

from __future__ import annotations

from collections import Counter

from polecat.config import ScopeConfig
from polecat.frontier.keys import op_key
from polecat.writes import Put, Write

CSS_TYPE = "text/css"
REQUISITE_TYPES = frozenset((
    CSS_TYPE, "text/javascript", "application/javascript", "application/x-javascript",
    "application/ecmascript", "text/ecmascript", "application/manifest+json", "text/vtt",
    "application/font-woff", "application/font-woff2", "application/x-font-woff", "application/x-font-ttf",
    "application/x-font-otf", "application/font-sfnt", "application/vnd.ms-fontobject",
))
"""Requisite media types besides ``image/*`` and ``font/*`` (rule 6)."""
KIND = "requisites"
"""The ``ops`` kind of a host's requisite count (rule 4): ``requisites:<host>`` -> the count in ASCII."""


def stored_type(cfg: ScopeConfig, media_type: str) -> bool:
    """Whether a response of ``media_type`` is stored as a requisite (rule 6)."""
    return cfg.requisites and (media_type.startswith(("image/", "font/")) or media_type in REQUISITE_TYPES)


class RequisiteCaps:
    """The caps of rules 2 and 4, and the URLs queued as requisites in this run."""

    def __init__(self, cfg: ScopeConfig) -> None:
        self._cfg = cfg
        self._per_host: Counter[str] = Counter()
        """Requisites queued per host in the whole crawl (rule 4)."""
        self._total = 0
        self._dirty: set[str] = set()
        self._queued: set[str] = set()
        """Bounded by ``scope.max_requisites`` (rule 4), give or take one page's requisites."""

    def per_page(self, urls: list[str]) -> tuple[list[str], int]:
        """Rule 2: the requisites of one page considered, and how many were left out."""
        cap = self._cfg.max_requisites_per_page
        return urls[:cap], max(0, len(urls) - cap)

    def refuse(self, host: str) -> str | None:
        """Rule 4: why no more requisites of ``host`` may be queued (None: they may)."""
        if self._total >= self._cfg.max_requisites:
            return "requisite_cap"
        if self._per_host[host] >= self._cfg.max_requisites_per_host:
            return "requisite_host_cap"
        return None

    def queued(self, url: str, host: str) -> None:
        """``url`` of ``host`` was queued as a requisite."""
        self._per_host[host] += 1
        self._total += 1
        self._dirty.add(host)
        self._queued.add(url)

    def load(self, host: str, raw: bytes) -> None:
        """Reinstate ``host``'s stored count (on open, or adopted with its slice)."""
        try:
            count = int(raw)
        except ValueError:  # a damaged record: counted again from zero, never a crash
            count = 0
        self._total += count - self._per_host[host]
        self._per_host[host] = count

    def writes(self) -> list[Write]:
        """The counts changed since the last commit (rule 4)."""
        out: list[Write] = [Put("ops", op_key(KIND, host), str(self._per_host[host]).encode())
                            for host in self._dirty]
        self._dirty.clear()
        return out

    def is_requisite(self, url: str) -> bool:
        """Whether ``url`` was queued as a requisite in this run (rule 6)."""
        return url in self._queued
