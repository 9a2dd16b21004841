"""Smoke test of the benchmark plumbing (benchmarks/): the generator at benchmark settings, the
multi-process static server and its logs, the bare runner, the figures and the table. Figures themselves
are not asserted beyond what must hold for any correct run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.compare import compare, floor, generated_web, real_web
from benchmarks.corpora import FLOOR_HASH, Corpus, blake2b_us, floor_stages, real_corpus, small_corpus
from benchmarks.docweb import doc_web
from benchmarks.metrics import RunFigures, median_figures, table
from benchmarks.runners import RunContext, command
from benchmarks.sizes import SIZES


def test_bare_runner_fetches_the_whole_ground_truth_through_the_static_server(tmp_path: Path) -> None:
    web = generated_web(SIZES["tiny"], _ADDRESSES, tmp_path)
    results = compare(web, ["limit"], 1, tmp_path, workers=2)
    limit = results["limit"]
    truth = (tmp_path / "urls.txt").read_text().split()
    assert limit.exit_code == 0
    assert limit.pages == len(truth) > 0
    assert limit.coverage == 1.0
    assert limit.robots_violations == 0 and limit.other_requests == 0 and limit.dup_fetches == 0
    assert limit.pages_per_s > 0 and limit.peak_rss_mb > 0
    # Both server processes wrote a log, and the bare runner reported what the server saw.
    server_logs = list((tmp_path / "runs" / "limit-0" / "server").glob("log-*.jsonl"))
    assert len(server_logs) == 2
    assert json.loads((tmp_path / "runs" / "limit-0" / "output.txt").read_text())["ok"] == len(truth)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["median"]["limit"]["pages"] == len(truth)
    # The floor adds the bare loop's CPU to the parse, hash and compression of the same pages.
    floor = saved["floor"]
    parts = [v for k, v in floor.items() if k != "floor"]
    assert floor["fetch (bare GET loop)"] == limit.cpu_ms_per_page
    assert len(parts) == 4 and all(v > 0 for v in parts) and floor["floor"] == sum(parts)


_ADDRESSES = [f"127.0.0.{i + 1}" for i in range(8)]


def test_doc_web_truth_is_what_links_reach_within_each_host_and_its_server_serves_it(tmp_path: Path) -> None:
    docs = tmp_path / "pkg"
    (docs / "sub").mkdir(parents=True)
    (docs / "index.html").write_text('<a href="sub/a.html#x">a</a> <a href="missing.html">m</a> '
                                     '<a href="http://elsewhere.test/">e</a> <a href="/style.css">s</a>')
    (docs / "sub" / "a.html").write_text('<a href="../index.html">up</a> <a href="b.html">b</a>')
    (docs / "sub" / "b.html").write_text("<p>leaf</p>")
    (docs / "style.css").write_text("p {}")
    (docs / "unlinked.html").write_text("<p>never reached</p>")
    web = doc_web(8080, {"pkg": (docs, "/index.html"), "absent": (tmp_path / "none", "/index.html")})
    assert web is not None and set(web.roots) == {"pkg.docs.test"}
    base = "http://pkg.docs.test:8080"
    assert web.truth == {f"{base}/{path}" for path in ("index.html", "sub/a.html", "sub/b.html", "style.css")}
    assert sorted(web.html) == [f"{base}/index.html", f"{base}/sub/a.html", f"{base}/sub/b.html"]
    assert doc_web(8080, {"absent": (tmp_path / "none", "/index.html")}) is None


def test_bare_runner_fetches_the_real_web_through_its_server(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "pkg"
    docs.mkdir()
    (docs / "index.html").write_text('<a href="a.html">a</a>')
    (docs / "a.html").write_text("<p>a</p>")
    monkeypatch.setattr("benchmarks.compare.doc_web",
                        lambda port: doc_web(port, {"pkg": (docs, "/index.html")}))
    web = real_web(_ADDRESSES, tmp_path)
    assert web is not None and web.scope == "host"
    limit = compare(web, ["limit"], 1, tmp_path)["limit"]
    assert limit.exit_code == 0 and limit.pages == 2 and limit.coverage == 1.0 and limit.other_requests == 0
    assert "polecat/floor" not in json.loads((tmp_path / "results.json").read_text())["floor"]


def test_runner_commands_carry_the_crawl_settings(tmp_path: Path) -> None:
    ctx = RunContext(tmp_path / "s", tmp_path / "u", tmp_path / "h", "127.0.0.1:5353", tmp_path, 5.0, 64)
    polecat = command("polecat", ctx)
    for flag, value in (("--rate", "5"), ("--concurrency", "64"), ("--dns-server", "127.0.0.1:5353")):
        assert polecat[polecat.index(flag) + 1] == value
    assert "--allow-private" in polecat and polecat[polecat.index("--scope") + 1] == "any"
    assert command("limit", ctx)[-3:] == [str(tmp_path / "u"), str(tmp_path / "h"), "64"]


def _fig(pages_per_s: float, cpu: float, code: int = 0) -> RunFigures:
    return RunFigures(10, 1.0, 2.0, pages_per_s, pages_per_s, cpu, 100.0, 1.0, 0, 0, 0, 0, code)


def test_medians_and_ratio_table() -> None:
    median = median_figures([_fig(100, 1.0), _fig(300, 3.0, code=-9), _fig(200, 2.0)])
    assert (median.pages_per_s, median.cpu_ms_per_page, median.exit_code) == (200, 2.0, -9)
    text = table({"polecat": _fig(800, 1.0), "scrapy": _fig(80, 12.0), "limit": _fig(4000, 0.2)})
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()}
    assert "| 10.00x |  | 0.08x | 1.00x |" in rows["polecat/scrapy"]
    assert "| 0.20x |  | 5.00x |" in rows["polecat/limit"]


def test_floor_ratios_over_the_sha256_floor_and_the_blake2b_one(tmp_path: Path) -> None:
    pages = small_corpus(3).bodies
    ran = {name: RunFigures(100, 1.0, 1.0, 100.0, 100.0, cpu, 50.0, 1.0, 0, 0, 0, 0, 0)
           for name, cpu in (("limit", 0.2), ("polecat", 1.0))}
    parts = floor(pages, ran, tmp_path / "floor.txt")
    stages = [parts[k] for k in ("fetch (bare GET loop)", "lexbor parse (tree only)", FLOOR_HASH, "zstd -2")]
    assert stages[0] == 0.2 and parts["floor"] == pytest.approx(sum(stages))
    assert parts["polecat/floor"] == pytest.approx(1.0 / parts["floor"])
    # the BLAKE2b floor swaps only the hash row
    blake2b = 1.0 / parts["polecat/floor with BLAKE2b"] - parts["floor"] + parts[FLOOR_HASH]
    assert 0 < blake2b < 1 and "with BLAKE2b" in (tmp_path / "floor.txt").read_text()


def test_floor_stages_and_a_missing_real_corpus(tmp_path: Path) -> None:
    corpus = small_corpus(3)
    assert len(corpus.urls) == len(corpus.bodies) == 3
    stages = floor_stages(corpus.bodies, 3)
    assert [name for name, _ in stages] == ["lexbor parse (tree only)", FLOOR_HASH, "zstd -3"] == \
        ["lexbor parse (tree only)", "SHA-256", "zstd -3"]
    assert all(us > 0 for _, us in stages) and blake2b_us(corpus.bodies) > 0
    assert real_corpus(tmp_path) is None  # no documentation package there: the benchmarks skip it
    (tmp_path / "a.html").write_bytes(b"<p>a</p>")
    (tmp_path / "all.html").write_bytes(b"<p>all</p>")
    assert real_corpus(tmp_path) == Corpus("real", ["http://docs.test:8080/api/a.html"], [b"<p>a</p>"])


def test_pipeline_stages_on_a_few_pages_of_the_small_web(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.bench_stages import stages

    rows = dict(stages(small_corpus(5)))
    assert {"parse (links, text)", "frontier add (seen-set)", "store put (WARC, zstd)"} <= set(rows)
    assert rows["parse (links, text)"] > 0 and rows["store put (WARC, zstd)"] > 0
    line = capsys.readouterr().out
    # Five pages of a 10,000-page web: nearly every link is new to the frontier, unlike a whole crawl.
    assert "small: 5 pages" in line and " new (queued" in line and "of which 0.0 new" not in line


def test_worst_case_stages_on_small_hostile_inputs() -> None:
    from benchmarks.worst_case import STAGES, page_stages, robots_stages
    from polecat.testing.hostile_pages import PAGES, ROBOTS

    row = page_stages(PAGES["nested"](100_000), guarded=True)
    assert set(STAGES) <= set(row) and row["parse"] < 1000
    assert "bounds" not in page_stages(PAGES["ordinary"](10_000), guarded=False)
    assert set(robots_stages(ROBOTS["wildcards"](20_000).decode(), guarded=True)) == {"parse", "check_us"}


def test_limit_runs_gives_the_floor_the_median_of_that_many_bare_loops(tmp_path: Path) -> None:
    from benchmarks.compare import main

    assert main(["--size", "tiny", "--runners", "limit", "--runs", "1", "--limit-runs", "3",
                 "--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "tiny" / "results.json").read_text())
    cpus = sorted(run["cpu_ms_per_page"] for run in saved["runs"]["limit"])
    assert len(cpus) == 3
    assert saved["floor"]["fetch (bare GET loop)"] == saved["median"]["limit"]["cpu_ms_per_page"] == cpus[1]


@pytest.mark.parametrize("kind", ["loop", "timerfd"])
def test_alarm_bench_measures_each_clock(kind: str) -> None:
    import sys

    import uvloop

    from benchmarks.bench_alarm import measure

    if kind == "timerfd" and sys.platform != "linux":
        pytest.skip("timerfd is Linux's")
    cpu, wall, mean, worst = uvloop.run(measure(kind, 0.002, 5))
    # Five 2 ms waits: each takes at least its gap (never early), and lateness is never negative.
    assert wall >= 2000 and cpu > 0 and 0 <= mean <= worst
