"""The configuration's shape: :class:`Config` and its sections (frozen, keyword-only dataclasses), with
the defaults and what each field means. Building one from plain data is polecat/config/building.py's,
checking it polecat/config/validation.py's."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from polecat.version import __version__

PROJECT_HOMEPAGE = ""
"""The project's homepage, as pyproject.toml declares it (``[project.urls] Homepage``; none today):
tests/test_user_agent.py holds the two equal. A constant, not a read of the installed metadata:
``importlib.metadata`` cost every polecat process ~20 ms of CPU at start."""


def _default_user_agent(version: str, homepage: str) -> str:
    """``polecat/VERSION (+HOMEPAGE)``; without a homepage, no URL: a crawler's user agent must not point
    at a contact that does not exist. Operators set their own (README, "Using it")."""
    return f"polecat/{version}" + (f" (+{homepage})" if homepage else "")


DEFAULT_USER_AGENT = _default_user_agent(__version__, PROJECT_HOMEPAGE)

DEFAULT_TRACKING_PARAMS: tuple[str, ...] = (
    "utm_*",
    "gclid",
    "gclsrc",
    "dclid",
    "fbclid",
    "msclkid",
    "mc_cid",
    "mc_eid",
    "yclid",
    "_ga",
    "_gl",
    "igshid",
    "ref_src",
)

Scope = Literal["host", "domain", "any"]
RequisiteHosts = Literal["any", "scope"]
NearDuplicates = Literal["delta", "full", "drop"]
Ipv6Mode = Literal["auto", "on", "off"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ScopeConfig:
    """What the crawl may enter."""

    seeds: tuple[str, ...] = ()
    seeds_file: Path | None = None
    """One seed URL a line (``#`` comments), streamed in while the crawl runs (polecat/node/seed_feed.py):
    any size, the first request goes out after its first batch."""
    mode: Scope = "host"
    allow: tuple[str, ...] = ()
    """Regexes; when any are given a URL must match one of them."""
    deny: tuple[str, ...] = ()
    """Regexes; a URL matching any is skipped."""
    block: tuple[str, ...] = ()
    """Host patterns (``example.com`` exact, ``*.example.com`` the domain and its subdomains)."""
    max_pages: int = 0
    """Stop after this many fetches in this run (0: no limit)."""
    max_depth: int = 50
    max_url_length: int = 2048
    max_pages_per_host: int = 100_000
    max_queue_per_host: int = 1_000_000
    max_hosts: int = 1_000_000
    """Hosts the frontier knows at most; links to further new hosts are refused (frontier/budgets.py)."""
    max_new_hosts_per_page: int = 1_000
    """New hosts one page's links may add; its other links to new hosts are refused."""
    max_queued: int = 50_000_000
    """URLs queued at most in all; discovered URLs past it are refused."""
    max_urls_per_shape: int = 1_000
    """Discovered URLs of one shape (digits and id-like tokens folded) queued per host and run: the
    budget that ends calendars, ``?page=N+1`` and session-id traps (frontier/traps.py)."""
    soft_404_probe: bool = True
    """Probe hosts whose pages keep coming back as duplicates with a URL that cannot exist, and treat
    pages like its answer as soft-404s (links not followed, body not stored)."""
    requisites: bool = False
    """Fetch and store the images, stylesheets (and what their ``url()`` and ``@import`` load), scripts,
    icons and fonts of every fetched page, as ``wget -p`` does (polecat/frontier/requisites.py):
    ``--requisites``, and on in the ``--archive`` preset. Off for a text crawl."""
    requisite_hosts: RequisiteHosts = "any"
    """Where requisites are fetched: ``any`` host (a page's images on a CDN; the scope's mode and
    ``max_depth`` do not apply to them, its other limits do) or only hosts the ``scope`` admits."""
    max_requisites_per_page: int = 200
    """Requisites of one page (or stylesheet) considered, in document order."""
    max_requisites_per_host: int = 20_000
    """Requisites queued per host in the whole crawl."""
    max_requisites: int = 200_000
    """Requisites queued in all in the whole crawl (a run remembers the URL of each it queues: ~100
    bytes apiece)."""
    max_requisite_bytes: int = 5 * 1024 * 1024
    """A requisite's body is cut (and recorded truncated) past this many bytes, or past
    ``fetch.max_body_bytes`` when that is lower."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PolitenessConfig:
    """When a host may be fetched (see polecat/frontier/politeness.py for the rules)."""

    rate: float = 1.0
    """Requests per second per politeness key."""
    throttle: tuple[tuple[str, float], ...] = ()
    """Per-host-pattern rate overrides, ``(pattern, req_per_s)``."""
    key_by_ip: bool = False
    """Also limit by resolved IP: several hosts on one server share one budget."""
    max_crawl_delay: float = 60.0
    """Ceiling applied to robots.txt Crawl-delay."""
    backoff_factor: float = 0.5
    """Multiplicative rate cut on 429/503."""
    min_rate_factor: float = 1 / 64
    """The AIMD cut never takes a host below this fraction of its configured rate."""
    recover_step: float = 0.05
    """Additive recovery of the rate factor per successful fetch."""
    max_retry_after: float = 86_400.0
    quarantine_base: float = 30.0
    quarantine_cap: float = 3_600.0
    park_after_failures: int = 5
    """Consecutive failures that park a host (reported, no more fetches this run)."""
    give_up_after: int = 0
    """Attempts in a row without a usable answer (network failure, robots.txt 429/5xx or hanging) after
    which a host is given up for the rest of the run and reported (politeness rule 6). 0: never (long-
    running nodes: failing hosts back off for hours instead). ``polecat crawl`` sets 3."""
    give_up_backoff: float = 5.0
    """Under give_up_after: the first retry of a failing host, doubling."""
    max_url_attempts: int = 3
    """A URL failing this many times with a retryable error is recorded done with its reason."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchConfig:
    user_agent: str = DEFAULT_USER_AGENT
    concurrency: int = 256
    connections_per_host: int = 2
    connect_timeout: float = 10.0
    first_byte_timeout: float = 20.0
    read_gap_timeout: float = 10.0
    total_timeout: float = 60.0
    max_body_bytes: int = 10 * 1024 * 1024
    max_parse_bytes: int = 512 * 1024
    """Bytes of an HTML body parsed for links and text (the stored body is whole): the per-page CPU
    budget of the parse (polecat/parse/guard.py; ~50 ms of parse at the default in the worst case)."""
    max_redirects: int = 5
    store_types: tuple[str, ...] = ("text/html", "application/xhtml+xml", "text/plain")
    """Content types stored; others are recorded as skipped."""
    verify_tls: bool = True
    ca_bundle: Path | None = None
    stop_grace: float = 2.0
    """Seconds a stopping node waits for requests in flight; then they are cancelled (their URLs stay
    queued and are fetched on the next start), so SIGTERM ends a node within about this long."""
    proxy: str = ""
    """``http://[user:password@]host:port`` of an HTTP proxy every request goes through (https targets
    through a CONNECT tunnel); empty: none, or the environment's with ``proxy_env`` (polecat/fetch/proxy.py).
    Not saved with a crawl's settings: it may carry credentials, and it says where a run is, not what it
    crawls."""
    proxy_env: bool = False
    """Read ``http_proxy``/``HTTP_PROXY``, ``https_proxy``/``HTTPS_PROXY`` and ``no_proxy``/``NO_PROXY``
    as curl does (``proxy`` wins over the first two); off, the environment changes nothing."""
    no_proxy: tuple[str, ...] = ()
    """Targets reached without the proxy: ``*``, names (with their subdomains), IP addresses or CIDR
    blocks, each optionally with ``:port`` (polecat/fetch/proxy.py rule 2)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DnsConfig:
    nameservers: tuple[str, ...] = ()
    """``ip`` or ``ip:port``; empty uses the system's."""
    min_ttl: float = 60.0
    max_ttl: float = 600.0
    negative_ttl: float = 30.0
    timeout: float = 5.0
    """Seconds a name is asked for before its lookup fails: c-ares giving up sooner on its own timer is
    asked again (polecat/fetch/dns.py rule 11)."""
    allow_private: bool = False
    """Allow private, loopback and link-local addresses (tests, intranet crawls)."""
    ipv6: Ipv6Mode = "auto"
    """Ask AAAA records too: ``auto`` when this machine has a global IPv6 source address (found once,
    sending nothing; polecat/fetch/dns.py), ``on`` always (an IPv6 intranet, ``::1`` in tests), ``off``
    never. On a v4-only machine AAAA answers cannot be used and would double the queries."""
    max_entries: int = 200_000
    """Names the cache holds at most; the least recently used goes first."""
    concurrency: int = 256
    """Names asked of the nameservers at once; the rest wait their turn. A name whose nameservers never
    answer holds its place for ``timeout`` (polecat/fetch/dns.py rule 12)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RobotsConfig:
    max_bytes: int = 512 * 1024
    cache_ttl: float = 86_400.0
    retry_base: float = 60.0
    retry_cap: float = 6 * 3600.0
    max_unreachable_age: float = 30 * 86_400.0
    """After robots has been unreachable this long, a cached copy applies again."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DedupConfig:
    expected_urls: int = 10_000_000
    bloom_fp_rate: float = 0.01
    tracking_params: tuple[str, ...] = DEFAULT_TRACKING_PARAMS
    minhash_distance: int = 4
    """Index distance (bits of 64) for near-duplicate candidates; each candidate is then verified by a
    512-bin sketch (polecat/dedup/minhash.py), so precision does not depend on it."""
    near_duplicates: NearDuplicates = "delta"
    """What is kept of a near-duplicate's body (polecat/store/delta.py): ``delta`` (its exact bytes,
    compressed against the page it resembles; the default), ``full`` (stored whole, like any page) or
    ``drop`` (a lossy mode: only a revisit pointing at the page it resembles is kept, so its own bytes
    never come back)."""
    keep_query_order: tuple[str, ...] = ()
    """Host patterns whose query keys are not sorted (sites where ``?b=1&a=2`` is not ``?a=2&b=1``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreConfig:
    url: str = ""
    """Where sealed segments go: empty or ``file://...`` for local disk, ``s3://bucket/prefix`` etc."""
    segment_bytes: int = 256 * 1024 * 1024
    options: tuple[tuple[str, str], ...] = ()
    """Backend options passed to the object-store client (endpoint, region, credentials...)."""
    request_records: bool = True
    """Write a WARC ``request`` record beside every response and revisit (linked by
    ``WARC-Concurrent-To``), as archive tools expect."""
    archive_robots: bool = True
    """Store robots.txt responses too (they are not listed by ``pages`` or ``export --jsonl``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FrontierConfig:
    commit_ops: int = 2_000
    """The node commits after this many frontier operations..."""
    commit_ms: float = 250.0
    """...or after this many milliseconds, whichever comes first."""
    log_mb: float = 64.0
    """Above 0 (64, the default): a commit appends to the frontier's write-ahead log, and the LMDB itself
    is committed (an LMDB commit, polecat/frontier/db.py rule 6) once the log holds this many MiB of
    entries, counted before compression (the file holds ~a fifth: polecat/frontier/wal.py rule 12), and at
    the stop. 64 cut the bytes written per URL ~15x at 1M URLs (a breadth crawl's SSD wear; 16 wrote
    twice 64's), at the cost of a longer replay after a kill -9, a pause of leasing for each LMDB commit
    (seconds on a busy disk, a few per million URLs), more anonymous memory (the open transaction's dirty
    pages, up to LMDB's cap of 512 MB: RssAnon 298 MB against 183 MB at 1M URLs; ``writemap`` moves them
    to the file's pages) and, in a cluster, an LMDB commit per checkpoint round (polecat/node/commits.py
    rule 9; benchmarks/README.md, "Issue 39: the write-ahead log"). 0: every commit is an LMDB commit, no
    log is written (0.3.0's commits)."""
    log_share: float = 1.0
    """The log grows, past ``log_mb``, to this share of the bytes the frontier's LMDB tables use before an
    LMDB commit, up to ``log_max_mb`` (polecat/frontier/db.py rule 14; 0: ``log_mb`` always): an LMDB
    commit writes every page it dirtied, nearly all of a big table's, so a fixed log writes more bytes per
    URL the bigger the frontier (64 MiB: 859 B at 3M URLs, 2,744 B at 10M; share 1 up to 256 MiB: 587 B
    at 3M)."""
    log_max_mb: float = 0.0
    """The most MiB ``log_share`` lets the log reach (never under ``log_mb``; 0, the default: ``log_mb``
    always, as before): what a kill -9 leaves to replay before the next open's first request (3-7 s for
    62 MiB at 3M-4M URLs, 12-36 s for 255 MiB at 3M-10M, on a loaded 2-core VM, before the batched replay
    of wal.py rule 11; 7.1-14.3 s for 320 MiB at 11.5M since, which writes 985 B per URL at 10M against
    1,087 B with 256 MiB; benchmarks/README.md, "Issue 39: a faster log replay"), a leasing pause per LMDB
    commit (max 2.0 s against 3.5 s at 3M) and dirty pages in memory (RssAnon 425 MB against 486 MB;
    benchmarks/README.md, "Issue 39: LMDB commits sized to the data")."""
    writemap: bool = True
    """Open the frontier's LMDB with ``writemap`` (the default): the open transaction's dirty pages live in
    the file's mapping, not in anonymous memory: peak RssAnon 205 MiB against 360 MiB in a 1,000,000-host
    breadth crawl (the issue 39 bound is 300 MB), for ~1.26 times the bytes the disk wrote over a push of
    1M URLs and 100,000 leases (923 against 735 MB by /proc/diskstats: the kernel writes a page back
    whenever it likes, so one changed again is written again; db.py rules 11-12; benchmarks/README.md,
    "Issue 39: writemap by default"); at 10M seeds with ``log_max_mb = 256``, 1,319 against 895 B written per
    URL admitted, for 387 against 942 MiB of peak RssAnon: the kernel writes back a page dirty for 30 s
    (``vm.dirty_expire_centisecs``) whatever the log's cap, so a bigger log saves little with the map
    ("Issue 39: bytes written per URL at the defaults"). The data file's blocks are reserved ahead with
    ``fallocate`` so that a full disk stops the node cleanly; a filesystem without it opens without
    ``writemap`` (logged).
    The data file has the size of ``map_size`` (sparse: disk use is the pages reserved), which ``ls`` and
    copies without ``--sparse`` see. False: the dirty pages are malloc'd by LMDB and kept at their peak."""
    map_size: int = 64 * 1024**3
    working_hosts: int = 50_000
    """Host records kept in memory at most (polecat/frontier/host_table.py rule 6): the hosts in rotation.
    The others wait in LMDB, in an index by due time, whatever their number."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RefreshConfig:
    """When a fetched URL is due again (see polecat/frontier/refresh.py for the model and rules)."""

    enabled: bool = False
    """Re-queue fetched URLs whose refresh is due (``--refresh``): at the start of a run, and every
    ``scan_interval`` seconds while a node serves."""
    scan_interval: float = 60.0
    min_interval: float = 3_600.0
    """Floor of a URL's refresh interval, seconds (``--refresh-min``)."""
    max_interval: float = 30 * 86_400.0
    """Ceiling of a URL's refresh interval, seconds (``--refresh-max``)."""
    k: float = 1.0
    """Interval = k / estimated change rate: the expected number of changes between two visits."""
    default_interval: float = 86_400.0
    """Interval before a URL has history and no sitemap prior."""
    min_visits: int = 3
    """Observed intervals before the estimate replaces the prior."""
    refresh_share: float = 0.5
    """Share of each host's fetches a serving node gives to refreshes while other URLs wait on the host
    (the rest stays with discovery)."""
    overrides: tuple[tuple[str, float], ...] = ()
    """Per-host-pattern fixed intervals, ``(pattern, seconds)``, e.g. a news site every 600 s."""
    never: tuple[str, ...] = ()
    """Host patterns whose URLs are never refreshed."""
    important: tuple[str, ...] = ()
    """URL regexes of pages counted in the freshness SLO (besides seeds and high-importance pages)."""
    important_min: float = 1.0
    """Pages with at least this importance (seeds have 1.0) count in the freshness SLO."""
    sitemaps: bool = True
    """Fetch the sitemaps robots.txt names (``Sitemap:`` lines) and queue the URLs they list."""
    guess_sitemap: bool = False
    """Also try ``/sitemap.xml`` of every origin whose robots.txt was fetched."""
    sitemap_depth: int = 3
    """Levels of nested sitemap indexes followed below a root sitemap."""
    sitemap_files: int = 1000
    """Sitemap files fetched at most per root sitemap and run."""
    feeds: tuple[str, ...] = ()
    """RSS 2.0 / Atom feed URLs the operator lists (``--feed``): queued like seeds, polled on the schedule
    their history learns (conditional GET), their new items queued at once with the feed's importance.
    Feeds that pages link (``<link rel="alternate" type="application/rss+xml">``) are followed anyway."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterConfig:
    """The hand-off between the members of one crawl (``--workers``; see polecat/cluster/), and the
    multi-machine cluster that ``polecat node`` joins when ``etcd`` is set."""

    batch_urls: int = 1024
    """URLs per hand-off batch (a batch also goes at every commit of the node, however few it holds)."""
    inbox_urls: int = 50_000
    """URLs a member accepts from others before they are committed; past it senders wait (back-pressure)."""
    max_backlog: int = 100_000
    """Unacknowledged URLs a member may have for others before it stops leasing pages until they drain."""
    etcd: tuple[str, ...] = ()
    """etcd v3 endpoints (``["http://host1:2379", "http://host2:2379"]``, or all ``https://`` for TLS;
    one string, or several separated by commas, works too), members of one etcd cluster: a node uses one
    at a time and moves to the next when it fails. Set: ``polecat node`` joins the cluster coordinated
    there."""
    etcd_ca: str = ""
    """PEM file of the CAs that sign etcd's certificate, with ``https://`` endpoints (empty: the
    system's roots)."""
    etcd_cert: str = ""
    """PEM client certificate this node shows etcd (``--client-cert-auth``), with ``etcd_key``."""
    etcd_key: str = ""
    """PEM private key of ``etcd_cert``."""
    etcd_user: str = ""
    """etcd user the node authenticates as (etcd's ``auth enable``); its password comes from
    ``POLECAT_ETCD_PASSWORD`` or ``etcd_password_file``."""
    etcd_password_file: str = ""
    """File holding ``etcd_user``'s password (one line); never logged."""
    etcd_password: str = field(default="", repr=False)
    """``etcd_user``'s password as ``POLECAT_ETCD_PASSWORD`` sets it (prefer that or the file to writing
    it in the TOML); never logged nor shown in a repr."""
    name: str = "polecat"
    """The cluster's name: its keys live under ``/<name>/`` in etcd, so clusters can share an etcd."""
    node_id: str = ""
    """This node's id in the cluster (stable across restarts); required with ``etcd``."""
    advertise: str = ""
    """``http://host:port`` where the other nodes reach this node's API; required with ``etcd``."""
    secret: str = ""
    """Shared secret signing hand-offs between nodes (HMAC-SHA256), at least 16 characters; required
    with ``etcd``. ``POLECAT_CLUSTER_SECRET`` sets it without writing it in a file."""
    lease_ttl: int = 10
    """Seconds of the node's etcd lease: a dead node's slices move after this; a node cut off from etcd
    stops fetching after half of it."""
    etcd_start_wait: float = 60.0
    """Seconds ``polecat node`` keeps trying to reach etcd at start-up when it is not there (connection
    refused, a timeout: etcd starting after the node, as after a reboot), logging each try at WARNING,
    before it stops with exit 1; 0: stop at the first failure. The wrong CA, TLS or password stops it
    at once whatever this says; SIGTERM or SIGINT while it waits ends it at once, with exit 0."""
    checkpoints: str = ""
    """Object store every node ships its slices' state to (``file:///dir``, ``s3://bucket/prefix``,
    ``gs://``, ``az://``), shared by the cluster: a dead node's slices are adopted from there. Empty: no
    failover (a dead node's queued URLs are lost with its disk)."""
    checkpoint_options: tuple[tuple[str, str], ...] = ()
    """Backend options of ``checkpoints`` (endpoint, region, credentials...), as ``store.options``."""
    checkpoint_interval: float = 60.0
    """Seconds between two checkpoints of a node's slices (and at most this long, plus the upload, a
    sender keeps URLs it handed over before their owner's checkpoint holds them)."""
    content_claims: bool = True
    """Store each body once across the members of a ``--workers`` crawl: a page whose body another
    worker stored first becomes a revisit of it (polecat/cluster/claims.py). False: each worker dedups
    only against its own store."""
    claim_wait: float = 1.0
    """Seconds a page waits for its content claim's answer before it is stored in full and marked."""
    claim_pages: int = 1024
    """Pages a member holds while their claims are answered; past it the oldest is stored in full."""
    claim_book: int = 200_000
    """Content hashes a member remembers for the claims it answers, kept in its frontier across restarts
    and moved with their slices (the oldest are forgotten: a later copy of one is stored in full
    again)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeConfig:
    """The long-lived node (``polecat node``): its HTTP API and how it stops."""

    listen: str = "127.0.0.1:8470"
    """``host:port`` of the operator API, metrics and status page (``[::1]:8470`` for IPv6)."""
    token: str = ""
    """Bearer token the API requires; mandatory unless ``listen`` is a loopback address. The
    ``POLECAT_TOKEN`` environment variable sets it without writing it in a file."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Config:
    """Everything a node needs. Build it with :func:`config_from_mapping` or directly."""

    data_dir: Path = Path("polecat-data")
    scope: ScopeConfig = field(default_factory=ScopeConfig)
    politeness: PolitenessConfig = field(default_factory=PolitenessConfig)
    fetch: FetchConfig = field(default_factory=FetchConfig)
    dns: DnsConfig = field(default_factory=DnsConfig)
    robots: RobotsConfig = field(default_factory=RobotsConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    frontier: FrontierConfig = field(default_factory=FrontierConfig)
    refresh: RefreshConfig = field(default_factory=RefreshConfig)
    node: NodeConfig = field(default_factory=NodeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    progress: bool = False
    """Show live progress on the terminal."""
    workers: int = 1
    """Worker processes sharing the crawl (``--workers``); 0 or "auto": one per core."""

    def __post_init__(self) -> None:
        from polecat.config.validation import validate  # validation reads the sections defined here

        validate(self)


SECTIONS: dict[str, type[Any]] = {
    "scope": ScopeConfig,
    "politeness": PolitenessConfig,
    "fetch": FetchConfig,
    "dns": DnsConfig,
    "robots": RobotsConfig,
    "dedup": DedupConfig,
    "store": StoreConfig,
    "frontier": FrontierConfig,
    "refresh": RefreshConfig,
    "node": NodeConfig,
    "cluster": ClusterConfig,
}
