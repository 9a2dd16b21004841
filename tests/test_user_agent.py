"""The default user agent names only a contact that exists; the CLI asks operators for theirs."""

from __future__ import annotations

import email.message
import importlib.metadata
from pathlib import Path

import pytest

from polecat import config
from tests.test_cli import polecat


def _meta(urls: list[str]) -> email.message.Message:
    msg = email.message.Message()
    msg["Version"] = "9.9"
    for url in urls:
        msg["Project-URL"] = url
    return msg


def test_default_user_agent_uses_the_declared_homepage_or_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "github.com/polecat-crawler" not in config.DEFAULT_USER_AGENT
    monkeypatch.setattr(importlib.metadata, "metadata", lambda _: _meta(["Homepage, https://polecat.example/"]))
    assert config._default_user_agent() == "polecat/9.9 (+https://polecat.example/)"
    monkeypatch.setattr(importlib.metadata, "metadata", lambda _: _meta(["Source, https://x.example/"]))
    assert config._default_user_agent() == "polecat/9.9"


def test_crawl_without_a_contact_warns(tmp_path: Path) -> None:
    # The seed's host is blocked: the run ends at once, nothing is resolved or fetched.
    base = ("crawl", "http://a.test/", "--data", str(tmp_path / "d"), "--block", "a.test")
    run = polecat(*base, "--user-agent", "mybot/1.0")
    assert "names no contact" in run.stderr and "--user-agent" in run.stderr
    assert run.returncode == 3 and "seed http://a.test/ was refused (blocked)" in run.stderr
    run = polecat(*base, "--user-agent", "mybot/1.0 (+https://me.example/bot)")
    assert "names no contact" not in run.stderr
