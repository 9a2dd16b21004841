"""pywb, the replay tool archivists use, serving a WARC on loopback for the replay tests. pywb lives in
its own virtualenv (.ci/run), named by ``POLECAT_PYWB`` (its ``bin`` directory)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PYWB = Path(os.environ["POLECAT_PYWB"]) if os.environ.get("POLECAT_PYWB") else None
NEEDS_PYWB = pytest.mark.skipif(PYWB is None and not os.environ.get("POLECAT_REQUIRE_PYWB"),
                                reason="pywb is not installed (POLECAT_PYWB names its bin directory)")
"""A replay test skips without pywb, except in CI (``POLECAT_REQUIRE_PYWB``)."""


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as resp:
        body: bytes = resp.read()
        return body


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def pywb_serving(warc: Path, root: Path) -> Iterator[str]:
    """pywb serving ``warc`` from a new collection in ``root``: yields the collection's URL prefix."""
    assert PYWB is not None, "POLECAT_REQUIRE_PYWB is set but POLECAT_PYWB names no pywb"
    root.mkdir()
    for args in (["init", "coll"], ["add", "coll", str(warc)]):
        subprocess.run([str(PYWB / "wb-manager"), *args], cwd=root, check=True, capture_output=True,
                       timeout=120)
    port = _free_port()
    server = subprocess.Popen([str(PYWB / "wayback"), "-b", "127.0.0.1", "-p", str(port)], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/coll/"
        deadline = time.monotonic() + 60
        while True:  # bounded: pywb starts in a few seconds
            try:
                get(base)
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None and time.monotonic() < deadline, "pywb did not start"
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
