"""The one configuration object.

The CLI, TOML files and the library API all build a :class:`Config` through :func:`config_from_mapping`,
which validates every field once, at start-up, and names the field in its error. Each component receives
only its own section. Sections are frozen, keyword-only dataclasses.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from polecat.errors import ConfigError
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


@dataclass(frozen=True, kw_only=True, slots=True)
class ScopeConfig:
    """What the crawl may enter."""

    seeds: tuple[str, ...] = ()
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


@dataclass(frozen=True, kw_only=True, slots=True)
class DnsConfig:
    nameservers: tuple[str, ...] = ()
    """``ip`` or ``ip:port``; empty uses the system's."""
    min_ttl: float = 60.0
    max_ttl: float = 600.0
    negative_ttl: float = 30.0
    timeout: float = 5.0
    allow_private: bool = False
    """Allow private, loopback and link-local addresses (tests, intranet crawls)."""


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
    store_near_duplicates: bool = False
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
    map_size: int = 64 * 1024**3


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
    """etcd v3 endpoints (``["http://host1:2379", "http://host2:2379"]``; one string, or several
    separated by commas, works too), members of one etcd cluster: a node uses one at a time and moves to
    the next when it fails. Set: ``polecat node`` joins the cluster coordinated there."""
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
    checkpoints: str = ""
    """Object store every node ships its slices' state to (``file:///dir``, ``s3://bucket/prefix``,
    ``gs://``, ``az://``), shared by the cluster: a dead node's slices are adopted from there. Empty: no
    failover (a dead node's queued URLs are lost with its disk)."""
    checkpoint_options: tuple[tuple[str, str], ...] = ()
    """Backend options of ``checkpoints`` (endpoint, region, credentials...), as ``store.options``."""
    checkpoint_interval: float = 60.0
    """Seconds between two checkpoints of a node's slices (and at most this long, plus the upload, a
    sender keeps URLs it handed over before their owner's checkpoint holds them)."""


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
        validate(self)


_SECTIONS: dict[str, type[Any]] = {
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


def _coerce(name: str, hint: Any, value: Any) -> Any:
    """Convert a TOML/CLI value to the annotated type, or raise ConfigError naming the field."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(name, inner[0], value)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{name}: must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if origin is tuple:
        if isinstance(value, Mapping) and len(args) == 2 and args[1] is Ellipsis:
            value = list(value.items())
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(f"{name}[{i}]", args[0], v) for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{name}: expected {len(args)} items, got {value!r}")
        return tuple(_coerce(f"{name}[{i}]", a, v) for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name}: expected a string, got {value!r}")
        return value
    if hint is Path:
        if not isinstance(value, str | Path):
            raise ConfigError(f"{name}: expected a path, got {value!r}")
        return Path(value)
    raise ConfigError(f"{name}: unsupported type {hint!r}")  # pragma: no cover - schema bug


_RENAMED: dict[str, str] = {"dedup.simhash_distance": "dedup.minhash_distance"}
"""Old setting name -> new one. An old name still works, with a deprecation warning in the log; giving
both is an error. (``simhash_distance``: the page fingerprint has been a MinHash since before 0.1.)"""


def _renamed(prefix: str, data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with deprecated names of section ``prefix`` replaced by their new names."""
    out = dict(data)
    for key in data:
        new = _RENAMED.get(prefix + key)
        if new is None:
            continue
        new_key = new.removeprefix(prefix)
        if new_key in data:
            raise ConfigError(f"{prefix}{key}: deprecated name of {new}, which is also set; keep only {new}")
        logging.getLogger(__name__).warning("%s%s is deprecated: use %s (same meaning)", prefix, key, new)
        out[new_key] = out.pop(key)
    return out


def _build(cls: type[Any], prefix: str, data: Mapping[str, Any]) -> Any:
    data = _renamed(prefix, data)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: unknown setting (known: {', '.join(sorted(names))})")
    if prefix == "cluster." and isinstance(data.get("etcd"), str):  # one string: comma-separated
        data = {**data, "etcd": [e.strip() for e in data["etcd"].split(",") if e.strip()]}
    kwargs = {k: _coerce(f"{prefix}{k}", hints[k], v) for k, v in data.items()}
    return cls(**kwargs)


def config_from_mapping(data: Mapping[str, Any]) -> Config:
    """Build and validate a Config from nested plain data (a parsed TOML document, CLI overrides)."""
    top: dict[str, Any] = {}
    for key, value in data.items():
        if key in _SECTIONS:
            if not isinstance(value, Mapping):
                raise ConfigError(f"[{key}]: expected a table")
            top[key] = _build(_SECTIONS[key], f"{key}.", value)
        elif key in ("data_dir", "progress", "workers"):
            value = 0 if key == "workers" and value == "auto" else value
            top[key] = _coerce(key, typing.get_type_hints(Config)[key], value)
        else:
            known = ", ".join(sorted([*_SECTIONS, "data_dir", "progress", "workers"]))
            raise ConfigError(f"{key}: unknown setting (known: {known})")
    return Config(**top)


def load_toml(path: Path) -> dict[str, Any]:
    """Read a TOML config file into plain data, with a clear error on a bad file."""
    import tomllib  # only a run with a config file pays for it (~6 ms)

    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:  # TOML must be UTF-8
        raise ConfigError(f"config file {path}: {exc}") from exc


def merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two config mappings; ``over`` wins (CLI flags over the TOML file)."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


_HOST_PATTERN = re.compile(r"^(\*\.)?[a-z0-9_.:\[\]-]+$")


def is_host_pattern(pattern: str) -> bool:
    """Whether ``pattern`` is a host pattern (``example.com``, ``host:port`` or ``*.example.com``)."""
    return bool(_HOST_PATTERN.match(pattern.lower()))


def _check(cond: bool, name: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{name}: {msg}")


def _seed_problem(url: str) -> str | None:
    """Why ``url`` cannot be a seed (with the likely fix), or None."""
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme.lower() in ("http", "https") and parts.hostname:
        return None
    if "://" not in text and text and " " not in text:
        guess = "http://" + text + ("" if "/" in text else "/")
        return f"{text!r} is not an http(s) URL: did you mean {guess}?"
    return f"{text!r} is not an http(s) URL"


def _nameserver_problem(entry: str) -> str | None:
    """Why ``entry`` is not ``ip``, ``ip:port``, ``[ipv6]`` or ``[ipv6]:port`` (port 1-65535), or None."""
    host, port = entry, None
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return f"{entry!r} is not ip, ip:port or [ipv6]:port"
        port = rest[1:] if rest else None
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"{entry!r}: {host!r} is not an IP address (a nameserver is given by address, not by name)"
    if port is not None and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return f"{entry!r}: port {port!r} is not in 1-65535"
    return None


def validate(cfg: Config) -> None:
    """Check cross-field rules; raise ConfigError naming the first bad field."""
    s, p, f, d, r, dd, st, fr = (
        cfg.scope, cfg.politeness, cfg.fetch, cfg.dns, cfg.robots, cfg.dedup, cfg.store, cfg.frontier,
    )
    _check(not cfg.data_dir.exists() or cfg.data_dir.is_dir(), "data_dir",
           f"{cfg.data_dir} exists and is not a directory")
    for i, seed in enumerate(s.seeds):
        problem = _seed_problem(seed)
        _check(problem is None, f"scope.seeds[{i}]", problem or "")
    for name, patterns in (("allow", s.allow), ("deny", s.deny)):
        for i, rx in enumerate(patterns):
            try:
                re.compile(rx)
            except re.error as exc:
                raise ConfigError(f"scope.{name}[{i}]: bad regex {rx!r}: {exc}") from exc
    for pat in s.block:
        _check(is_host_pattern(pat), "scope.block", f"bad host pattern {pat!r}")
    for pat in cfg.dedup.keep_query_order:
        _check(is_host_pattern(pat), "dedup.keep_query_order", f"bad host pattern {pat!r}")
    for pat, rate in p.throttle:
        _check(is_host_pattern(pat), "politeness.throttle", f"bad host pattern {pat!r}")
        _check(rate > 0, "politeness.throttle", f"rate for {pat!r} must be > 0, got {rate}")
    _check(s.max_pages >= 0, "scope.max_pages", "must be >= 0")
    _check(s.max_depth >= 0, "scope.max_depth", "must be >= 0")
    _check(s.max_url_length >= 32, "scope.max_url_length", "must be >= 32")
    _check(s.max_pages_per_host > 0, "scope.max_pages_per_host", "must be > 0")
    _check(s.max_queue_per_host > 0, "scope.max_queue_per_host", "must be > 0")
    for name in ("max_hosts", "max_new_hosts_per_page", "max_queued", "max_urls_per_shape"):
        _check(getattr(s, name) > 0, f"scope.{name}", "must be > 0")
    _check(0 < p.rate <= 1000, "politeness.rate", f"must be in (0, 1000] req/s, got {p.rate}")
    _check(p.max_crawl_delay >= 0, "politeness.max_crawl_delay", "must be >= 0")
    _check(0 < p.backoff_factor < 1, "politeness.backoff_factor", "must be in (0, 1)")
    _check(0 < p.min_rate_factor <= 1, "politeness.min_rate_factor", "must be in (0, 1]")
    _check(p.recover_step > 0, "politeness.recover_step", "must be > 0")
    _check(0 < p.quarantine_base <= p.quarantine_cap, "politeness.quarantine_base",
           "must be > 0 and <= quarantine_cap")
    _check(p.park_after_failures >= 1, "politeness.park_after_failures", "must be >= 1")
    _check(p.give_up_after >= 0, "politeness.give_up_after", "must be >= 0 (0: never give up)")
    _check(p.give_up_backoff > 0, "politeness.give_up_backoff", "must be > 0")
    _check(p.max_url_attempts >= 1, "politeness.max_url_attempts", "must be >= 1")
    # isprintable: no CR, LF or other control character can end the header it is sent in.
    _check(bool(f.user_agent.strip()) and f.user_agent.isprintable(), "fetch.user_agent",
           "must be a non-empty single line without control characters")
    _check(1 <= f.concurrency <= 100_000, "fetch.concurrency", "must be in [1, 100000]")
    _check(f.connections_per_host >= 1, "fetch.connections_per_host", "must be >= 1")
    for name in ("connect_timeout", "first_byte_timeout", "read_gap_timeout", "total_timeout", "stop_grace"):
        _check(getattr(f, name) > 0, f"fetch.{name}", "must be > 0")
    _check(f.max_body_bytes >= 1024, "fetch.max_body_bytes", "must be >= 1024")
    _check(4096 <= f.max_parse_bytes <= 64 * 2**20, "fetch.max_parse_bytes", "must be in [4096, 64 MiB]")
    _check(0 <= f.max_redirects <= 20, "fetch.max_redirects", "must be in [0, 20]")
    _check(f.ca_bundle is None or f.ca_bundle.is_file(), "fetch.ca_bundle", f"no such file: {f.ca_bundle}")
    _check(0 < d.min_ttl <= d.max_ttl, "dns.min_ttl", "must be > 0 and <= dns.max_ttl")
    _check(d.negative_ttl >= 0, "dns.negative_ttl", "must be >= 0")
    _check(d.timeout > 0, "dns.timeout", "must be > 0")
    for i, server in enumerate(d.nameservers):
        problem = _nameserver_problem(server)
        _check(problem is None, f"dns.nameservers[{i}]", problem or "")
    _check(r.max_bytes >= 500 * 1024, "robots.max_bytes", "RFC 9309 requires parsing at least 500 KiB")
    _check(0 < r.cache_ttl <= 86_400, "robots.cache_ttl", "must be in (0, 86400] seconds (RFC 9309: 24 h)")
    _check(0 < r.retry_base <= r.retry_cap, "robots.retry_base", "must be > 0 and <= robots.retry_cap")
    _check(0 < dd.bloom_fp_rate < 0.5, "dedup.bloom_fp_rate", "must be in (0, 0.5)")
    _check(dd.expected_urls >= 1000, "dedup.expected_urls", "must be >= 1000")
    _check(0 <= dd.minhash_distance <= 8, "dedup.minhash_distance",
           "must be in [0, 8] (beyond 3 bits the 4x16-bit bands find most, not all, candidates)")
    _check(st.segment_bytes >= 1024 * 1024, "store.segment_bytes", "must be >= 1 MiB")
    _check(st.url == "" or "://" in st.url, "store.url",
           f"must be a URL such as s3://bucket/prefix, got {st.url!r}")
    for name in ("batch_urls", "inbox_urls", "max_backlog"):
        _check(getattr(cfg.cluster, name) >= 1, f"cluster.{name}", "must be >= 1")
    _check(0 <= cfg.workers <= 1024, "workers", f'must be "auto" or in [1, 1024], got {cfg.workers}')
    _check(fr.commit_ops >= 1, "frontier.commit_ops", "must be >= 1")
    _check(fr.commit_ms > 0, "frontier.commit_ms", "must be > 0")
    _check(fr.map_size >= 16 * 1024 * 1024, "frontier.map_size", "must be >= 16 MiB")
    _validate_refresh(cfg.refresh)
    _validate_node(cfg.node)
    _validate_cluster(cfg.cluster)


def _validate_refresh(rf: RefreshConfig) -> None:
    _check(0 < rf.min_interval <= rf.max_interval, "refresh.min_interval",
           "must be > 0 and <= refresh.max_interval (--refresh-min, --refresh-max)")
    _check(rf.k > 0, "refresh.k", "must be > 0")
    _check(rf.scan_interval > 0, "refresh.scan_interval", "must be > 0")
    _check(rf.default_interval > 0, "refresh.default_interval", "must be > 0")
    _check(rf.min_visits >= 1, "refresh.min_visits", "must be >= 1")
    _check(0 <= rf.refresh_share <= 1, "refresh.refresh_share", "must be in [0, 1]")
    for pat, every in rf.overrides:
        _check(bool(_HOST_PATTERN.match(pat.lower())), "refresh.overrides", f"bad host pattern {pat!r}")
        _check(every > 0, "refresh.overrides", f"interval for {pat!r} must be > 0 seconds, got {every}")
    for pat in rf.never:
        _check(bool(_HOST_PATTERN.match(pat.lower())), "refresh.never", f"bad host pattern {pat!r}")
    for i, rx in enumerate(rf.important):
        try:
            re.compile(rx)
        except re.error as exc:
            raise ConfigError(f"refresh.important[{i}]: bad regex {rx!r}: {exc}") from exc
    _check(rf.important_min > 0, "refresh.important_min", "must be > 0")
    _check(0 <= rf.sitemap_depth <= 10, "refresh.sitemap_depth", "must be in [0, 10]")
    _check(rf.sitemap_files >= 1, "refresh.sitemap_files", "must be >= 1")


def _validate_node(nd: NodeConfig) -> None:
    try:
        split_listen(nd.listen)
    except ValueError as exc:
        raise ConfigError(f"node.listen (--listen): {exc}") from exc
    _check("\n" not in nd.token and nd.token == nd.token.strip(), "node.token",
           "must be one line without surrounding spaces")


_CLUSTER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _http_address(value: str) -> bool:
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:  # a port out of range
        return False
    return parts.scheme == "http" and bool(parts.hostname) and port is not None and not parts.path.strip("/")


def _validate_cluster(cl: ClusterConfig) -> None:
    _check(cl.checkpoints == "" or "://" in cl.checkpoints, "cluster.checkpoints",
           f"must be a URL such as s3://bucket/prefix or file:///dir, got {cl.checkpoints!r}")
    _check(0.1 <= cl.checkpoint_interval <= 86_400, "cluster.checkpoint_interval",
           "must be in [0.1, 86400] seconds")
    _check(not cl.checkpoints or bool(cl.etcd), "cluster.checkpoints",
           "needs cluster.etcd: slice checkpoints are for the nodes of a cluster")
    if not cl.etcd:
        return
    for i, endpoint in enumerate(cl.etcd):
        _check(_http_address(endpoint), f"cluster.etcd[{i}]", f"must be http://host:port, got {endpoint!r}")
    _check(len(set(cl.etcd)) == len(cl.etcd), "cluster.etcd", f"lists an endpoint twice: {list(cl.etcd)}")
    _check(bool(_CLUSTER_ID.fullmatch(cl.name)), "cluster.name", "must be 1-63 of A-Z a-z 0-9 . _ -")
    _check(bool(_CLUSTER_ID.fullmatch(cl.node_id)), "cluster.node_id",
           "required with cluster.etcd: 1-63 of A-Z a-z 0-9 . _ -")
    _check(_http_address(cl.advertise), "cluster.advertise",
           f"required with cluster.etcd: http://host:port peers reach this node at, got {cl.advertise!r}")
    one_line = cl.secret == cl.secret.strip() and "\n" not in cl.secret
    _check(len(cl.secret) >= 16 and one_line, "cluster.secret",
           "required with cluster.etcd: one line of at least 16 characters (or POLECAT_CLUSTER_SECRET)")
    _check(2 <= cl.lease_ttl <= 300, "cluster.lease_ttl", "must be in [2, 300] seconds")


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) as ``(host, port)``; ValueError saying what is wrong."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {listen!r}")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad port in {listen!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)
