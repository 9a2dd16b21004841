"""The frontier's format checks at open: an older near-duplicate format is upgraded in one commit, and
what cannot be read is refused naming the release that wrote it, this one and what to do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lmdb
import pytest

from polecat.errors import FrontierError
from polecat.frontier.db import NEAR_REBUILD, FrontierDB
from polecat.frontier.opener import FRONTIER_PARAMS
from polecat.version import __version__

MAP = 1 << 24


def _written_by(path: Path, near: tuple[tuple[bytes, bytes], ...] = (), **schema: Any) -> None:
    """A frontier at ``path`` whose schema record says ``schema`` over today's, with ``near`` entries."""
    FrontierDB(path, map_size=MAP, params=FRONTIER_PARAMS).close()
    env = lmdb.open(str(path), max_dbs=16)
    try:
        meta = env.open_db(b"meta")
        near_db = env.open_db(b"near", dupsort=True)
        with env.begin(write=True) as txn:
            info = {**json.loads(bytes(txn.get(b"schema", db=meta))), **schema}
            txn.put(b"schema", json.dumps(info).encode(), db=meta)
            for key, value in near:
                txn.put(key, value, db=near_db)
    finally:
        env.close()


def _schema(path: Path) -> tuple[dict[str, Any], int, bytes | None]:
    """The schema record, the near table's entries and the pending rebuild key, as committed."""
    env = lmdb.open(str(path), max_dbs=16, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            meta, near = env.open_db(b"meta", txn=txn), env.open_db(b"near", txn=txn, dupsort=True)
            return (json.loads(bytes(txn.get(b"schema", db=meta))), txn.stat(near)["entries"],
                    txn.get(NEAR_REBUILD, db=meta))
    finally:
        env.close()


def test_an_older_fingerprint_format_is_dropped_with_the_rebuild_recorded(tmp_path: Path) -> None:
    path = tmp_path / "frontier"
    _written_by(path, ((b"\x00ab", b"x" * 8), (b"\xff" + b"\x00" * 8, b"v")), near_index=2, release="0.1.0")
    db = FrontierDB(path, map_size=MAP, params=FRONTIER_PARAMS)
    assert db.near_dropped == 2
    db.commit()
    db.close()
    info, entries, rebuild = _schema(path)
    assert (info["near_index"], info["release"], entries, rebuild) == (FRONTIER_PARAMS["near_index"],
                                                                      __version__, 0, b"0")


def test_a_newer_release_is_named_and_nothing_is_changed(tmp_path: Path) -> None:
    path = tmp_path / "frontier"
    _written_by(path, near_index=FRONTIER_PARAMS["near_index"] + 1, release="9.1.0")
    before = _schema(path)
    with pytest.raises(FrontierError, match=rf"written by polecat 9\.1\.0 with near_index=4; this is polecat "
                                            rf"{__version__}, which reads near_index=3; open it with polecat "
                                            r"9\.1\.0 or later"):
        FrontierDB(path, map_size=MAP, params=FRONTIER_PARAMS)
    assert _schema(path) == before


def test_a_format_no_upgrade_knows_names_the_release_that_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "frontier"
    _written_by(path, url_fingerprint="md5", release="0.1.0")
    with pytest.raises(FrontierError, match=r"written by polecat 0\.1\.0 with url_fingerprint='md5'; .*this "
                                            r"release has no upgrade from it: open it with polecat 0\.1\.0"):
        FrontierDB(path, map_size=MAP, params=FRONTIER_PARAMS)
