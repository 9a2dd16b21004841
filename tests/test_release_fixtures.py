"""Data dirs written by earlier releases (tests/fixtures/releases) open, resume and finish with this code.

Each fixture is a crawl of :data:`tests.release_fixtures.SPEC` stopped mid-way by that release. Today's
``polecat crawl`` resumes it on the same loopback site and port: every reachable page ends up fetched,
none the release fetched is fetched again, the server sees no politeness violation, and near-duplicates
of pages the release stored are still found (the upgrade re-indexes the stored bodies). And a format
change without a fixture of its own fails here: today's formats must be those of the newest fixture.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from polecat.cluster import batch
from polecat.cluster.checkpoint_plan import FORMAT as CHECKPOINT_FORMAT
from polecat.cluster.layout import node_dirs
from polecat.cluster.ring import RING_VERSION
from polecat.cluster.wire import WIRE_VERSION
from polecat.config import Config, RefreshConfig, StoreConfig
from polecat.frontier import bundle
from polecat.frontier.db import SCHEMA_VERSION
from polecat.frontier.host_table import HOST_COUNTS
from polecat.frontier.opener import FRONTIER_PARAMS, open_frontier
from polecat.frontier.records import UrlRecord, decode_host
from polecat.frontier.refresh import RefreshPolicy
from polecat.frontier.refresh_index import RefreshIndex
from polecat.frontier.status import read_status
from polecat.store.base import HASH_NAME, FetchRecord
from polecat.store.index import SCHEMA_VERSION as STORE_SCHEMA
from polecat.store.segstore import open_store
from polecat.testing.serverlog import politeness_violations
from polecat.version import __version__
from tests.crawl_helpers import page_requests
from tests.release_fixtures import (
    CONFIG_TOML,
    FIXTURES,
    PORT,
    RELEASES,
    UNRELEASED,
    USER_AGENT,
    copy_fixture,
    data_formats,
    release_requests,
    serving,
)

RATE = 20.0


def _latest_records(data: Path) -> dict[str, FetchRecord]:
    """Each URL's last store record, over every node dir of the crawl."""
    out: dict[str, FetchRecord] = {}
    for node in node_dirs(data):
        store = open_store(node / "store", StoreConfig(), read_only=True)
        try:
            for rec in store.records():
                out[rec.url] = rec
        finally:
            store.close()
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_release_fixture_resumes_and_finishes(name: str, tmp_path: Path) -> None:
    data = copy_fixture(name, tmp_path / "data")
    config = tmp_path / "polecat.toml"
    config.write_text(CONFIG_TOML)
    before = {r["url"] for r in release_requests(name) if r["target"] != "/robots.txt"}
    with serving() as web:
        run = subprocess.run(
            [sys.executable, "-m", "polecat", "crawl", "--data", str(data), "--config", str(config),
             "--scope", "host", "--rate", str(RATE), "--user-agent", USER_AGENT, "--dns-server",
             web.dns_address, "--allow-private", "-q"],
            capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        if name == "effc808":  # the resume says what it upgraded (schema 1 to 2; later ones add tables)
            assert f"polecat: {data} upgraded: frontier keys rewritten slice-first" in run.stderr, run.stderr
        after = page_requests(web)
        assert politeness_violations(web.log, web.min_intervals(RATE)) == []
        truth = web.ground_truth("host")
        site = web.site
    assert len(after) == len(set(after)), "a page fetched twice in the resumed run"
    assert not set(after) & before, "the resumed run fetched again what the release had fetched"
    assert truth <= before | set(after), sorted(truth - before - set(after))
    records = _latest_records(data)
    # Near-copies fetched now of pages the release stored: found only through the upgraded index.
    pairs = [(site.url(p.original, PORT), site.url(g, PORT)) for g, p in enumerate(site.pages)
             if p.kind == "near_dup" and site.url(p.original, PORT) in before
             and site.url(g, PORT) in after]
    assert pairs, "the fixture has no near-copy left to fetch of a page it stored"
    for original, copy in pairs:
        assert (records[copy].kind, records[copy].duplicate_of) == ("revisit", original), copy
    status = subprocess.run([sys.executable, "-m", "polecat", "status", str(data)],
                            capture_output=True, text=True, timeout=60, check=True)
    assert f"written by polecat {__version__}" in status.stdout


def test_todays_formats_are_those_of_the_newest_fixture() -> None:
    """A change to any of these needs a migration, a CHANGELOG "Upgrading" note and a fixture written by
    the new release (tests/fixtures/releases/README.md says how): then add it to FIXTURES."""
    newest = json.loads((RELEASES / FIXTURES[-1] / "formats.json").read_text())
    for part, changed in UNRELEASED.items():
        newest[part] = {**newest[part], **changed} if isinstance(changed, dict) else changed
    today = {"frontier": {"version": SCHEMA_VERSION, **FRONTIER_PARAMS},
             "store_schema": STORE_SCHEMA.decode(), "store_hash": HASH_NAME, "ring": RING_VERSION}
    assert today == newest
    # Formats of the wire and of checkpoints, not kept in a data dir: pinned here for the same reason. A
    # change of the batch or bundle format raises the wire version too (polecat/cluster/wire.py rule 1).
    assert (bundle.VERSION, batch.VERSION, CHECKPOINT_FORMAT, WIRE_VERSION) == (1, 1, 1, 3)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_formats_are_what_its_data_holds(name: str) -> None:
    recorded = json.loads((RELEASES / name / "formats.json").read_text())
    assert recorded == data_formats(RELEASES / name / "data")


def test_the_refresh_index_is_built_at_the_first_open_of_0_3_0(tmp_path: Path) -> None:
    """0.3.0 kept no refresh index (polecat/frontier/refresh_index.py rule 5): the first open builds it
    from the URL records, and its figures are those of a pass over every finished URL."""
    data = copy_fixture("0.3.0", tmp_path / "data")
    now = 2_000_000_000.0
    for node in node_dirs(data):
        opened = open_frontier(replace(Config(), data_dir=node), now)
        try:
            refresh = opened.frontier._refresh
            assert opened.db.count("refresh") > 0, "the open built no index"
            fresh = opened.frontier.freshness(now)
            assert fresh == refresh.index.recount(now) and fresh.tracked > 0
            with_due = sum(UrlRecord.decode(raw).due is not None for _, raw in opened.db.items("urls"))
            assert opened.db.count("due") == with_due
            opened.commit()
        finally:
            opened.close()
        reopened = open_frontier(replace(Config(), data_dir=node), now)
        try:
            assert not RefreshIndex(reopened.db, RefreshPolicy(RefreshConfig())).stale  # built once
        finally:
            reopened.close()


def test_the_host_counters_are_counted_at_the_first_open_of_0_3_0(tmp_path: Path) -> None:
    """0.3.0 kept no host counters (polecat/frontier/host_table.py rule 12): the first open counts them
    from the host records, the commit keeps them, and ``polecat status`` reads them, equal to a recount."""
    data = copy_fixture("0.3.0", tmp_path / "data")
    now = 2_000_000_000.0
    for node in node_dirs(data):
        opened = open_frontier(replace(Config(), data_dir=node), now)
        try:
            assert opened.db.get("meta", HOST_COUNTS) is None  # 0.3.0 wrote none
            records = [decode_host(raw) for _, raw in opened.db.items("hosts")]
            table = opened.frontier._table
            counted = (len(records), sum(st.queued > 0 for st in records), sum(st.queued for st in records),
                       sum(st.fetched for st in records))
            assert (table.known_hosts, table.with_queue, table.queued, table.fetched) == counted
            assert counted[0] > 0 and counted[3] > 0
            opened.commit()
        finally:
            opened.close()
        s = read_status(node / "frontier")
        assert (s.hosts, s.hosts_with_queue, s.queued, s.fetched) == counted
