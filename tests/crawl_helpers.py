"""Shared helpers for integration tests that crawl the loopback test web."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from polecat.cluster.layout import node_dirs
from polecat.config import Config, StoreConfig, config_from_mapping, merge
from polecat.errors import CorruptRecord, NotFound
from polecat.frontier.keys import host_of_row, queue_prefix_of_row
from polecat.frontier.records import decode_host
from polecat.frontier.status import _snapshot, read_outcomes, read_queued
from polecat.store.base import FetchRecord, content_hash
from polecat.store.segstore import open_store
from polecat.testing.failover import is_page_request
from polecat.testing.web import TestWeb


def crawl_config(web: TestWeb, data: Path, **over: Any) -> Config:
    """A config that crawls ``web`` from all its host roots through its DNS server."""
    base: dict[str, Any] = {
        "data_dir": str(data),
        "scope": {"seeds": web.seeds, "mode": "host"},
        "politeness": {"rate": 5.0},
        "fetch": {"concurrency": 64, "user_agent": "polecat-test/0.1 (+http://example.invalid/bot)"},
        "dns": {"nameservers": [web.dns_address], "allow_private": True},
        "frontier": {"commit_ms": 100.0},
    }
    return config_from_mapping(merge(base, over))


def summary_errors(summary: str) -> dict[str, int]:
    """The ``errors:`` line of a crawl's summary (polecat/node/summary.py) as kind -> count (empty for
    "none"); AssertionError when the summary has no such line."""
    line = next((row for row in summary.splitlines() if row.strip().startswith("errors:")), None)
    assert line is not None, summary
    listed = line.split(":", 1)[1].strip()
    if listed == "none":
        return {}
    return {kind: int(n) for kind, n in (entry.rsplit(" ", 1) for entry in listed.split(", "))}


def stored_records(data: Path) -> list[FetchRecord]:
    """The page records (robots.txt's left out) of every store of the crawl in ``data``, its workers'
    included."""
    out: list[FetchRecord] = []
    for node in node_dirs(data):
        with open_store(node / "store", StoreConfig(), read_only=True) as store:
            out += [r for r in store.records() if not r.url.endswith("/robots.txt")]
    return out


def page_requests(web: TestWeb) -> list[str]:
    """Canonical URLs the server saw requested, robots.txt and soft-404 probes (frontier/traps.py)
    excluded, in arrival order."""
    return [r.url for r in web.log if is_page_request(r)]


def assert_store_reads_back(data: Path, cfg: Config) -> int:
    """Every stored body reads back with its hash; returns how many bodies were checked."""
    store = open_store(data / "store", cfg.store, read_only=True)
    checked = 0
    try:
        for rec in store.records():
            if rec.kind == "response" and rec.size:
                body = store.get(rec.content_hash)
                assert content_hash(body) == rec.content_hash
                checked += 1
    finally:
        store.close()
    return checked


def url_fates(data: Path, urls: set[str]) -> dict[str, str]:
    """What the frontier of ``data`` holds of each of ``urls``: its outcome and reason when done,
    "queued", or "unknown" (never discovered, or lost): a page a test finds never asked is told given up
    (and why), left queued, or lost."""
    fates = dict.fromkeys(urls, "unknown")
    for url in read_queued(data / "frontier"):
        if url in fates:
            fates[url] = "queued"
    for rec in read_outcomes(data / "frontier"):
        if rec.url in fates:
            fates[rec.url] = f"{rec.outcome} {rec.reason} (fetches {rec.fetches})".strip()
    return fates


def queue_counts_disagree(data: Path) -> list[str]:
    """Where the last commit of the frontier in ``data`` disagrees with itself: a host whose record counts
    another number of queued URLs than its queue holds, rows under no host, counters (``meta``) that are
    not the rows' (polecat/node/commits.py rule 16: a record and its rows commit together). Empty when
    every count agrees."""
    bad = []
    with _snapshot(data / "frontier", ("hosts", "queue", "meta")) as (_, tables, _):
        under_hosts = 0
        for row, raw in tables.items("hosts"):
            st = decode_host(raw)
            rows = sum(1 for _ in tables.items("queue", queue_prefix_of_row(row, st.num)))
            under_hosts += rows
            if rows != st.queued:
                bad.append(f"{host_of_row(row)}: {rows} queued, its record counts {st.queued}")
        rows = sum(1 for _ in tables.items("queue"))
        if rows != under_hosts:
            bad.append(f"{rows - under_hosts} queued URLs under no host's record")
        counts = json.loads(dict(tables.items("meta")).get(b"host_counts", b"{}"))
        if counts and counts["queued"] != rows:
            bad.append(f"{rows} queued, the counters say {counts['queued']}")
    return bad


def fetched_and_readable(data: Path, cfg: Config) -> set[str]:
    """URLs the frontier records as fetched whose recorded body the store reads back whole (``get``
    verifies the hash): what a crash must never lose, judged by the data, not by the server's log."""
    store = open_store(data / "store", cfg.store, read_only=True)
    readable = set()
    try:
        for rec in read_outcomes(data / "frontier"):
            if rec.outcome != "fetched" or not rec.content_hash:
                continue
            try:
                store.get(bytes.fromhex(rec.content_hash))  # raises unless the body is there, whole
            except (NotFound, CorruptRecord):
                continue
            readable.add(rec.url)
    finally:
        store.close()
    return readable
