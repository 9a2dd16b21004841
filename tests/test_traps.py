"""Spider traps cost a bounded number of fetches per host (issue 10): the rules of frontier/traps.py as
sans-IO units, then a real crawl of the loopback trap web (polecat/testing/trapweb.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from polecat import Crawler
from polecat.commands.main import main
from polecat.config import config_from_mapping
from polecat.dedup.minhash import fingerprint
from polecat.frontier import traps
from polecat.frontier.traps import (
    SOFT404_SUSPECT_AFTER,
    ShapeBudget,
    Soft404,
    TrapCounts,
    is_probe,
    probe_url,
    shape,
    url_trap,
)
from polecat.testing.trapweb import TRAP_HOSTS, TrapWeb


def test_repeated_and_deep_paths_are_refused() -> None:
    assert url_trap("http://a.test/a/b/a/b/") is None
    assert url_trap("http://a.test/a/b/a/b/a/") == "trap:repeated_path"
    assert url_trap("http://a.test/x/x/x") == "trap:repeated_path"
    assert url_trap("http://a.test/" + "/".join(f"s{i}" for i in range(33))) == "trap:deep_path"
    assert url_trap("http://a.test/?q=/a/a/a/a") is None  # the query is not a path
    assert url_trap("http://a.test") is None


def test_shapes_fold_numbers_and_session_tokens_only() -> None:
    assert shape("http://a.test/cal/2026/12/") == shape("http://a.test/cal/2031/01/") == "/cal/0/0/"
    assert shape("http://a.test/list?page=7") == shape("http://a.test/list?page=12345")
    sid1, sid2 = "a8f5f167f44f4964e6c998de", "0b1c2d3e4f5a6b7c8d9e0f1a"
    assert shape(f"http://a.test/s/{sid1}/p") == shape(f"http://a.test/s/{sid2}/p") == "/s/~/p"
    assert shape("http://a.test/how-to-crawl") != shape("http://a.test/how-to-parse")
    assert shape("http://a.test/averyveryverylongword") == "/averyveryverylongword"  # no digit: a word


def test_shape_budget_refuses_past_its_limit_per_host() -> None:
    budget = ShapeBudget(3)
    for n in range(3):
        assert not budget.refuses("a", f"http://a.test/list?page={n}")
        budget.count("a", f"http://a.test/list?page={n}")
    assert budget.refuses("a", "http://a.test/list?page=99")
    assert not budget.refuses("b", "http://b.test/list?page=99")
    assert not budget.refuses("a", "http://a.test/other")


def test_shape_counters_are_bounded_and_a_trap_met_late_is_still_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 5: every host of a breadth crawl queues several URLs of one shape (so no pair is "seen
    once"), yet the counters stay within the bound; a trap met once the counters are full is refused at
    its budget, and keeps its counter while other hosts come and go, as long as it is still linked to."""
    monkeypatch.setattr(traps, "MAX_TRACKED_SHAPES", 64)
    budget = ShapeBudget(20)

    def breadth_host(i: int) -> None:
        for leaf in range(5):
            url = f"http://h{i}.test/leaf{leaf}"
            assert not budget.refuses(f"h{i}", url)
            budget.count(f"h{i}", url)
        assert len(budget._counts) <= 64

    for i in range(1_000):
        breadth_host(i)
    refused = 0
    for page in range(1_000):
        breadth_host(1_000 + page)
        trap = f"http://trap.test/list?page={page}"
        if budget.refuses("trap", trap):
            refused += 1
        else:
            budget.count("trap", trap)
    assert refused == 1_000 - 20


def test_a_host_is_probed_once_after_a_few_duplicates_and_matched_by_fingerprint() -> None:
    soft = Soft404()
    probes = [soft.duplicate_seen("a", "http://a.test/x") for _ in range(SOFT404_SUSPECT_AFTER + 3)]
    assert [p for p in probes if p is not None] == sorted(soft.issued)
    assert len(soft.issued) == 1 and "http://a.test/polecat-probe-00.html" not in soft.issued
    template = " ".join(f"word{i}" for i in range(200))
    soft.answered(probes[SOFT404_SUSPECT_AFTER - 1] or "", "a", fingerprint("Not found " + template))
    assert not soft.issued
    assert soft.matches("a", fingerprint("Not found here " + template), 4)
    assert not soft.matches("a", fingerprint(" ".join(f"other{i}" for i in range(200))), 4)
    assert not soft.matches("b", fingerprint("Not found " + template), 4)
    url = probe_url("http://a.test:81/x/y?z=1")
    assert url.startswith("http://a.test:81/polecat-probe-") and is_probe(url) and url != probe_url(url)


def test_soft_404_keeps_the_last_hosts_of_each_kind_and_a_probe_until_its_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 3's memory: a breadth crawl probes nearly every host it meets; the oldest are forgotten."""
    monkeypatch.setattr(traps, "MAX_SOFT404_HOSTS", 10)
    soft = Soft404()
    probes: list[str] = []
    for i in range(25):
        for _ in range(SOFT404_SUSPECT_AFTER):
            probe = soft.duplicate_seen(f"h{i}", f"http://h{i}.test/x")
        assert probe is not None
        probes.append(probe)
        soft.duplicate_seen(f"s{i}", f"http://s{i}.test/x")  # suspected once, never probed
    assert list(soft.probed) == [f"h{i}" for i in range(15, 25)]
    assert list(soft.suspects) == [f"s{i}" for i in range(15, 25)]
    assert list(soft.issued) == probes[15:]
    for i, probe in enumerate(probes[15:], 15):
        soft.answered(probe, f"h{i}", fingerprint(f"not found {i} " * 50) if i % 2 else None)
    assert not soft.issued and sorted(soft.signatures) == sorted(f"h{i}" for i in range(15, 25) if i % 2)
    assert soft.duplicate_seen("h24", "http://h24.test/y") is None  # probed already
    assert soft.duplicate_seen("h0", "http://h0.test/y") is None  # forgotten: suspected again


def test_trap_counts_round_trip() -> None:
    counts = TrapCounts()
    counts.add("a", "trap:shape")
    counts.add("a", "trap:shape")
    again = TrapCounts()
    again.load("a", counts.encode("a"))
    assert again.by_host["a"]["trap:shape"] == 2


SHAPE_BUDGET = 40


def test_each_trap_ends_within_its_budget_and_status_reports_it(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    async def crawl() -> tuple[TrapWeb, str]:
        async with TrapWeb(chain=30) as web:
            cfg = config_from_mapping({
                "data_dir": str(tmp_path / "data"),
                "scope": {"seeds": web.seeds, "mode": "any", "max_urls_per_shape": SHAPE_BUDGET},
                "politeness": {"rate": 200.0}, "fetch": {"concurrency": 64},
                "dns": {"nameservers": [web.dns.address], "allow_private": True},
            })
            async with Crawler(cfg) as crawler:
                stats = await asyncio.wait_for(crawler.run(), 90)
            return web, stats.ended

    web, ended = asyncio.run(crawl())
    assert ended == "queue empty", ended  # every trap ended by itself
    assert web.page_requests("session.test") <= SHAPE_BUDGET + 2  # + the root and the probe
    # Paths over {a, b} with each segment at most twice: 19 of them, plus the soft-404 probe.
    assert web.page_requests("loops.test") <= 19 + 1
    assert web.page_requests("soft404.test") <= 3 * (SOFT404_SUSPECT_AFTER + 2) + 3
    assert web.page_requests("calendar.test") <= SHAPE_BUDGET + 3
    assert web.page_requests("pages.test") <= SHAPE_BUDGET + 3
    chain = sum(web.page_requests(f"r{i}.test") for i in range(31))
    assert chain == 6  # the seed and fetch.max_redirects (5) hops
    assert main(["status", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    traps = {line.split()[1].split(":")[0]: line
             for line in out.splitlines() if line.strip().startswith("traps ")}
    assert "trap:shape" in traps["session.test"] and "trap:repeated_path" in traps["loops.test"]
    assert "trap:soft_404" in traps["soft404.test"]
    assert set(TRAP_HOSTS) >= set(traps)
