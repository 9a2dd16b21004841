"""pywb, the replay tool archivists use, serving a WARC on loopback (the replay tests and the requisite
benchmark). pywb lives in its own virtualenv (.ci/run installs it); callers name its ``bin`` directory."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path


def get(url: str) -> bytes:
    """The body of a GET of ``url`` (a replay URL on loopback)."""
    with urllib.request.urlopen(url, timeout=30) as resp:
        body: bytes = resp.read()
        return body


def stamp_now() -> str:
    """A 14-digit timestamp for replay URLs: pywb serves the capture closest to it."""
    return datetime.now(UTC).strftime("%Y%m%d%H%M%S")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def pywb_serving(pywb_bin: Path, warc: Path, root: Path) -> Iterator[str]:
    """pywb (from ``pywb_bin``) serving ``warc`` from a new collection in the new directory ``root``, on
    127.0.0.1: yields the collection's URL prefix (``.../coll/``)."""
    root.mkdir()
    for args in (["init", "coll"], ["add", "coll", str(warc)]):
        subprocess.run([str(pywb_bin / "wb-manager"), *args], cwd=root, check=True, capture_output=True,
                       timeout=300)
    port = _free_port()
    server = subprocess.Popen([str(pywb_bin / "wayback"), "-b", "127.0.0.1", "-p", str(port)], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/coll/"
        deadline = time.monotonic() + 60
        while True:  # bounded: pywb starts in a few seconds
            try:
                get(base)
                break
            except (urllib.error.URLError, ConnectionError):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("pywb did not start") from None
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)


def in_replay_frame(body: str) -> str:
    """A JavaScript expression for :meth:`polecat.testing.browser.Browser.wait_for` on a page pywb shows in
    its frame (``.../coll/<stamp>/<url>``): null until the replayed page has loaded, its images included;
    then the value of ``body``, a function body over ``doc`` (the replayed document) and ``win`` (its
    window)."""
    return ("(() => {\n"
            '  const frame = document.querySelector("#replay_iframe");\n'
            "  const doc = frame && frame.contentDocument;\n"
            '  if (!doc || doc.URL === "about:blank" || doc.readyState !== "complete") return null;\n'
            "  if (![...doc.images].every(i => i.complete)) return null;\n"
            "  const win = frame.contentWindow;\n"
            f"  {body}\n"
            "})()")
