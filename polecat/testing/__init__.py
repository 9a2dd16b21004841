"""Loopback test fixtures shared by the tests and the benchmarks: a multi-host test web, a local DNS
server, hostile servers. Nothing here ever talks to a non-loopback address."""
