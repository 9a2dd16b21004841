"""The MinHash rename: the old ``dedup.simhash_distance`` setting still works, with a deprecation warning,
and a data dir whose fingerprints were computed by an older word hash is refused at open."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from polecat.config import Config, config_from_mapping
from polecat.dedup import minhash
from polecat.errors import ConfigError, FrontierError
from polecat.frontier.db import FrontierDB
from polecat.node.crawler import Crawler


def test_old_setting_name_still_works_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="polecat.config"):
        cfg = config_from_mapping({"dedup": {"simhash_distance": 6}})
    assert cfg.dedup.minhash_distance == 6
    assert "dedup.simhash_distance is deprecated: use dedup.minhash_distance" in caplog.text
    caplog.clear()
    assert config_from_mapping({"dedup": {"minhash_distance": 2}}).dedup.minhash_distance == 2
    assert caplog.text == ""


def test_old_and_new_setting_names_together_are_an_error() -> None:
    with pytest.raises(ConfigError, match=r"dedup\.simhash_distance: deprecated name of dedup\.minhash"):
        config_from_mapping({"dedup": {"simhash_distance": 6, "minhash_distance": 3}})
    with pytest.raises(ConfigError, match=r"dedup\.minhash_distance"):
        config_from_mapping({"dedup": {"simhash_distance": 9}})  # validated under its new name


def test_data_dir_with_fingerprints_of_a_format_no_upgrade_knows_is_refused(tmp_path: Path) -> None:
    # An older format is upgraded (tests/test_upgrade_command.py); one this release cannot read is refused.
    newer = {"url_fingerprint": "xxh3_128", "canon": 1, "near_index": minhash.FORMAT + 1}
    FrontierDB(tmp_path / "frontier", map_size=1 << 24, params=newer).close()

    async def open_node() -> None:
        async with Crawler(Config(data_dir=tmp_path)):
            pass

    with pytest.raises(FrontierError, match=f"near_index={minhash.FORMAT + 1}"):
        asyncio.run(open_node())


def test_a_refused_frontier_closes_its_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unknown = minhash.FORMAT + 1
    FrontierDB(tmp_path, map_size=1 << 24, params={"near_index": unknown}).close()
    closed: list[FrontierDB] = []
    close = FrontierDB.close
    monkeypatch.setattr(FrontierDB, "close", lambda self: (closed.append(self), close(self))[-1])
    with pytest.raises(FrontierError, match=f"near_index={unknown}"):
        FrontierDB(tmp_path, map_size=1 << 24, params={"near_index": minhash.FORMAT})
    assert len(closed) == 1  # no environment and write transaction left for the garbage collector
    FrontierDB(tmp_path, map_size=1 << 24, params={"near_index": unknown}).close()
