"""What near-duplicates cost on disk, and whether every page comes back: one doc site crawled with each
``dedup.near_duplicates`` mode (``delta``, ``full``, ``drop``), then every fetched page read back as
``polecat cat`` does (the fetch's own hash) and compared with what was served.

    python -m benchmarks.bench_near_storage [DOC_DIR] [--rate R] [--mirrors K]

DOC_DIR defaults to the SQLite documentation (Debian's ``sqlite3-doc``: 766 pages, release notes of every
version, near-duplicates of each other), served on 127.0.0.1 (benchmarks/docserve.py). ``--mirrors K``
serves it K more times, each on its own port as a mirror whose pages carry a footer of their own (a
mirror with a changed footer: every page a near-duplicate of its original), and crawls all of them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import unquote, urlsplit

from benchmarks.docserve import served_bytes, serving
from polecat.config import StoreConfig
from polecat.store.segstore import SegmentStore
from polecat.testing.dns import LocalDnsServer

MODES = ("delta", "full", "drop")


def _crawl(roots: list[str], data: Path, mode: str, rate: float, dns: str) -> dict[str, float]:
    """One crawl of the site's copies, every name asked of ``dns``, the bench's own nameserver on loopback
    that knows none (the crawl's scope keeps it on the loopback hosts; this keeps it there whatever a
    real doc site links)."""
    config = data.parent / f"{mode}.toml"
    config.write_text(f'[dedup]\nnear_duplicates = "{mode}"\n')
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "polecat", "-q", "crawl", *roots, "--data", str(data),
                    "--allow-private", "--rate", str(rate), "--max-pages", "50000", "--config", str(config),
                    "--dns-server", dns],
                   check=True, capture_output=True, timeout=1800)
    wall = time.monotonic() - started
    with SegmentStore.open(data / "store", StoreConfig(), read_only=True) as store:
        s = store.stats()
        return {"records": s.records, "bodies": s.bodies, "revisits": s.revisits, "raw_bytes": s.raw_bytes,
                "stored_bytes": s.stored_bytes, "crawl_s": round(wall, 1)}


def _wrong(data: Path, docs: Path, footers: dict[int, bytes]) -> tuple[int, int]:
    """(pages checked, pages whose stored bytes, as ``polecat cat`` reads them, differ from what their
    server sent: their file, with the footer of the mirror on that port)."""
    checked = wrong = 0
    with SegmentStore.open(data / "store", StoreConfig(), read_only=True) as store:
        for record in store.records():
            url = urlsplit(record.url)
            path = docs / unquote(url.path).lstrip("/")
            if record.status != 200 or not path.is_file():
                continue
            checked += 1
            served = served_bytes(path, footers[url.port or 80])
            wrong += not store.has(record.own_hash) or store.get(record.own_hash) != served
    return checked, wrong


def _footer(k: int, mirrors: int) -> bytes:
    """The footer mirror ``k`` adds to its pages."""
    return (f'<p class="mirror">Mirrored by mirror {k} of {mirrors}, synced 2026-12-0{k % 9 + 1}; '
            f"report problems to mirror-{k}@example.org</p>").encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("docs", nargs="?", type=Path, default=Path("/usr/share/doc/sqlite3"))
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s to each loopback host")
    parser.add_argument("--mirrors", type=int, default=0, help="mirrors with a footer of their own")
    args = parser.parse_args()
    footers = [b""] + [_footer(k, args.mirrors) for k in range(1, args.mirrors + 1)]
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp, LocalDnsServer() as dns:
        servers = [stack.enter_context(serving(args.docs, footer)) for footer in footers]
        by_port = {server.server_address[1]: server.footer for server in servers}
        roots = [f"{server.base_url}/index.html" for server in servers]
        for mode in MODES:
            data = Path(tmp) / mode
            figures = _crawl(roots, data, mode, args.rate, dns.address)
            checked, wrong = _wrong(data, args.docs, by_port)
            print(json.dumps({"mode": mode, "mirrors": args.mirrors, **figures, "pages_checked": checked,
                              "pages_wrong": wrong}), flush=True)


if __name__ == "__main__":
    main()
