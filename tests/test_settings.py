"""Saved crawl settings (polecat/commands/saved_settings.py): resume with no flags, flags override and are
saved."""

from __future__ import annotations

import json
from pathlib import Path

from polecat.commands.saved_settings import changes, savable
from polecat.testing.sitegen import SiteSpec
from tests.conftest import TestWebFactory
from tests.test_cli import polecat


def test_savable_and_changes() -> None:
    scope = {"seeds": ["http://a/"], "max_pages": 3, "mode": "domain"}
    mapping = {"data_dir": "d", "progress": True, "scope": scope, "dns": {"allow_private": True},
               "refresh": {"enabled": True}}
    saved = savable(mapping)
    assert saved == {"scope": {"mode": "domain"}, "dns": {"allow_private": True}}
    assert changes(saved, saved) == []
    new = {"scope": {"mode": "domain"}, "dns": {"allow_private": False}, "politeness": {"rate": 2.0}}
    assert changes(saved, new) == [("dns.allow_private", True, False), ("politeness.rate", None, 2.0)]


def test_resume_needs_no_flags_and_flags_override(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=1, pages_per_host=12, seed=6))
    data = tmp_path / "d"
    first = polecat("crawl", *web.seeds, "--data", str(data), "--rate", "20", "--max-pages", "4",
                    "--dns-server", web.dns_address, "--allow-private")
    assert first.returncode == 0, first.stderr
    saved = json.loads((data / "settings.json").read_text())
    assert saved["dns"] == {"allow_private": True, "nameservers": [web.dns_address]}
    assert "scope" not in saved  # seeds live in the frontier, max_pages bounds one run
    again = polecat("crawl", "--data", str(data), "--rate", "10")  # no URL, no --allow-private
    assert again.returncode == 0, again.stderr
    assert "whole crawl" in again.stdout and " 0 still queued" in again.stdout, again.stdout
    assert "--rate (politeness.rate) changes from 20.0 to 10.0" in again.stderr
    assert json.loads((data / "settings.json").read_text())["politeness"]["rate"] == 10.0
    fetched = [r.url for r in web.log if r.target != "/robots.txt"]
    assert sorted(fetched) == sorted(web.ground_truth("host")), "resumed with the saved DNS server"
    off = polecat("crawl", "--data", str(data), "--no-allow-private")
    assert "--allow-private (dns.allow_private) changes from True to False" in off.stderr
    assert "queued URLs on private or loopback addresses will be given up" in off.stderr
