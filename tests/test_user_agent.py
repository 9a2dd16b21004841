"""The default user agent names only a contact that exists; the CLI asks operators for theirs."""

from __future__ import annotations

import tomllib
from pathlib import Path

from polecat import __version__, config
from polecat.config import sections
from tests.test_cli import polecat


def test_default_user_agent_names_the_declared_homepage_or_none() -> None:
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]
    # The homepage is pyproject.toml's if it declares one (the version is polecat.version's: test_release).
    assert project.get("urls", {}).get("Homepage", "") == config.PROJECT_HOMEPAGE
    assert f"polecat/{__version__}" == config.DEFAULT_USER_AGENT  # no homepage declared: no URL
    assert "github.com/polecat-crawler" not in config.DEFAULT_USER_AGENT
    homepage = "https://polecat.example/"
    assert sections._default_user_agent("9.9", homepage) == "polecat/9.9 (+https://polecat.example/)"
    assert sections._default_user_agent("9.9", "") == "polecat/9.9"


def test_crawl_without_a_contact_warns(tmp_path: Path) -> None:
    # The seed's host is blocked: the run ends at once, nothing is resolved or fetched.
    base = ("crawl", "http://a.test/", "--data", str(tmp_path / "d"), "--block", "a.test")
    run = polecat(*base, "--user-agent", "mybot/1.0")
    assert "names no contact" in run.stderr and "--user-agent" in run.stderr
    assert run.returncode == 3 and "seed http://a.test/ was refused (blocked)" in run.stderr
    run = polecat(*base, "--user-agent", "mybot/1.0 (+https://me.example/bot)")
    assert "names no contact" not in run.stderr


def test_a_user_agent_with_a_control_character_is_refused() -> None:
    """It goes into a request header as it is: a CR or LF would end that header and start another."""
    import dataclasses

    import pytest

    from polecat.errors import ConfigError

    base = config.Config()
    for bad in ("bot/1\r\nX-Injected: 1", "bot/1\rx", "bot/1\x00", "bot\t/1", "  "):
        with pytest.raises(ConfigError, match=r"fetch\.user_agent"):
            config.validate(dataclasses.replace(base, fetch=dataclasses.replace(base.fetch, user_agent=bad)))
    config.validate(dataclasses.replace(base, fetch=dataclasses.replace(base.fetch, user_agent="bot/1 (+x)")))
