"""The crawl every release fixture (tests/fixtures/releases) was made from, and how to open one.

A fixture's URLs name the test web's hosts and :data:`PORT`, so the tests serve the same site on the
same port; the fixture is copied before use (opening it upgrades it in place).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb

from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb

RELEASES = Path(__file__).resolve().parent / "fixtures" / "releases"
FIXTURES = ("effc808", "0.2.0", "0.3.0")
"""Oldest first; the last is the latest release (its formats are today's, but for :data:`UNRELEASED`)."""
UNRELEASED: dict[str, Any] = {"frontier": {"version": 7}}
"""Formats changed since the newest fixture, each under CHANGELOG's "Unreleased" with its migration
(frontier schema 3: the seen table in runs; schema 4: compact queue and URL rows; schema 5: host numbers
in queue keys; schema 6: seed hosts marked in their records; schema 7: shorter queue keys and compact
``hosts`` values; issue 39). The next release writes its fixture and empties this."""
SPEC = SiteSpec(hosts=3, pages_per_host=20, seed=36, near_dup_ratio=0.2, dup_ratio=0.05)
"""Three hosts (robots.txt variants disallow_private, missing, allow), near and exact duplicates."""
PORT = 18036
"""Below Linux's ephemeral range (32768-60999), so no test's ephemeral socket holds it; tests that serve
it take turns (:func:`serving`)."""
PORT_WAIT = 300.0
"""How long :func:`serving` waits for another test (another xdist worker, another checkout's suite on
the same machine) to give the port back."""
USER_AGENT = "polecat-test/0.1 (+http://example.invalid/bot)"
CONFIG_TOML = "[dedup]\nexpected_urls = 2000\n\n[frontier]\ncommit_ms = 100.0\n"
"""A small seen-set Bloom filter (the default sizing writes 12 MB) and frequent commits."""


@contextlib.contextmanager
def serving() -> Iterator[TestWeb]:
    """The fixtures' site on :data:`PORT`, once no other process on this machine serves it: an exclusive
    lock on a file named after the port, taken without blocking and retried for :data:`PORT_WAIT` s."""
    lock = os.open(Path(tempfile.gettempdir()) / f"polecat-release-fixtures-{PORT}.lock",
                   os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + PORT_WAIT
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"port {PORT} still served by another test after {PORT_WAIT:g}s"
                                       ) from None
                time.sleep(0.2)
        with TestWeb(SPEC, port=PORT) as web:
            yield web
    finally:
        os.close(lock)  # releases the lock


def copy_fixture(name: str, dest: Path) -> Path:
    """A writable copy of fixture ``name``'s data dir at ``dest``."""
    shutil.copytree(RELEASES / name / "data", dest)
    return dest


def release_requests(name: str) -> list[dict[str, Any]]:
    """The requests the server saw while the release wrote fixture ``name``."""
    data: list[dict[str, Any]] = json.loads((RELEASES / name / "requests.json").read_text())
    return data


def _meta(env_dir: Path) -> dict[bytes, bytes]:
    env = lmdb.open(str(env_dir), readonly=True, lock=False, max_dbs=16, subdir=True)
    try:
        meta = env.open_db(b"meta", create=False)
        with env.begin() as txn:
            return {bytes(k): bytes(v) for k, v in txn.cursor(db=meta)}
    finally:
        env.close()


def data_formats(data: Path) -> dict[str, Any]:
    """The formats a data dir records of itself: its frontier schema and parameters, its store's index
    schema and content hash, and the Ring version of a ``--workers`` layout (of the first node dir)."""
    layout = data / "workers.json"
    node = data / "workers" / "0" if layout.exists() else data
    schema = json.loads(_meta(node / "frontier")[b"schema"])
    schema.pop("release", None)  # who wrote it, not how
    store = _meta(node / "store" / "index")
    out: dict[str, Any] = {"frontier": schema, "store_schema": store[b"schema"].decode(),
                           "store_hash": store[b"hash"].decode()}
    if layout.exists():
        out["ring"] = json.loads(layout.read_text()).get("ring", 1)
    return out
