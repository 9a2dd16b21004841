"""/metrics during a crawl: every family of the monitoring list, counters monotonic, values that agree
with the status API and with ``polecat status DIR``."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from polecat.cluster.claimlink import ClaimStats
from polecat.cluster.stats import ClusterStats
from polecat.service.metrics import _cluster as cluster_metrics
from polecat.testing.sitegen import SiteSpec
from polecat.version import __version__
from tests.conftest import TestWebFactory
from tests.service_helpers import get_json, running_node, wait_for

FAMILIES = {
    "polecat_fetches": "counter", "polecat_politeness_violations": "counter",
    "polecat_queue_urls": "gauge", "polecat_hosts": "gauge", "polecat_in_flight_requests": "gauge",
    "polecat_hosts_known": "gauge", "polecat_hosts_with_queue": "gauge",
    "polecat_paused": "gauge", "polecat_bloom_false_positive_ratio": "gauge",
    "polecat_near_duplicate_ratio": "gauge", "polecat_robots_fetches": "counter",
    "polecat_robots_failures": "counter", "polecat_dns_lookups": "counter", "polecat_dns_hit_ratio": "gauge",
    "polecat_dns_queries": "counter", "polecat_dns_evictions": "counter", "polecat_dns_entries": "gauge",
    "polecat_tls_handshakes": "counter",
    "polecat_fetch_duration_seconds": "histogram", "polecat_fetched_bytes": "counter",
    "polecat_stored_bytes": "counter", "polecat_stored_pages": "gauge", "polecat_fetch_errors": "counter",
    "polecat_urls_done": "counter", "polecat_commit_age_seconds": "gauge",
    "polecat_commit_duration_seconds": "gauge", "polecat_event_loop_lag_seconds": "gauge",
    "polecat_loop_stalls": "counter", "polecat_loop_lag_max_seconds": "gauge",
    "polecat_refresh_queued": "counter", "polecat_freshness_urls": "gauge",
    "polecat_freshness_slo_ratio": "gauge", "polecat_build_info": "gauge",
}


def parse(text: str) -> tuple[dict[str, str], dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    types, values = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        sample: Sample
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return types, values


async def test_metrics_during_a_crawl(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=3, pages_per_host=25))
    refresh = {"enabled": True}
    async with running_node(web, tmp_path, politeness={"rate": 20.0}, refresh=refresh) as (svc, api):
        scrapes = []
        while True:
            async with api.get("/metrics") as resp:
                assert resp.status == 200 and resp.content_type == "text/plain"
                text = await resp.text()
                scrapes.append(parse(text))
            helps = [line.split(" ", 3) for line in text.splitlines() if line.startswith("# HELP ")]
            docs = [doc for _, _, name, doc in helps if not name.endswith("_created")]  # a counter's twin
            assert len(docs) == len(set(docs)), "two families say the same thing"
            s = svc.crawler.stats()
            if s.queued == 0 and s.in_flight == 0 and s.fetches > 0:
                break
            await asyncio.sleep(0.3)
        assert len(scrapes) >= 3
        types, _ = scrapes[0]
        for name, kind in FAMILIES.items():
            assert types.get(name) == kind, (name, types.get(name))
        for (before_types, before), (_, after) in itertools.pairwise(scrapes):
            for key, value in before.items():
                name = key[0]
                family = name.removesuffix("_total").removesuffix("_bucket").removesuffix("_count") \
                    .removesuffix("_sum")
                if before_types.get(family) in ("counter", "histogram") and not name.endswith("_created"):
                    assert after.get(key, 0.0) >= value, (key, value, after.get(key))
        _, last = scrapes[-1]
        assert last[("polecat_fetches_total", ())] > 0
        assert last[("polecat_build_info", (("version", __version__),))] == 1
        assert last[("polecat_fetch_duration_seconds_count", (("kind", "page"),))] > 0
        assert last[("polecat_queue_urls", (("band", "seed"),))] == 0
        await wait_for(lambda: svc.crawler.last_commit[0] > 0, what="a commit")
        async with api.get("/metrics") as resp:
            _, final = parse(await resp.text())
        _, status = await get_json(api, "GET", "/admin/crawl/status")
        assert final[("polecat_fetches_total", ())] == status["fetches"]
        assert final[("polecat_fetched_bytes_total", ())] == status["bytes_fetched"] > 0
        assert final[("polecat_politeness_violations_total", ())] == status["politeness_violations"] == 0
        assert final[("polecat_stored_pages", ())] == status["pages_stored"]
        assert final[("polecat_hosts", (("state", "parked"),))] == status["hosts_parked"]
        assert final[("polecat_hosts_known", ())] == status["hosts"]
        fresh = svc.crawler.stats().freshness
        assert fresh is not None  # a node with refresh on scans for due URLs as it starts
        assert final[("polecat_freshness_urls", (("state", "tracked"),))] == fresh[0]
        assert status["freshness"]["tracked"] == fresh[0]
        for outcome, n in status["urls_done"].items():
            assert final[("polecat_urls_done_total", (("outcome", outcome),))] == n
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "polecat", "status",
                                                    str(tmp_path), stdout=asyncio.subprocess.PIPE)
        out = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
        assert proc.returncode == 0, out
        fetched, queued = (int(m.group(1)) for word in ("fetched", "queued")
                           if (m := re.search(rf"{word} (\d+)", out)))
        assert fetched == final[("polecat_fetches_total", ())]
        assert queued == sum(v for (n, _), v in final.items() if n == "polecat_queue_urls") == 0


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None and not os.environ.get("POLECAT_REQUIRE_PROMTOOL"),
                    reason="no promtool (apt-get install prometheus; .ci/run installs it)")
async def test_promtool_accepts_a_live_scrape(test_web: TestWebFactory, tmp_path: Path) -> None:
    """prometheus_client's parser is lenient (a second HELP line, a family yielded twice pass it);
    Prometheus's own checker is not. The scrape is taken once the refresh scan has run, so that every
    family, the freshness ones included, has its samples."""
    assert PROMTOOL is not None, "POLECAT_REQUIRE_PROMTOOL is set but promtool is not installed"
    web = test_web(SiteSpec(hosts=2, pages_per_host=6))
    refresh = {"enabled": True}
    async with running_node(web, tmp_path, politeness={"rate": 20.0}, refresh=refresh) as (svc, api):
        await wait_for(lambda: svc.crawler.stats().freshness is not None and svc.crawler.stats().fetches >= 3,
                       what="a refresh scan and a few fetches")
        async with api.get("/metrics") as resp:
            scrape = await resp.read()
    proc = await asyncio.create_subprocess_exec(PROMTOOL, "check", "metrics", stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out = (await asyncio.wait_for(proc.communicate(scrape), 60))[0].decode()
    assert proc.returncode == 0, out


def test_a_cluster_nodes_claim_frames_are_counted_by_transport() -> None:
    stats = ClusterStats(fenced=False, lease_age=1.0, slices_owned=4096, slices_wanted=4096, bundles_sent=0,
                         bundles_adopted=0, bundles_refused=0, incompatible_members=0, wire_refused=0,
                         stray_urls=0, stray_slices=0, checkpoint_rounds=0, checkpoint_failures=0,
                         checkpoint_age=None, claim_frames_streamed=7, claim_frames_http=2)
    family = next(f for f in cluster_metrics(stats) if f.name == "polecat_cluster_claim_frames")
    assert {s.labels["transport"]: s.value for s in family.samples} == {"stream": 7, "http": 2}
    assert not [f for f in cluster_metrics(stats) if f.name == "polecat_cluster_claims"]  # claims off


def test_a_cluster_nodes_claims_are_counted_by_event() -> None:
    """A node with claims on gives its claim counts (claimlink.py ClaimStats) as one family by event."""
    claims = ClaimStats(claims_sent=40, copies=9, unanswered=2, stray_answers=1, bad_frames=0, near_copies=5,
                        deposits_refused=3)
    stats = ClusterStats(fenced=False, lease_age=1.0, slices_owned=4096, slices_wanted=4096, bundles_sent=0,
                         bundles_adopted=0, bundles_refused=0, incompatible_members=0, wire_refused=0,
                         stray_urls=0, stray_slices=0, checkpoint_rounds=0, checkpoint_failures=0,
                         checkpoint_age=None, claim_events=claims.events())
    family = next(f for f in cluster_metrics(stats) if f.name == "polecat_cluster_claims")
    assert {s.name for s in family.samples} == {"polecat_cluster_claims_total"}
    assert {s.labels["event"]: s.value for s in family.samples} == {
        "sent": 40, "copies": 9, "near_copies": 5, "unanswered": 2, "stray_answers": 1, "bad_frames": 0,
        "deposits_refused": 3}
