"""A deterministic generated multi-host site and its ground truth.

The same :class:`SiteSpec` (including ``seed``) always yields the same hosts, pages, links and bytes, so
the test web (polecat/testing/web.py) and the benchmark server serve identical sites, and
:func:`ground_truth` computes, from the generator's own link graph and independently of any crawler, the
canonical URLs a correct crawler must fetch.

Shape of a host ``hNN.test`` with P pages (global page id ``g = host_index * P + i``):

- page 0 is ``/``; the others sit exactly one directory deep: ``/sK/page-I.html``, ``/sK/item?id=I&lang=en``
  (query pages) or ``/private/page-I.html`` and ``/private/open-I.html`` (private pages). Keeping every
  page one directory deep makes a relative ``../sK/...`` link resolve to the same URL from any page, so an
  exact duplicate body served at another URL of the same host links to the same pages.
- Reachability is guaranteed: the non-private pages form a chain in index order and page ``chain[k]``
  links to ``chain[k+1]`` and ``chain[k+2]``; duplicate pages (whose bodies copy another page, links
  included) are never adjacent in the chain, so skipping one never breaks it. Every private page gets an
  inbound link from a public page, so a crawler that ignores robots.txt is caught.
- robots.txt comes in variants (:data:`ROBOTS_VARIANTS`), cycled over the hosts by ``SiteSpec.robots``.

Links are written in noisy forms that a canonicalizer must undo (see :data:`NOISE`): relative, absolute,
upper-case host, dot segments, percent-encoded unreserved characters, fragments, tracking parameters,
reordered query keys, plus junk (``mailto:``, ``javascript:``) that must never be fetched.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

import protego

from polecat.testing.sitehtml import render_page

__all__ = [
    "NOISE",
    "ROBOTS_VARIANTS",
    "PageInfo",
    "RobotsVariant",
    "Site",
    "SiteSpec",
    "canonical_query",
    "ground_truth",
]

RobotsVariant = Literal["allow", "disallow_private", "allow_override", "missing", "error"]
ROBOTS_VARIANTS: tuple[RobotsVariant, ...] = (
    "allow",
    "disallow_private",
    "allow_override",
    "missing",
    "error",
)
"""``allow``: 200, no rules. ``disallow_private``: 200, ``Disallow: /private/``. ``allow_override``: as
the previous plus ``Allow: /private/open-``. ``missing``: 404 (no restrictions). ``error``: 500 (a
crawler must treat the whole host as disallowed)."""

NOISE: tuple[str, ...] = (
    "relative",
    "absolute",
    "host_case",
    "dot_segments",
    "percent",
    "fragment",
    "tracking",
    "query_order",
    "junk",
)

TRACKING_PREFIXES = ("utm_",)
TRACKING_KEYS = frozenset({"gclid", "fbclid"})
"""The tracking parameters the generator writes into links (a subset of polecat's defaults)."""

PageKind = Literal["root", "page", "item", "private", "dup", "near_dup", "mirror", "near_mirror"]
_HOST_RELATIVE = frozenset({"path", "relative", "dot_segments", "percent"})
"""Link forms that name no host: on a mirror they point at the mirror's own copy of the target."""
Scope = Literal["host", "domain", "any"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SiteSpec:
    """Parameters of a generated site; equal specs generate byte-identical sites."""

    hosts: int = 4
    pages_per_host: int = 20
    seed: int = 0
    links_per_page: int = 8
    """Random links per page on average (each page gets 2/3x to 4/3x this, plus its chain links)."""
    cross_host_ratio: float = 0.3
    page_bytes: int = 2048
    """Average body size; each page varies within +-40 %."""
    dup_ratio: float = 0.0
    """Share of pages whose body is an exact copy of another page of the same host."""
    near_dup_ratio: float = 0.0
    """Share of pages whose body copies another page's except for one footer token."""
    private_ratio: float = 0.1
    """Share of pages under /private/ (disallowed on hosts whose robots variant says so)."""
    query_ratio: float = 0.1
    """Share of pages addressed with a query string (``/sK/item?id=I&lang=en``)."""
    sections: int = 4
    robots: tuple[RobotsVariant, ...] = ("disallow_private", "missing", "allow", "allow_override")
    """robots.txt variant of host i is ``robots[i % len(robots)]``."""
    crawl_delays: tuple[tuple[str, float], ...] = ()
    """``(host, seconds)``: a ``Crawl-delay`` line in that host's robots.txt (200 variants only)."""
    noise: tuple[str, ...] = NOISE
    """Which link forms of :data:`NOISE` the generator may write."""
    mirror_hosts: int = 0
    """The last ``mirror_hosts`` hosts mirror the first ones (host ``hosts - mirror_hosts + j`` copies
    host ``j``): the same paths, each page's body byte for byte (a ``mirror``), links without a host
    staying on the mirror, or with ``mirror_near_ratio`` of the pages one footer token changed (a
    ``near_mirror``): cross-host copies and near-copies, as content dedup across a crawl meets them.
    A mirror's page may be linked only in absolute form (to its source's copy) from its host's other
    pages, and reached through another host's links: when every host is a seed, compare a crawl of such a
    site with ``ground_truth(site, port, "any")``, not ``"host"``."""
    mirror_near_ratio: float = 0.0

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.pages_per_host < 1:
            raise ValueError("SiteSpec needs at least one host and one page per host")
        if self.dup_ratio + self.near_dup_ratio > 0.45:
            raise ValueError(
                "dup_ratio + near_dup_ratio must stay below 0.45 (duplicates are never adjacent)"
            )
        if not 0 <= self.mirror_hosts <= self.hosts // 2:
            raise ValueError("mirror_hosts must be in [0, hosts // 2] (each mirrors one other host)")
        unknown = set(self.noise) - set(NOISE)
        if unknown:
            raise ValueError(f"unknown noise kinds: {sorted(unknown)}")


@dataclass(frozen=True, slots=True)
class PageInfo:
    host: str
    path: str
    """Canonical path and query, e.g. ``/s1/page-4.html`` or ``/s2/item?id=5&lang=en``."""
    kind: PageKind
    original: int
    """The page whose body this one serves (itself unless ``kind`` is dup or near_dup)."""
    links: tuple[tuple[int, str], ...]
    """``(target page id, link form)`` of the links written in this page's own body."""


def canonical_query(pairs: Iterable[tuple[str, str]]) -> str:
    """Query string without the generator's tracking parameters, keys sorted (as a canonicalizer does)."""
    kept = [(k, v) for k, v in pairs if k not in TRACKING_KEYS and not k.startswith(TRACKING_PREFIXES)]
    return "&".join(f"{k}={v}" for k, v in sorted(kept))


class Site:
    """The generated site of one spec: hosts, pages, link graph, robots.txt, rendering."""

    def __init__(self, spec: SiteSpec) -> None:
        self.spec = spec
        width = max(2, len(str(spec.hosts)))
        self.hosts: list[str] = [f"h{i + 1:0{width}d}.test" for i in range(spec.hosts)]
        self._host_index = {h: i for i, h in enumerate(self.hosts)}
        self._delays = dict(spec.crawl_delays)
        rng = random.Random(f"polecat-site/{spec.seed}")
        self.pages: list[PageInfo] = []
        first_mirror = spec.hosts - spec.mirror_hosts
        for h in range(spec.hosts):
            self.pages.extend(self._build_host(h, rng) if h < first_mirror else
                              self._mirror_host(h, h - first_mirror))
        self._by_key = {(p.host, p.path): g for g, p in enumerate(self.pages)}

    # --- structure -------------------------------------------------------------------------------

    def _build_host(self, h: int, rng: random.Random) -> list[PageInfo]:
        spec, n = self.spec, self.spec.pages_per_host
        host, base = self.hosts[h], h * n
        others = list(range(1, n))
        rng.shuffle(others)
        n_private = round((n - 1) * spec.private_ratio)
        n_query = round((n - 1) * spec.query_ratio)
        private = set(others[:n_private])
        query = set(others[n_private : n_private + n_query])
        paths = ["/"]
        for i in range(1, n):
            if i in private:
                paths.append(f"/private/{'open' if i % 2 else 'page'}-{i}.html")
            elif i in query:
                paths.append(f"/s{i % spec.sections}/item?id={i}&lang=en")
            else:
                paths.append(f"/s{i % spec.sections}/page-{i}.html")
        chain = [i for i in range(n) if i not in private]
        # Duplicates sit at odd chain positions only, so no two are adjacent and chain[k-1] -> chain[k+1]
        # keeps everything reachable around them.
        odd = chain[1::2]
        rng.shuffle(odd)
        n_dup = min(len(odd), round(n * spec.dup_ratio))
        n_near = min(len(odd) - n_dup, round(n * spec.near_dup_ratio))
        kinds: dict[int, PageKind] = {i: "dup" for i in odd[:n_dup]}
        kinds.update({i: "near_dup" for i in odd[n_dup : n_dup + n_near]})
        copyable = [i for i in chain if i not in kinds] or [0]
        links: list[list[int]] = [[] for _ in range(n)]
        for k, i in enumerate(chain):
            links[i].extend(base + j for j in chain[k + 1 : k + 3])
        for i in sorted(private):
            links[rng.choice(chain)].append(base + i)
        total = self.spec.hosts * n
        for i in range(n):
            count = rng.randint(spec.links_per_page * 2 // 3, spec.links_per_page * 4 // 3)
            for _ in range(count):
                if spec.hosts > 1 and rng.random() < spec.cross_host_ratio:
                    target = rng.randrange(total - n)
                    links[i].append(target if target < base else target + n)
                else:
                    links[i].append(base + rng.randrange(n))
        pages = []
        for i in range(n):
            kind: PageKind = kinds.get(i) or (
                "root" if i == 0 else "private" if i in private else "item" if i in query else "page"
            )
            original = base + (rng.choice([c for c in copyable if c != i] or [0]) if i in kinds else i)
            forms = tuple((t, self._link_form(rng, h, t)) for t in links[i])
            pages.append(PageInfo(host, paths[i], kind, original, forms))
        return pages

    def _mirror_host(self, h: int, source: int) -> list[PageInfo]:
        """Host ``h`` as a mirror of host ``source`` (:attr:`SiteSpec.mirror_hosts`). Its pages' ``links``
        are those of the body they serve, host-relative ones moved to the mirror."""
        n = self.spec.pages_per_host
        rng = random.Random(f"polecat-mirror/{self.spec.seed}/{h}")
        shift = (h - source) * n
        pages = []
        for i in range(n):
            src = self.pages[source * n + i]
            body = self.pages[src.original]
            links = tuple((t + shift if f.split("+")[0] in _HOST_RELATIVE else t, f) for t, f in body.links)
            kind: PageKind = "near_mirror" if rng.random() < self.spec.mirror_near_ratio else "mirror"
            pages.append(PageInfo(self.hosts[h], src.path, kind, source * n + i, links))
        return pages

    def _link_form(self, rng: random.Random, h: int, target: int) -> str:
        noise = self.spec.noise
        same_host = target // self.spec.pages_per_host == h
        bases = ["path"] + [f for f in ("relative", "dot_segments", "percent") if f in noise and same_host]
        bases += [f for f in ("absolute", "host_case") if f in noise]
        if not same_host:
            bases = [f for f in ("absolute", "host_case") if f in noise] or ["absolute"]
        form = rng.choice(bases)
        for extra in ("fragment", "tracking", "query_order"):
            if extra in noise and rng.random() < 0.15:
                form += "+" + extra
        return form

    # --- lookups -------------------------------------------------------------------------------------

    def seeds(self, port: int) -> list[str]:
        return [f"http://{h}:{port}/" for h in self.hosts]

    def url(self, page: int, port: int) -> str:
        p = self.pages[page]
        return f"http://{p.host}:{port}{p.path}"

    def lookup(self, host: str, path: str, query: Iterable[tuple[str, str]] = ()) -> int | None:
        """The page served at ``host`` + decoded ``path`` + query pairs (tracking dropped, keys sorted)."""
        q = canonical_query(query)
        return self._by_key.get((host.lower(), f"{path}?{q}" if q else path))

    def outlinks(self, page: int) -> list[int]:
        """Pages linked from the body served at ``page`` (a duplicate serves its original's links)."""
        info = self.pages[page]
        if info.kind in ("mirror", "near_mirror"):
            return [t for t, _ in info.links]
        return [t for t, _ in self.pages[info.original].links]

    # --- robots.txt ----------------------------------------------------------------------------------

    def robots_variant(self, host: str) -> RobotsVariant:
        return self.spec.robots[self._host_index[host] % len(self.spec.robots)]

    def robots(self, host: str) -> tuple[int, str]:
        """``(status, body)`` of ``host``'s robots.txt."""
        variant = self.robots_variant(host)
        if variant == "missing":
            return 404, "not found\n"
        if variant == "error":
            return 500, "server error\n"
        lines = ["User-agent: *"]
        if variant == "allow":
            lines.append("Disallow:")
        else:
            lines.append("Disallow: /private/")
            if variant == "allow_override":
                lines.append("Allow: /private/open-")
        if host in self._delays:
            lines.append(f"Crawl-delay: {self._delays[host]:g}")
        return 200, "\n".join(lines) + "\n"

    def crawl_delay(self, host: str) -> float:
        """The Crawl-delay a crawler must honour on ``host`` (0 when its robots.txt carries none)."""
        return self._delays.get(host, 0.0) if self.robots(host)[0] == 200 else 0.0

    def robots_parser(self, host: str) -> protego.Protego | None:
        """A parser of ``host``'s robots.txt, or None when its status leaves no restrictions (404)."""
        status, body = self.robots(host)
        if status >= 500:
            return protego.Protego.parse("User-agent: *\nDisallow: /\n")
        return protego.Protego.parse(body) if status == 200 else None

    # --- bodies ---------------------------------------------------------------------------------

    def render(self, page: int, port: int) -> bytes:
        """The HTML body served at ``page`` (UTF-8)."""
        info = self.pages[page]
        if info.kind == "mirror":
            return self.render(info.original, port)
        if info.kind == "near_mirror":  # the source's body, one footer token changed
            source = self.pages[info.original]
            return render_page(self, source.original, self.pages[source.original].links, port, page)
        original = self.pages[info.original]
        revision = page if info.kind == "near_dup" else info.original
        return render_page(self, info.original, original.links, port, revision)


def ground_truth(
    site: Site | SiteSpec,
    port: int,
    scope: Scope = "any",
    user_agent: str = "polecat",
    seeds: Iterable[str] | None = None,
) -> set[str]:
    """Canonical URLs reachable from ``seeds`` (default: every host root) by links, within ``scope``,
    allowed by each host's robots.txt for ``user_agent``. ``domain`` scope equals ``host`` here: every
    ``hNN.test`` is its own registrable domain."""
    site = site if isinstance(site, Site) else Site(site)
    parsers = {h: site.robots_parser(h) for h in site.hosts}

    def allowed(page: int) -> bool:
        parser = parsers[site.pages[page].host]
        return parser is None or bool(parser.can_fetch(site.url(page, port), user_agent))

    start: list[int] = []
    for url in seeds if seeds is not None else site.seeds(port):
        parts = urlsplit(url)
        page = site.lookup(parts.hostname or "", parts.path or "/")
        if page is None:
            raise ValueError(f"seed {url} is not a page of the site")
        start.append(page)
    seen = set(start)
    queue = deque(p for p in start if allowed(p))
    reached: set[int] = set()
    while queue:
        page = queue.popleft()
        reached.add(page)
        for target in site.outlinks(page):
            if target in seen:
                continue
            if scope != "any" and site.pages[target].host != site.pages[page].host:
                continue
            seen.add(target)
            if allowed(target):
                queue.append(target)
    return {site.url(p, port) for p in reached}
