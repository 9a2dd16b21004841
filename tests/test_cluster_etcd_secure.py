"""etcd as production runs it: a node reaches a real etcd over mutual TLS as an etcd user with a prefix
role (certificates made here, auth turned on as ``etcdctl`` does); the wrong CA, the wrong password or
plain http against a TLS etcd stop the node at start-up with the reason, never a hang
(cluster/aetcd_client.py rules 4-5), even with ``cluster.etcd_start_wait`` at its default; an etcd that
is not there yet is waited for that long (polecat/processes/machine.py rule 12)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from polecat.cluster.aetcd_client import AetcdClient, EtcdAccess, EtcdAccessError
from polecat.commands.cluster import cluster_status
from polecat.config import config_from_mapping
from polecat.errors import ConfigError, PolecatError
from polecat.processes.machine import ClusterNode
from polecat.testing.etcd import EtcdServer, EtcdTls, etcd_binary

trustme = pytest.importorskip("trustme")

SECRET = "a shared secret of the test cluster"
PASSWORD = "the etcd password of polecat"
BASE = {"etcd": "https://127.0.0.1:2379", "node_id": "n1", "advertise": "http://127.0.0.1:9",
        "secret": SECRET}
START_LIMIT = 20.0
"""Seconds a refused start may take at most (each refusal here comes in well under a second)."""


@dataclass
class SecureEtcd:
    server: EtcdServer
    dir: Path

    def cluster(self, **over: Any) -> dict[str, Any]:
        return {**BASE, "etcd": self.server.endpoint, "name": "t", "etcd_ca": str(self.dir / "ca.pem"),
                "etcd_cert": str(self.dir / "client.pem"), "etcd_key": str(self.dir / "client.key"),
                "etcd_user": "polecat", "etcd_password_file": str(self.dir / "password"), **over}


@pytest_asyncio.fixture
async def secure_etcd(tmp_path: Path) -> AsyncIterator[SecureEtcd]:
    if etcd_binary() is None:
        if os.environ.get("POLECAT_REQUIRE_ETCD"):
            pytest.fail("POLECAT_REQUIRE_ETCD is set but etcd is not installed")
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("polecat-node")
    server_cert.cert_chain_pems[0].write_to_path(tmp_path / "server.pem")
    server_cert.private_key_pem.write_to_path(tmp_path / "server.key")
    client_cert.cert_chain_pems[0].write_to_path(tmp_path / "client.pem")
    client_cert.private_key_pem.write_to_path(tmp_path / "client.key")
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    trustme.CA().cert_pem.write_to_path(tmp_path / "other-ca.pem")
    (tmp_path / "password").write_text(PASSWORD + "\n")
    (tmp_path / "wrong-password").write_text("not the password of polecat\n")
    tls = EtcdTls(tmp_path / "server.pem", tmp_path / "server.key", client_ca=tmp_path / "ca.pem")
    with EtcdServer(tls=tls) as server:
        await server.enable_auth("the root password of etcd", "polecat", PASSWORD, "/t/",
                                 ca=ca.cert_pem.bytes(), cert=client_cert.cert_chain_pems[0].bytes(),
                                 key=client_cert.private_key_pem.bytes())
        yield SecureEtcd(server, tmp_path)


def _node(tmp: Path, cluster: dict[str, Any]) -> ClusterNode:
    return ClusterNode(config_from_mapping({"data_dir": str(tmp / "data"), "cluster": cluster}))


async def test_a_node_joins_over_mutual_tls_as_an_etcd_user(secure_etcd: SecureEtcd, tmp_path: Path) -> None:
    node = _node(tmp_path, secure_etcd.cluster())
    try:
        async with asyncio.timeout(START_LIMIT):
            await node.join()
            assert [m.id for m in node.membership.members()] == ["n1"]
            while not node.membership.leasable():  # noqa: ASYNC110 - its owner keys, claimed under its role
                await asyncio.sleep(0.05)
    finally:
        await node.close()


@pytest.mark.parametrize(("change", "says"), [
    ({"etcd_ca": "other-ca.pem"}, "TLS failed"),
    ({"etcd_password_file": "wrong-password"}, "wrong user or password"),
    ({"etcd_cert": "", "etcd_key": ""}, "TLS failed"),
    ({"http": True}, "does it serve TLS"),
], ids=["wrong CA", "wrong password", "no client certificate", "http against TLS"])
async def test_the_wrong_access_is_a_clear_start_up_error(secure_etcd: SecureEtcd, tmp_path: Path,
                                                         change: dict[str, Any], says: str) -> None:
    over = {k: str(secure_etcd.dir / v) if v else "" for k, v in change.items() if k != "http"}
    if "http" in change:
        over = {"etcd": secure_etcd.server.endpoint.replace("https://", "http://"), "etcd_ca": "",
                "etcd_cert": "", "etcd_key": ""}
    node = _node(tmp_path, secure_etcd.cluster(**over))
    async with asyncio.timeout(START_LIMIT):
        with pytest.raises(EtcdAccessError, match=says) as refused:
            await node.join()
    assert PASSWORD not in str(refused.value)
    await node.close()


def _toml(tmp: Path, cluster: dict[str, Any]) -> Path:
    """A node's config file with this ``[cluster]`` section."""
    toml = tmp / "node.toml"
    lines = "".join(f'{k} = "{v}"\n' for k, v in cluster.items())
    toml.write_text(f'data_dir = "{tmp / "data"}"\n[node]\nlisten = "127.0.0.1:0"\n[cluster]\n{lines}')
    return toml


def test_the_node_command_exits_2_naming_a_wrong_password_and_never_showing_it(
        secure_etcd: SecureEtcd, tmp_path: Path) -> None:
    cluster = secure_etcd.cluster()
    del cluster["secret"], cluster["etcd_password_file"]
    toml = _toml(tmp_path, cluster)
    env = {**os.environ, "POLECAT_CLUSTER_SECRET": SECRET, "POLECAT_ETCD_PASSWORD": "a wrong etcd password",
           "PYTHONPATH": str(Path(__file__).parent.parent)}
    done = subprocess.run([sys.executable, "-m", "polecat", "node", "--config", str(toml)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "wrong user or password" in done.stderr
    assert "a wrong etcd password" not in done.stderr


@pytest.mark.parametrize(("cluster", "says"), [
    ({"etcd": ["http://127.0.0.1:1", "https://127.0.0.1:2"]}, "mixes http:// and https://"),
    ({"etcd_ca": "/ca.pem"}, "needs https://"),
    ({"etcd": "https://127.0.0.1:1", "etcd_cert": "/c.pem"}, "go together"),
    ({"etcd_user": "polecat"}, "needs a password"),
    ({"etcd_password": "p" * 20}, "is empty but an etcd password is set"),
    ({"etcd_user": "polecat", "etcd_password": "p" * 20, "etcd_password_file": "/p"}, "keep one"),
    ({"etcd": "ftp://127.0.0.1:1"}, "https://host:port"),
])
def test_etcd_access_settings_are_validated(cluster: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        config_from_mapping({"cluster": {**BASE, "etcd": "http://127.0.0.1:2379", **cluster}})


def test_the_password_is_never_in_the_configs_repr() -> None:
    cfg = config_from_mapping({"cluster": {**BASE, "etcd_user": "polecat", "etcd_password": PASSWORD}})
    assert cfg.cluster.etcd_password == PASSWORD
    assert PASSWORD not in repr(cfg)


def test_an_unreadable_certificate_names_its_setting(tmp_path: Path) -> None:
    cfg = config_from_mapping({"data_dir": str(tmp_path),
                               "cluster": {**BASE, "etcd_ca": str(tmp_path / "missing.pem")}})
    with pytest.raises(ConfigError, match=r"cluster\.etcd_ca"):
        ClusterNode(cfg)


async def test_cluster_status_reads_etcd_as_the_node_does_and_names_records_that_do_not_prove_the_secret(
        secure_etcd: SecureEtcd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("POLECAT_ETCD_PASSWORD", "POLECAT_CLUSTER_SECRET"):
        monkeypatch.delenv(name, raising=False)
    node = _node(tmp_path, secure_etcd.cluster())
    try:
        async with asyncio.timeout(START_LIMIT):
            await node.join()
            await node._etcd.put("/t/members/evil", b'{"address": "http://127.0.0.1:1", "lease": 0}', 0)
            rows, _, ignored = await cluster_status(argparse.Namespace(
                config=_toml(tmp_path, secure_etcd.cluster()), etcd=None, name="polecat"))
    finally:
        await node.close()
    assert [r["id"] for r in rows] == ["n1"] and ignored == ["evil"]


async def test_a_token_etcd_no_longer_knows_makes_the_client_authenticate_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """aetcd_client rule 4: etcd forgets its auth tokens when it restarts; with one endpoint the client
    connects again (and so authenticates again) instead of failing every call from then on."""
    connected: list[object] = []

    class Old:
        async def close(self) -> None:
            pass

    def connect(self: AetcdClient) -> object:
        connected.append(Old())
        return connected[-1]

    monkeypatch.setattr(AetcdClient, "_connect", connect)
    access = EtcdAccess(tls=True, user="polecat", password=PASSWORD)
    client = AetcdClient("https://127.0.0.1:2379", access=access)
    first = client._client

    async def forgotten(c: object) -> None:
        raise RuntimeError("etcdserver: invalid auth token")

    with pytest.raises(RuntimeError):
        await client._retried(forgotten)
    assert len(connected) == 2 and client._client is not first
    with pytest.raises(ConnectionError):  # any other failure: a new connection too (rule 2)
        await client._retried(lambda c: _fails(ConnectionError("etcd is down")))
    assert len(connected) == 3


async def _fails(exc: Exception) -> None:
    raise exc


async def test_a_node_started_before_etcd_waits_for_it(etcd_server: EtcdServer, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Machine rule 12: etcd not there yet (a reboot where the node comes up first) is tried again, each
    try logged at WARNING, and the node joins once etcd answers, within ``cluster.etcd_start_wait``."""
    etcd_server.halt()
    node = _node(tmp_path, {**BASE, "etcd": etcd_server.endpoint, "name": "t"})
    with caplog.at_level(logging.WARNING, logger="polecat.processes.machine"):
        joining = asyncio.create_task(node.join())
        async with asyncio.timeout(START_LIMIT):
            while sum("etcd not reachable at start-up" in r.getMessage() for r in caplog.records) < 2:
                assert not joining.done(), joining
                await asyncio.sleep(0.05)
        await asyncio.to_thread(etcd_server.start)
        await asyncio.wait_for(joining, START_LIMIT)
    try:
        assert [m.id for m in node.membership.members()] == ["n1"]
        tries = [r.getMessage() for r in caplog.records if "etcd not reachable at start-up" in r.getMessage()]
        assert "(try 1)" in tries[0] and etcd_server.endpoint in caplog.text
    finally:
        await node.close()


async def test_a_node_with_no_etcd_start_wait_stops_at_once(etcd_server: EtcdServer, tmp_path: Path) -> None:
    etcd_server.halt()
    node = _node(tmp_path, {**BASE, "etcd": etcd_server.endpoint, "name": "t", "etcd_start_wait": 0})
    async with asyncio.timeout(START_LIMIT):
        with pytest.raises(PolecatError, match=f"etcd {etcd_server.endpoint}") as stopped:
            await node.join()
    assert not isinstance(stopped.value, ConfigError)  # unreachable, not refused: exit 1
    await node.close()
