"""The progress line and the summary (polecat/node/summary.py), from made-up stats."""

from __future__ import annotations

import dataclasses
import io

from polecat.node.stats import CrawlStats, LoopLagSamples
from polecat.node.summary import CLEAR_TO_EOL, print_summary, progress_line, short_reason

BASE = CrawlStats(
    elapsed_s=10.0, fetches=11, fetches_per_s=1.1, politeness_violations=0, errors=(("dns", 1),),
    queued=5, in_flight=0, hosts=3, hosts_ready=0, hosts_waiting=2, hosts_parked=1,
    parked=(("dead.test", "gave up after 3 attempts (dns: dead.test: NXDOMAIN)"),), urls_accepted=20,
    urls_seen_again=4, urls_rejected=(), urls_done=(("fetched", 10),), canon_collapsed=0, bloom_fp_rate=0.0,
    bloom_memory_bytes=0, near_duplicates=0, near_dup_collapse_ratio=0.0, robots_failure_rate=0.0,
    robots_unreachable=0, dns_hit_ratio=0.0, pages_stored=10, bytes_stored=12345, answered=10,
    ended="queue empty", hosts_backoff=2, next_ready_in=41.6, urls_done_total=(("fetched", 30),),
)


def test_progress_line_clears_fits_and_says_what_it_waits_on() -> None:
    line = progress_line(BASE, 200)
    assert line.startswith("\r") and line.endswith(CLEAR_TO_EOL)
    assert "1 errors " in line and "waiting 42 s: 2 hosts in backoff" in line
    assert "gave up 1 host, last dead.test (dns)" in line and "in flight" not in line
    narrow = progress_line(BASE, 80)
    assert len(narrow) - len("\r") - len(CLEAR_TO_EOL) == 79 and "waiting 42 s: 2 hosts in backoff" in narrow
    busy = progress_line(dataclasses.replace(BASE, in_flight=3), 200)
    assert "waiting" not in busy and "3 in flight" in busy
    paced = dataclasses.replace(BASE, hosts_backoff=0, next_ready_in=0.3)  # ordinary pacing: no word
    assert "waiting" not in progress_line(paced, 200)


def test_short_reason() -> None:
    assert short_reason("gave up after 3 attempts (robots.txt answered 503)") == "robots.txt answered 503"
    assert short_reason("blocked_address: h: refused: 127.0.0.1 is a loopback address") == "blocked_address"


def test_summary_separates_run_and_crawl_and_says_why() -> None:
    out = io.StringIO()
    print_summary(BASE, out, data_dir="d", interrupted=True)
    text = out.getvalue()
    assert text.startswith("this run: 11 fetches, 10 answered, 1 errors")
    assert "ended: Ctrl-C" in text
    assert "gave up dead.test: gave up after 3 attempts" in text and "--dns-server" in text
    assert "whole crawl (d):\n  5 still queued, 30 URLs done, 3 hosts; store 10 bodies, 12.3 kB" in text
    assert "canonical collapses" not in text and "bloom" not in text


def test_summary_fits_80_columns_and_says_only_what_means_something() -> None:
    busy = dataclasses.replace(
        BASE, urls_rejected=tuple((f"reason_{i}", 1000 + i) for i in range(12)), pages_cut=3,
        requisites_queued=123_456,
        errors=tuple((f"kind_{i}", i) for i in range(1, 15)), freshness=(4, 1, 1, 1),
        parked=(("dead.test", "gave up after 3 attempts (dns: dead.test: NXDOMAIN)"),) * 3)
    for refresh in (False, True):
        out = io.StringIO()
        print_summary(busy, out, data_dir="/var/lib/polecat/a-long-data-directory-name", refresh=refresh)
        lines = out.getvalue().splitlines()
        assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
        text = " ".join(out.getvalue().split())
        assert "errors: kind_1 1, kind_2 2," in text and "reason_11 1011" in text
        assert "pages cut by the parse budget: 3" in text and "errors: kind_1" in text
        assert "page requisites: 123456 queued" in text
        assert "politeness violations" not in text  # 0: nothing to say
        assert ("freshness SLO" in text) == refresh  # a one-off crawl keeps no refresh schedule
    out = io.StringIO()
    print_summary(dataclasses.replace(BASE, politeness_violations=2), out)
    assert "politeness violations 2: requests sent before" in " ".join(out.getvalue().split())


def test_loop_lag_is_summarized_by_its_p99_and_max() -> None:
    lag = LoopLagSamples.with_busy()
    for late in [0.0004] * 980 + [0.012] * 15 + [0.030] * 4:
        lag.record(late, cpu=0.05)
    lag.record(0.25, cpu=0.02, loop_cpu=0.01)  # mostly no free CPU: 20 ms of it this process's, 10 the loop's
    assert (lag.quantile(0.5), lag.quantile(0.99), lag.max) == (0.0, 0.012, 0.25)
    assert lag.busy is not None and lag.busy.max == 0.03
    assert lag.stalls == 1 and lag.busy.stalls == 0  # only the 250 ms sample reached 50 ms
    assert lag.own is not None and lag.own.max == 0.01 and lag.own.stalls == 0
    assert LoopLagSamples().quantile(0.99) == LoopLagSamples().max == 0.0
    out = io.StringIO()
    print_summary(dataclasses.replace(BASE, loop_lag_p99=lag.quantile(0.99), loop_lag_max=lag.max,
                                      loop_busy_p99=lag.busy.quantile(0.99), loop_busy_max=lag.busy.max,
                                      loop_stalls=lag.stalls, loop_own_p99=lag.own.quantile(0.99),
                                      loop_own_max=lag.own.max, loop_own_stalls=lag.own.stalls), out)
    text = " ".join(out.getvalue().split())
    assert ("event loop late: p99 12 ms, max 250 ms; with polecat on a CPU: p99 12 ms, max 30 ms; "
            "1 stalls of 50 ms or more; with the loop's thread on a CPU: p99 0 ms, max 10 ms, "
            "0 stalls") in text
    out = io.StringIO()
    print_summary(BASE, out)  # not measured (a worker's stats): nothing said
    assert "event loop" not in out.getvalue()


def test_tls_handshakes_and_the_share_resumed_are_summarized_when_there_were_any() -> None:
    out = io.StringIO()
    print_summary(dataclasses.replace(BASE, tls_handshakes=200, tls_resumed=174), out)
    assert "TLS handshakes: 200, 174 resumed (87%)" in out.getvalue()
    out = io.StringIO()
    print_summary(BASE, out)  # a crawl of http URLs only
    assert "TLS" not in out.getvalue()
