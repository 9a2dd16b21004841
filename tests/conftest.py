"""Shared fixtures: the loopback test web and a local DNS server (polecat/testing)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from polecat.frontier.db import FrontierDB
from polecat.testing.dns import LocalDnsServer
from polecat.testing.etcd import EtcdServer, etcd_binary
from polecat.testing.sitegen import SiteSpec
from polecat.testing.web import TestWeb
from tests import frontier_helpers

TestWebFactory = Callable[..., TestWeb]


@pytest.fixture
def test_web() -> Iterator[TestWebFactory]:
    """Factory: ``web = test_web(SiteSpec(hosts=20, pages_per_host=50), addresses=4)`` starts a TestWeb
    (server thread + DNS) that is stopped at the end of the test."""
    started: list[TestWeb] = []

    def factory(spec: SiteSpec | None = None, **kwargs: Any) -> TestWeb:
        web = TestWeb(spec, **kwargs).start()
        started.append(web)
        return web

    yield factory
    for web in started:
        web.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` run first, in collection order otherwise: under ``-n`` (worksteal) the
    last tests a worker runs are then short ones, not a 40 s one that leaves the other worker idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each test that uses ``frontier_backend`` runs once per backend, except where marked ``lmdb_only``."""
    if "frontier_backend" in metafunc.fixturenames:
        lmdb_only = metafunc.definition.get_closest_marker("lmdb_only") is not None
        metafunc.parametrize("frontier_backend", ["lmdb"] if lmdb_only else ["lmdb", "memory"], indirect=True)


@pytest.fixture
def frontier_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The database the test's frontier rigs are built on (tests/frontier_helpers.py): the real LMDB, or
    polecat.testing.fakes.MemoryFrontierDB. Use it with ``pytestmark = pytest.mark.usefixtures(...)``."""
    backend: str = request.param
    monkeypatch.setattr(frontier_helpers, "BACKEND", backend)
    return backend


@pytest.fixture
def frontier_db(tmp_path: Path) -> Iterator[FrontierDB]:
    """An empty frontier database in ``tmp_path``, closed after the test."""
    db = FrontierDB(tmp_path / "frontier", map_size=1 << 28, params={})
    try:
        yield db
    finally:
        db.close()


@pytest.fixture
def dns_server() -> Iterator[LocalDnsServer]:
    """A started LocalDnsServer with no names (everything answers NXDOMAIN until ``add``)."""
    with LocalDnsServer() as server:
        yield server


@pytest.fixture
def s3_endpoint() -> str:
    """The loopback S3 server .ci/run starts (POLECAT_TEST_S3_ENDPOINT); skipped without it, unless
    POLECAT_REQUIRE_S3 is set (CI): then its absence fails the test."""
    endpoint = os.environ.get("POLECAT_TEST_S3_ENDPOINT", "")
    if not endpoint:
        if os.environ.get("POLECAT_REQUIRE_S3"):
            pytest.fail("POLECAT_REQUIRE_S3 is set but POLECAT_TEST_S3_ENDPOINT is not")
        pytest.skip("no loopback S3 server (POLECAT_TEST_S3_ENDPOINT)")
    return endpoint


@pytest.fixture
def etcd_server() -> Iterator[EtcdServer]:
    """A private etcd on a loopback port (skipped where etcd is not installed, unless
    POLECAT_REQUIRE_ETCD is set, as in CI: then its absence fails the test)."""
    if etcd_binary() is None:
        if os.environ.get("POLECAT_REQUIRE_ETCD"):
            pytest.fail("POLECAT_REQUIRE_ETCD is set but etcd is not installed")
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    with EtcdServer() as server:
        yield server
