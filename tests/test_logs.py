"""Logging (polecat/logs.py): formats, levels from flags, and what a crawl logs at info and debug."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from polecat.cluster.ring import Ring
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.logs import LogSettings, configure, current, fields, level_from_flags
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb
from tests.conftest import TestWebFactory
from tests.test_cli import polecat


def test_levels_from_flags() -> None:
    assert level_from_flags() == logging.WARNING
    assert level_from_flags(verbose=1) == logging.INFO
    assert level_from_flags(verbose=3) == logging.DEBUG
    assert level_from_flags(quiet=1) == logging.ERROR
    assert level_from_flags(verbose=2, level="error") == logging.ERROR


def test_text_and_json_lines_carry_fields() -> None:
    out = io.StringIO()
    log = configure(logging.INFO, stream=out)
    # Only polecat's own handlers count: pytest's capture handlers join any logger that does not propagate.
    (first,) = [h for h in log.handlers if getattr(h, "_polecat_handler", False)]
    logging.getLogger("polecat.x").info("fetch failed", extra=fields(host="a.test", reason="dns: no such"))
    logging.getLogger("polecat.x").debug("not shown")
    line = out.getvalue().strip()
    assert line.endswith('INFO polecat.x: fetch failed host=a.test reason="dns: no such"'), line
    out = io.StringIO()
    configure(logging.DEBUG, stream=out, fmt="json")
    logging.getLogger("polecat.y").debug("got %d", 200, extra=fields(status=200, ms=12))
    rec = json.loads(out.getvalue())
    assert rec["level"] == "debug" and rec["msg"] == "got 200" and rec["status"] == 200 and rec["ms"] == 12
    ours = [h for h in log.handlers if getattr(h, "_polecat_handler", False)]
    assert len(ours) == 1 and first not in log.handlers  # a second configure replaced the first handler
    out = io.StringIO()
    configure(logging.INFO, stream=out, tag={"worker": "w1"})  # as a --workers worker logs to stderr
    logging.getLogger("polecat.z").info("fetch failed", extra=fields(host="b.test"))
    assert out.getvalue().strip().endswith("INFO polecat.z: fetch failed host=b.test worker=w1")
    assert current() == LogSettings(logging.INFO, None, "text", {"worker": "w1"})


def test_crawl_logs_errors_at_info_and_fetches_at_debug(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=3, seed=2))
    web.respond("h01.test", "/", 404)
    logfile = tmp_path / "log.jsonl"
    base = ("crawl", *web.seeds, "--rate", "20", "--dns-server", web.dns_address, "--allow-private")
    run = polecat(*base, "--data", str(tmp_path / "d1"), "-v", "--log-format", "json",
                  "--log-file", str(logfile))
    assert run.returncode in (0, 3), run.stderr
    records = [json.loads(line) for line in logfile.read_text().splitlines()]
    errors = [r for r in records if r.get("reason")]
    assert errors and errors[0]["host"].startswith("h01.test") and errors[0]["reason"] == "HTTP 404"
    assert errors[0]["url"] == web.seeds[0]
    assert not [r for r in records if r["level"] == "debug"]
    run = polecat(*base, "--data", str(tmp_path / "d2"), "-vv")  # -v after the subcommand, text to stderr
    fetch_lines = [line for line in run.stderr.splitlines() if "robots.txt 200" in line]
    assert fetch_lines and "bytes=" in fetch_lines[0] and "ms=" in fetch_lines[0], run.stderr


def test_version_and_no_abbreviations() -> None:
    run = polecat("--version")
    assert run.returncode == 0 and run.stdout.startswith("polecat ")
    run = polecat("crawl", "http://a.test/", "--allow-priv")
    assert run.returncode == 2 and "unrecognized arguments: --allow-priv" in run.stderr


def test_ctrl_c_outside_a_crawl_exits_130_without_traceback(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from polecat.commands import main as cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "make_parser", interrupted)
    assert cli.main(["--version"]) == 130
    assert "interrupted" in capsys.readouterr().err


def _web_both_workers_own(test_web: TestWebFactory, spec: SiteSpec) -> TestWeb:
    """A test web whose seed hosts both workers of a ``--workers 2`` crawl own some of. The host key
    carries the server's random port, so a few hosts may all land on one worker: start another (bounded)."""
    ring = Ring(["w0", "w1"])
    for _ in range(20):
        web = test_web(spec)
        if {ring.owner(slice_of(host_key(s))) for s in web.seeds} == {"w0", "w1"}:
            return web  # the others stay up on their ports until the fixture stops them all
    raise AssertionError("20 test webs in a row gave every seed host to one worker")


def test_workers_log_as_the_parent_does_into_its_file_tagged_with_their_id(test_web: TestWebFactory,
                                                                          tmp_path: Path) -> None:
    web = _web_both_workers_own(test_web, SiteSpec(hosts=8, pages_per_host=2, seed=9))
    web.respond("h02.test", "/", 404)
    logfile = tmp_path / "log.jsonl"
    run = polecat("crawl", *web.seeds, "--rate", "20", "--dns-server", web.dns_address, "--allow-private",
                  "--data", str(tmp_path / "d"), "--workers", "2", "--log-level", "debug", "--log-format",
                  "json", "--log-file", str(logfile))
    assert run.returncode in (0, 3), run.stderr
    records = [json.loads(line) for line in logfile.read_text().splitlines()]  # every line is one record
    by_worker = {w: [r for r in records if r.get("worker") == w] for w in ("w0", "w1")}
    for mine in by_worker.values():  # the parent's level (debug: one line per request) and format
        assert any(r["level"] == "debug" and "ms" in r for r in mine), mine
    failed = [r for r in records if r.get("reason") == "HTTP 404"]
    assert next(s for s in web.seeds if "h02.test" in s) in [r["url"] for r in failed]
    assert {r["worker"] for r in failed} <= set(by_worker)
    assert "polecat.fetch" not in run.stderr and '"level"' not in run.stderr  # nothing went to stderr
