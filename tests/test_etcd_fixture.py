"""The private etcd of the tests (polecat/testing/etcd.py): a first start whose port another process took
meanwhile moves to new ports; a start after a halt keeps its ports."""

from __future__ import annotations

import socket

import pytest

from polecat.testing.etcd import EtcdServer, etcd_binary

pytestmark = pytest.mark.skipif(etcd_binary() is None, reason="etcd is not installed")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 0.5):
            return True
    except OSError:
        return False


def test_a_first_start_whose_port_was_taken_moves_to_new_ports() -> None:
    etcd = EtcdServer()
    taken = etcd.client_port
    with socket.socket() as squatter:  # what a test beside it might hold by then
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with etcd:
            assert etcd.client_port != taken and etcd.endpoint.endswith(f":{etcd.client_port}")
            assert _listening(etcd.client_port)


def test_a_start_after_a_halt_keeps_its_ports() -> None:
    with EtcdServer() as etcd:
        port, endpoint = etcd.client_port, etcd.endpoint
        etcd.halt()
        assert not _listening(port)
        etcd.start()
        assert (etcd.client_port, etcd.endpoint) == (port, endpoint) and _listening(port)
