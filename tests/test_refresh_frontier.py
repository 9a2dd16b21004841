"""Refresh state in the frontier: due times, re-queueing, 304 and near-duplicates as "unchanged"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.config import Config, PolitenessConfig, RefreshConfig
from polecat.frontier.keys import url_key
from polecat.frontier.records import Lease, UrlRecord
from polecat.frontier.refresh import CHANGEFREQ_SECONDS, History, Prior, RefreshPolicy, observe
from polecat.frontier.refresh_index import INDEX_KEY
from tests.frontier_helpers import Rig, canon, done
from tests.test_frontier import lease_or_fail, open_host

pytestmark = pytest.mark.usefixtures("frontier_backend")  # each test on LMDB and on the in-memory fake

REFRESH = RefreshConfig(min_interval=10.0, max_interval=1000.0, default_interval=50.0, min_visits=1,
                        never=("b.test",))


def rig_with_refresh(path: Path) -> Rig:
    return Rig(path, cfg=Config(scope=replace(Config().scope, mode="any"), refresh=REFRESH))


def history(rig: Rig, url: str) -> History:
    rec = rig.frontier.url_record(url)
    assert rec is not None and rec.history
    return History.decode(bytes.fromhex(rec.history))


def finish(rig: Rig, lease: Lease, now: float, outcome: str, digest: bytes, *, changed: bool = True) -> None:
    result = replace(done(now, outcome="not_modified" if outcome == "304" else "fetched",
                          status=304 if outcome == "304" else 200),
                     content_hash=digest, etag='"v"', changed=changed)
    rig.db.apply(rig.raw.complete(lease, result, now + 0.01))


def due_lease(rig: Rig, url: str) -> tuple[Lease, float]:
    """Requeue ``url`` at its due time and lease it; checks nothing was due a moment earlier."""
    rec = rig.frontier.url_record(url)
    assert rec is not None and rec.due is not None
    assert rig.frontier.requeue_due(rec.due - 0.001)[0] == 0
    queued, fresh = rig.frontier.requeue_due(rec.due)
    assert queued == 1 and (fresh.tracked, fresh.due) == (1, 1)
    assert fresh.important == 1  # a seed
    after = rig.frontier.url_record(url)
    assert after is not None and after.due is None  # queued: not queued twice
    assert rig.frontier.requeue_due(rec.due + 1)[0] == 0
    return lease_or_fail(rig, rec.due), rec.due


def test_due_times_requeue_and_what_counts_as_a_change(tmp_path: Path) -> None:
    rig = rig_with_refresh(tmp_path)
    t = open_host(rig, "http://a.test/", 1000.0)
    url = canon("http://a.test/")
    lease = lease_or_fail(rig, t + 1.0)
    finish(rig, lease, t + 1.0, "200", b"A" * 32)
    rec = rig.frontier.url_record(url)
    assert rec is not None and rec.due is not None
    # First visit: the prior (default 50 s), never before the host's next allowed time.
    assert rec.due >= t + 1.0 + 50.0 and rec.due >= rig.frontier.next_allowed("a.test")
    accepted = rig.frontier.stats(t).accepted
    lease, now = due_lease(rig, url)
    assert lease.etag == '"v"'  # the re-fetch is a conditional GET
    assert rig.frontier.stats(now).accepted == accepted  # a refresh is not a new URL
    finish(rig, lease, now, "304", b"A" * 32)
    assert (history(rig, url).n, history(rig, url).x) == (1, 0)
    # The same body again (200, same hash) and a near-duplicate of the previous version: unchanged.
    lease, now = due_lease(rig, url)
    finish(rig, lease, now, "200", b"A" * 32, changed=True)
    lease, now = due_lease(rig, url)
    finish(rig, lease, now, "200", b"B" * 32, changed=False)
    assert (history(rig, url).n, history(rig, url).x) == (3, 0)
    # A new body is a change; the URL's interval shrinks after it.
    quiet = rig.frontier.url_record(url)
    assert quiet is not None and quiet.due is not None
    lease, now = due_lease(rig, url)
    finish(rig, lease, now, "200", b"C" * 32)
    h = history(rig, url)
    assert (h.n, h.x) == (4, 1)
    changed = rig.frontier.url_record(url)
    assert changed is not None and changed.due is not None
    assert changed.due - h.last_visit < quiet.due - history_before(quiet.history).last_visit


def history_before(hexed: str) -> History:
    return History.decode(bytes.fromhex(hexed))


def test_never_refreshed_hosts_and_failures_get_no_due_time(tmp_path: Path) -> None:
    rig = rig_with_refresh(tmp_path)
    t = open_host(rig, "http://b.test/", 1000.0)
    lease = lease_or_fail(rig, t + 1.0)
    finish(rig, lease, t + 1.0, "200", b"A" * 32)
    rec = rig.frontier.url_record(canon("http://b.test/"))
    assert rec is not None and rec.due is None
    t = open_host(rig, "http://c.test/", 2000.0)
    lease = lease_or_fail(rig, t + 1.0)
    rig.complete(lease, t + 1.0, "fetched", status=404)
    rec = rig.frontier.url_record(canon("http://c.test/"))
    assert rec is not None and rec.due is None
    assert rig.frontier.requeue_due(1e12)[0] == 0


def test_refresh_state_survives_a_restart(tmp_path: Path) -> None:
    rig = rig_with_refresh(tmp_path)
    t = open_host(rig, "http://a.test/", 1000.0)
    lease = lease_or_fail(rig, t + 1.0)
    finish(rig, lease, t + 1.0, "200", b"A" * 32)
    rig.frontier.commit()
    rig.crash()
    rig.reopen(now=t + 100.0)
    assert rig.frontier.requeue_due(t + 100.0)[0] == 1
    again = lease_or_fail(rig, t + 102.0)
    assert again.url == canon("http://a.test/") and again.etag == '"v"'


def test_sitemap_prior_sets_the_first_intervals(tmp_path: Path) -> None:
    rig = rig_with_refresh(tmp_path)
    t = open_host(rig, "http://a.test/", 1000.0)
    hinted = canon("http://a.test/hinted")
    rig.frontier.add(hinted, 1, 0.5, t)
    rig.frontier.set_prior(hinted, Prior(changefreq="always", priority=0.9))
    for _ in range(2):
        lease = lease_or_fail(rig, rig.frontier.next_allowed("a.test") + 0.01)
        finish(rig, lease, rig.frontier.next_allowed("a.test") + 0.01, "200", lease.url.encode().ljust(32))
    plain = rig.frontier.url_record(canon("http://a.test/"))
    rec = rig.frontier.url_record(hinted)
    assert plain is not None and rec is not None and plain.due is not None and rec.due is not None
    # "always" is the floor (10 s); the seed without a hint gets the default (50 s).
    assert rec.due - history(rig, hinted).last_visit == pytest.approx(REFRESH.min_interval)
    assert plain.due - history(rig, plain.url).last_visit == pytest.approx(REFRESH.default_interval)


@pytest.mark.lmdb_only  # builds no frontier: once is enough
@given(lastmod=st.none() | st.floats(0, 4e9), freq=st.none() | st.sampled_from(sorted(CHANGEFREQ_SECONDS)),
       priority=st.none() | st.floats(0, 1))
def test_property_prior_round_trips(lastmod: float | None, freq: str | None, priority: float | None) -> None:
    prior = Prior(lastmod, freq, priority)
    assert Prior.decode(prior.encode()) == prior


def test_a_host_with_new_urls_keeps_its_discovery_share(tmp_path: Path) -> None:
    rig = rig_with_refresh(tmp_path)
    t = open_host(rig, "http://a.test/", 1000.0)
    pages = [canon(f"http://a.test/p{i}") for i in range(12)]
    for url in pages:
        rig.frontier.add(url, 1, 0.5, t)
    now = t
    for _ in range(13):  # the seed and the 12 pages, one fetch a second (rate 1)
        now = max(now, rig.frontier.next_allowed("a.test")) + 0.01
        lease = lease_or_fail(rig, now)
        finish(rig, lease, now, "200", lease.url.encode().ljust(32))
    for i in range(6):  # new URLs wait on the host
        rig.frontier.add(canon(f"http://a.test/new{i}"), 1, 0.5, now)
    later = now + 10_000.0
    # A 10 s window at 1 request/s and refresh_share 0.5: 5 refreshes; the other 8 due URLs stay due.
    queued, fresh = rig.frontier.requeue_due(later, window=10.0)
    assert queued == 5 and fresh.due == 13
    assert rig.frontier.requeue_due(later, window=10.0)[0] == 5
    # A one-off --refresh run (no window) queues all that is left.
    assert rig.frontier.requeue_due(later)[0] == 3


@pytest.mark.lmdb_only
def test_a_host_over_its_budget_spaces_its_urls_by_the_freshness_optimum(tmp_path: Path) -> None:
    refresh = RefreshConfig(min_interval=10.0, max_interval=100_000.0, min_visits=1)
    cfg = Config(scope=replace(Config().scope, mode="any"), refresh=refresh,
                 politeness=replace(PolitenessConfig(), rate=0.01))
    rig = Rig(tmp_path, cfg=cfg)
    # Ten pages seen changing at each of five visits a minute apart: each wants k / rate = 25 s, ten
    # times what the host's 0.01 req/s can give. Written as the completions would have left them.
    h = History()
    for i in range(6):
        h = observe(h, 60.0 * i + 1.0, True)
    wanted = RefreshPolicy(refresh).interval("a.test", h, None, h.last_visit)
    assert wanted == pytest.approx(25.0, rel=0.01)
    for i in range(10):
        url = canon(f"http://a.test/p{i}")
        rec = UrlRecord(url, "fetched", "200", h.last_visit, history=h.encode().hex(),
                        due=h.last_visit + wanted)
        rig.db.txn.put(url_key(url), rec.encode(), db=rig.db.urls)
    rig.db.txn.delete(INDEX_KEY, db=rig.db.meta)  # records written past the index: built at the next open
    rig.db.commit()
    rig.crash()
    rig.reopen()
    # The budget plan spreads 0.01 visits/s over ten equal pages: about every 1,000 s each, not 25 s.
    assert rig.frontier.requeue_due(h.last_visit + 500.0)[0] == 0
    assert rig.frontier.requeue_due(h.last_visit + 1_100.0)[0] == 10
