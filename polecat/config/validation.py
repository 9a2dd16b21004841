"""Checking a :class:`~polecat.config.sections.Config` once, at start-up: every rule between fields, each
error naming its field (a :class:`~polecat.errors.ConfigError`)."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from polecat.config.proxy import parse_proxy
from polecat.config.sections import (
    ClusterConfig,
    Config,
    NodeConfig,
    RefreshConfig,
)
from polecat.errors import ConfigError

_HOST_PATTERN = re.compile(r"^(\*\.)?[a-z0-9_.:\[\]-]+$")


MAX_HOST_PATTERN = len("*.") + 253 + len(":65535")
"""Characters in a host pattern: a DNS name has at most 253 (a longer one was a 500 from LMDB's key size
at ``POST /admin/throttles``)."""


def is_host_pattern(pattern: str) -> bool:
    """Whether ``pattern`` is a host pattern (``example.com``, ``host:port`` or ``*.example.com``) of
    at most :data:`MAX_HOST_PATTERN` characters."""
    return len(pattern) <= MAX_HOST_PATTERN and bool(_HOST_PATTERN.match(pattern.lower()))


def _check(cond: bool, name: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{name}: {msg}")


def _seed_problem(url: str) -> str | None:
    """Why ``url`` cannot be a seed (with the likely fix), or None."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port  # ValueError out of 0-65535
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535"
        return f"{text[:200]!r} is not a URL: {exc}"
    if port == 0:
        return f"{text[:200]!r}: port 0 cannot be fetched (1-65535)"
    if parts.hostname and any(c <= " " or c == "\x7f" for c in parts.hostname):
        return f"{text[:200]!r}: the host name holds a space or a control character"
    if parts.scheme.lower() in ("http", "https") and parts.hostname:
        return None
    if text.startswith(("/", "./", "../", "~")) or parts.scheme.lower() == "file":
        return (f"{text!r} is a file path, not an http(s) URL: polecat fetches over HTTP (a directory of "
                "pages: serve it, e.g. python3 -m http.server -d DIR -b 127.0.0.1)")
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
    if s.seeds_file is not None and not s.seeds_file.is_file():
        # /dev/zero, a FIFO or a directory: nothing a crawl can read to its end as a list of URLs
        _check(False, "scope.seeds_file", f"not a regular file: {s.seeds_file}" if s.seeds_file.exists()
               else f"no such file: {s.seeds_file}")
    _check(s.max_pages >= 0, "scope.max_pages", "must be >= 0")
    _check(s.max_depth >= 0, "scope.max_depth", "must be >= 0")
    _check(s.max_url_length >= 32, "scope.max_url_length", "must be >= 32")
    _check(s.max_requisite_bytes >= 1024, "scope.max_requisite_bytes", "must be >= 1024")
    _check(s.max_pages_per_host > 0, "scope.max_pages_per_host", "must be > 0")
    _check(s.max_queue_per_host > 0, "scope.max_queue_per_host", "must be > 0")
    for name in ("max_hosts", "max_new_hosts_per_page", "max_queued", "max_urls_per_shape",
                 "max_requisites_per_page", "max_requisites_per_host", "max_requisites"):
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
    if f.proxy:
        parse_proxy(f.proxy, "fetch.proxy")
    for i, entry in enumerate(f.no_proxy):
        _check(bool(entry.strip()) and entry.isprintable() and len(entry) <= MAX_HOST_PATTERN + 4,
               f"fetch.no_proxy[{i}]", f"{entry[:80]!r} is not a host, address or CIDR block")
    _check(0 < d.min_ttl <= d.max_ttl, "dns.min_ttl", "must be > 0 and <= dns.max_ttl")
    _check(d.negative_ttl >= 0, "dns.negative_ttl", "must be >= 0")
    _check(d.timeout > 0, "dns.timeout", "must be > 0")
    _check(d.max_entries >= 1, "dns.max_entries", "must be >= 1")
    _check(1 <= d.concurrency <= 65_536, "dns.concurrency", "must be in [1, 65536]")
    for i, server in enumerate(d.nameservers):
        problem = _nameserver_problem(server)
        _check(problem is None, f"dns.nameservers[{i}]", problem or "")
    _check(r.max_bytes >= 500 * 1024, "robots.max_bytes", "RFC 9309 requires parsing at least 500 KiB")
    _check(0 < r.cache_ttl <= 86_400, "robots.cache_ttl", "must be in (0, 86400] seconds (RFC 9309: 24 h)")
    _check(0 < r.retry_base <= r.retry_cap, "robots.retry_base", "must be > 0 and <= robots.retry_cap")
    _check(0 < dd.bloom_fp_rate < 0.5, "dedup.bloom_fp_rate", "must be in (0, 0.5)")
    # The Bloom filter is sized from it up front (~1.2 bytes a URL): 4 billion is ~5 GB, past any one
    # node's share; 10^17 was a MemoryError.
    _check(1000 <= dd.expected_urls <= 4_000_000_000, "dedup.expected_urls", "must be in [1000, 4e9]")
    _check(0 <= dd.minhash_distance <= 8, "dedup.minhash_distance",
           "must be in [0, 8] (beyond 3 bits the 4x16-bit bands find most, not all, candidates)")
    _check(st.segment_bytes >= 1024 * 1024, "store.segment_bytes", "must be >= 1 MiB")
    _check(st.url == "" or "://" in st.url, "store.url",
           f"must be a URL such as s3://bucket/prefix, got {st.url!r}")
    for name in ("batch_urls", "inbox_urls", "max_backlog", "claim_pages", "claim_book"):
        _check(getattr(cfg.cluster, name) >= 1, f"cluster.{name}", "must be >= 1")
    _check(0 <= cfg.workers <= 1024, "workers", f'must be "auto" or in [1, 1024], got {cfg.workers}')
    _check(fr.commit_ops >= 1, "frontier.commit_ops", "must be >= 1")
    _check(fr.commit_ms > 0, "frontier.commit_ms", "must be > 0")
    _check(0 <= fr.log_mb <= 4096, "frontier.log_mb",
           f"must be in [0, 4096] (MiB of write-ahead log between LMDB commits; 0: no log), got {fr.log_mb}")
    _check(0 <= fr.log_share <= 16, "frontier.log_share",
           f"must be in [0, 16] (the log's size before an LMDB commit, as a share of the LMDB's; 0: "
           f"frontier.log_mb always), got {fr.log_share}")
    _check(0 <= fr.log_max_mb <= 65536, "frontier.log_max_mb",
           f"must be in [0, 65536] (MiB the log may reach by frontier.log_share; frontier.log_mb is the "
           f"floor; 0: frontier.log_mb always), got {fr.log_max_mb}")
    _check(fr.map_size >= 16 * 1024 * 1024, "frontier.map_size", "must be >= 16 MiB")
    _check(fr.working_hosts >= 100, "frontier.working_hosts", "must be >= 100 (host records kept in memory)")
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
    for i, feed in enumerate(rf.feeds):
        problem = _seed_problem(feed)
        _check(problem is None, f"refresh.feeds[{i}]", problem or "")


MIN_SECRET = 16
"""Characters in a bearer token or a cluster secret, at least."""


def _validate_node(nd: NodeConfig) -> None:
    try:
        split_listen(nd.listen)
    except ValueError as exc:
        raise ConfigError(f"node.listen (--listen): {exc}") from exc
    _check("\n" not in nd.token and nd.token == nd.token.strip(), "node.token",
           "must be one line without surrounding spaces")
    # A short token is guessed: at least MIN_SECRET characters, as for cluster.secret.
    _check(not nd.token or len(nd.token) >= MIN_SECRET, "node.token",
           f"must be at least {MIN_SECRET} characters (POLECAT_TOKEN), got {len(nd.token)}")


_CLUSTER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _http_address(value: str, schemes: tuple[str, ...] = ("http",)) -> bool:
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:  # a port out of range
        return False
    return parts.scheme in schemes and bool(parts.hostname) and port is not None and not parts.path.strip("/")


def _validate_etcd_access(cl: ClusterConfig) -> None:
    """TLS and the etcd user (cluster/aetcd_client.py rule 4): settings that fit together."""
    tls = {e.startswith("https://") for e in cl.etcd}
    _check(len(tls) == 1, "cluster.etcd", f"mixes http:// and https:// endpoints: {list(cl.etcd)}")
    if tls != {True}:
        for name in ("etcd_ca", "etcd_cert", "etcd_key"):
            _check(not getattr(cl, name), f"cluster.{name}", "needs https:// etcd endpoints")
    _check(bool(cl.etcd_cert) == bool(cl.etcd_key), "cluster.etcd_cert",
           "and cluster.etcd_key go together (a client certificate and its key)")
    _check(not (cl.etcd_password and cl.etcd_password_file), "cluster.etcd_password_file",
           "and POLECAT_ETCD_PASSWORD are both set: keep one")
    has_password = bool(cl.etcd_password or cl.etcd_password_file)
    _check(not cl.etcd_user or has_password, "cluster.etcd_user",
           "needs a password: POLECAT_ETCD_PASSWORD or cluster.etcd_password_file")
    _check(bool(cl.etcd_user) or not has_password, "cluster.etcd_user",
           "is empty but an etcd password is set (POLECAT_ETCD_PASSWORD or cluster.etcd_password_file)")


def _validate_cluster(cl: ClusterConfig) -> None:
    _check(cl.checkpoints == "" or "://" in cl.checkpoints, "cluster.checkpoints",
           f"must be a URL such as s3://bucket/prefix or file:///dir, got {cl.checkpoints!r}")
    _check(0.01 <= cl.claim_wait <= 60, "cluster.claim_wait", "must be in [0.01, 60] seconds")
    _check(0.1 <= cl.checkpoint_interval <= 86_400, "cluster.checkpoint_interval",
           "must be in [0.1, 86400] seconds")
    _check(not cl.checkpoints or bool(cl.etcd), "cluster.checkpoints",
           "needs cluster.etcd: slice checkpoints are for the nodes of a cluster")
    _check(not cl.secret or len(cl.secret) >= MIN_SECRET, "cluster.secret",
           f"must be at least {MIN_SECRET} characters (POLECAT_CLUSTER_SECRET), got {len(cl.secret)}")
    if not cl.etcd:
        return
    for i, endpoint in enumerate(cl.etcd):
        _check(_http_address(endpoint, ("http", "https")), f"cluster.etcd[{i}]",
               f"must be http://host:port or https://host:port, got {endpoint!r}")
    _check(len(set(cl.etcd)) == len(cl.etcd), "cluster.etcd", f"lists an endpoint twice: {list(cl.etcd)}")
    _validate_etcd_access(cl)
    _check(bool(_CLUSTER_ID.fullmatch(cl.name)), "cluster.name", "must be 1-63 of A-Z a-z 0-9 . _ -")
    _check(bool(_CLUSTER_ID.fullmatch(cl.node_id)), "cluster.node_id",
           "required with cluster.etcd: 1-63 of A-Z a-z 0-9 . _ -")
    _check(_http_address(cl.advertise), "cluster.advertise",
           f"required with cluster.etcd: http://host:port peers reach this node at, got {cl.advertise!r}")
    one_line = cl.secret == cl.secret.strip() and "\n" not in cl.secret
    _check(len(cl.secret) >= MIN_SECRET and one_line, "cluster.secret",
           "required with cluster.etcd: one line of at least 16 characters (or POLECAT_CLUSTER_SECRET)")
    _check(2 <= cl.lease_ttl <= 300, "cluster.lease_ttl", "must be in [2, 300] seconds")
    _check(0 <= cl.etcd_start_wait <= 86_400, "cluster.etcd_start_wait", "must be in [0, 86400] seconds")


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) as ``(host, port)``; ValueError saying what is wrong."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {listen!r}")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad port in {listen!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)
