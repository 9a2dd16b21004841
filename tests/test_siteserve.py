"""polecat/testing/siteserve.py: a port held for servers started later."""

from __future__ import annotations

import socket

import pytest

from polecat.testing.siteserve import bind_loopback, reserve_port


def test_a_reserved_port_is_bound_by_a_server_and_by_nothing_else() -> None:
    addresses = ["127.0.0.1", "127.0.0.2"]
    port = reserve_port(addresses)
    for addr in addresses:  # nobody else can take it while it is held
        with socket.socket() as other, pytest.raises(OSError):
            other.bind((addr, port))
    servers = bind_loopback(addresses, port, reuse_port=True)  # as a benchmark's server workers bind it
    try:
        for addr, server in zip(addresses, servers, strict=True):
            with socket.create_connection((addr, port), timeout=5):
                conn, _ = server.accept()  # the server, not the held socket, takes the connection
                conn.close()
    finally:
        for server in servers:
            server.close()
    with socket.socket() as other, pytest.raises(OSError):  # still held once the server is gone
        other.bind((addresses[0], port))
