"""What near-duplicates cost on disk, and whether every page comes back: one doc site crawled with each
``dedup.near_duplicates`` mode (``delta``, ``full``, ``drop``), then every fetched page read back as
``polecat cat`` does (the fetch's own hash) and compared with its file.

    python -m benchmarks.bench_near_storage [DOC_DIR] [--rate R]

DOC_DIR defaults to the SQLite documentation (Debian's ``sqlite3-doc``: 766 pages, release notes of every
version, near-duplicates of each other), served by ``python -m http.server`` on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlsplit

from polecat.config import StoreConfig
from polecat.store.segstore import SegmentStore

MODES = ("delta", "full", "drop")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _crawl(root: str, data: Path, mode: str, rate: float) -> dict[str, float]:
    config = data.parent / f"{mode}.toml"
    config.write_text(f'[dedup]\nnear_duplicates = "{mode}"\n')
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "polecat", "-q", "crawl", root, "--data", str(data),
                    "--allow-private", "--rate", str(rate), "--max-pages", "5000", "--config", str(config)],
                   check=True, capture_output=True, timeout=1800)
    wall = time.monotonic() - started
    with SegmentStore.open(data / "store", StoreConfig(), read_only=True) as store:
        s = store.stats()
        return {"records": s.records, "bodies": s.bodies, "revisits": s.revisits, "raw_bytes": s.raw_bytes,
                "stored_bytes": s.stored_bytes, "crawl_s": round(wall, 1)}


def _wrong(data: Path, docs: Path) -> tuple[int, int]:
    """(pages checked, pages whose stored bytes, as ``polecat cat`` reads them, differ from their file)."""
    checked = wrong = 0
    with SegmentStore.open(data / "store", StoreConfig(), read_only=True) as store:
        for record in store.records():
            path = docs / unquote(urlsplit(record.url).path).lstrip("/")
            if record.status != 200 or not path.is_file():
                continue
            checked += 1
            wrong += not store.has(record.own_hash) or store.get(record.own_hash) != path.read_bytes()
    return checked, wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("docs", nargs="?", type=Path, default=Path("/usr/share/doc/sqlite3"))
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s to the one loopback host")
    args = parser.parse_args()
    port = _port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              cwd=args.docs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):  # bounded: the server starts in well under a second
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        with tempfile.TemporaryDirectory() as tmp:
            for mode in MODES:
                data = Path(tmp) / mode
                figures = _crawl(f"http://127.0.0.1:{port}/index.html", data, mode, args.rate)
                checked, wrong = _wrong(data, args.docs)
                print(json.dumps({"mode": mode, **figures, "pages_checked": checked, "pages_wrong": wrong}))
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
