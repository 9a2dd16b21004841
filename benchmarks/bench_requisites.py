"""What page requisites cost and whether a crawl with them replays as the site was shown: one doc site
crawled without and with ``--requisites``, served from loopback by a server that counts every request;
then every stored response compared with its file, and (``--pywb``) the crawl exported, every requisite
replayed through pywb and compared with its file, and (with Chromium) one replayed page opened and
screenshotted.

    python -m benchmarks.bench_requisites [DOC_DIR] [--rate R] [--pywb PYWB_BIN] [--page PATH]
                                          [--screenshot FILE.png]

DOC_DIR defaults to the SQLite documentation (Debian's ``sqlite3-doc``: 766 pages; stylesheets, a script and
images), served on 127.0.0.1. Prints the CPU cost a page of the link and the requisite extraction, one
JSON line per crawl, then one for the replay.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from benchmarks.docserve import serving
from polecat.config import StoreConfig
from polecat.parse.html import parse_html
from polecat.parse.requisites import page_requisites
from polecat.store.segstore import SegmentStore
from polecat.testing.browser import Browser, find_chromium
from polecat.testing.dns import LocalDnsServer
from polecat.testing.pywb import get, in_replay_frame, pywb_serving, stamp_now

REQUISITE_SUFFIXES = (".css", ".gif", ".jpg", ".jpeg", ".png", ".svg", ".ico", ".js", ".woff", ".woff2")


def _parse_cost(docs: Path) -> dict[str, float]:
    """CPU microseconds a page (best of 5 passes over every HTML page of ``docs``) of the link extraction
    every crawl runs and of the requisite extraction ``--requisites`` adds (a second lexbor parse)."""
    texts = [p.read_bytes().decode("utf-8", "replace") for p in sorted(docs.rglob("*.html"))]

    def best(fn: Callable[[str], object]) -> float:
        times = []
        for _ in range(5):
            started = time.process_time()
            for text in texts:
                fn(text)
            times.append(time.process_time() - started)
        return round(min(times) / max(1, len(texts)) * 1e6, 1)

    return {"pages": len(texts), "parse_html_us": best(lambda t: parse_html(t, "http://docs.test/")),
            "page_requisites_us": best(page_requisites)}


def _crawl(seed: str, data: Path, rate: float, requisites: bool, dns: str) -> float:
    """One crawl of the site. Requisites on other hosts (a font on a CDN, named by a page of a real doc
    site) are not fetched, and every name goes to ``dns``, the bench's own nameserver on loopback, which
    knows none: the crawl stays on the loopback host it serves."""
    started = time.monotonic()
    config = data.parent / f"{data.name}.toml"
    config.write_text('[scope]\nrequisite_hosts = "scope"\n')
    flags = ["--requisites"] if requisites else []
    subprocess.run([sys.executable, "-m", "polecat", "-q", "crawl", seed, "--data", str(data),
                    "--config", str(config), "--dns-server", dns, "--allow-private", "--rate", str(rate),
                    "--max-pages", "5000", *flags],
                   check=True, capture_output=True, timeout=1800)
    return time.monotonic() - started


def _stored(data: Path, docs: Path) -> dict[str, int]:
    """Figures of the store, and how many 200 responses differ from their file."""
    checked = wrong = requisites = 0
    with SegmentStore.open(data / "store", StoreConfig(), read_only=True) as store:
        s = store.stats()
        for record in store.records():
            path = docs / unquote(urlsplit(record.url).path).lstrip("/")
            if record.status != 200 or not path.is_file() or record.size == 0:
                continue
            checked += 1
            requisites += path.suffix.lower() in REQUISITE_SUFFIXES
            wrong += not store.has(record.own_hash) or store.get(record.own_hash) != path.read_bytes()
        return {"records": s.records, "bodies": s.bodies, "stored_bytes": s.stored_bytes,
                "responses_checked": checked, "requisites_stored": requisites, "responses_wrong": wrong}


def _requests(counts: Counter[str]) -> dict[str, int]:
    asked = {p: n for p, n in counts.items() if p != "/robots.txt"}
    return {"requests": sum(asked.values()),
            "requisite_requests": sum(n for p, n in asked.items() if p.lower().endswith(REQUISITE_SUFFIXES)),
            "urls_asked_twice": sum(n > 1 for n in asked.values())}


PAGE_VIEW = """
  const sheets = [...doc.styleSheets];
  const rules = sheets.map(s => { try { return s.cssRules.length; } catch (e) { return -1; } });
  const images = [...doc.images];
  return {stylesheets: sheets.length, css_rules: rules.reduce((a, b) => a + Math.max(b, 0), 0),
          images: images.length, images_shown: images.filter(i => i.naturalWidth > 0).length,
          body_font: win.getComputedStyle(doc.body).fontFamily};"""


async def _show(chromium: str, url: str) -> tuple[dict[str, Any], bytes]:
    """What Chromium shows of the replayed page at ``url``, and its screenshot."""
    async with Browser(chromium) as browser:
        await browser.open(url)
        shown: dict[str, Any] = await browser.wait_for(in_replay_frame(PAGE_VIEW), within=120.0)
        return shown, await browser.screenshot()


def _replay(data: Path, docs: Path, base_url: str, pywb: Path, page: str, screenshot: Path | None,
            tmp: Path) -> dict[str, Any]:
    warc = tmp / "crawl.warc.gz"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "polecat", "store", "export", str(data), "--warc", str(warc)],
                   check=True, capture_output=True, timeout=600)
    export_s = time.monotonic() - started
    with pywb_serving(pywb, warc, tmp / "pywb") as coll:
        stamp = stamp_now()
        files = sorted(p for p in docs.rglob("*") if p.is_file() and p.suffix.lower() in REQUISITE_SUFFIXES)
        replayed = wrong = 0
        missing: list[Path] = []
        for path in files:
            url = f"{base_url}/{path.relative_to(docs).as_posix()}"
            try:
                body = get(f"{coll}{stamp}id_/{url}")
            except OSError:  # not captured
                missing.append(path)
                continue
            replayed += 1
            wrong += body != path.read_bytes()
        chromium = find_chromium()
        shown: dict[str, Any] = {"chromium": "not installed"}
        if chromium is not None:
            shown, image = asyncio.run(_show(chromium, f"{coll}{stamp}/{base_url}{page}"))
            if screenshot is not None:
                screenshot.write_bytes(image)
    return {"warc_bytes": warc.stat().st_size, "export_s": round(export_s, 1), "requisite_files": len(files),
            "replayed": replayed, "replayed_wrong": wrong, "not_captured": len(missing),
            "not_captured_but_named": _named(docs, missing), "page": page, **shown}


def _named(docs: Path, files: list[Path]) -> list[str]:
    """Those of ``files`` whose name some HTML or CSS file of the site mentions (a requisite a page may
    use that the crawl did not fetch; the others no page names)."""
    texts = [p.read_text(errors="replace") for p in docs.rglob("*") if p.suffix in (".html", ".css")]
    return [p.relative_to(docs).as_posix() for p in files if any(p.name in text for text in texts)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("docs", nargs="?", type=Path, default=Path("/usr/share/doc/sqlite3"))
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s to the one loopback host")
    parser.add_argument("--pywb", type=Path, help="pywb's bin directory: export and replay the crawl")
    parser.add_argument("--page", default="/index.html", help="the page opened in Chromium")
    parser.add_argument("--screenshot", type=Path, help="write Chromium's screenshot of that page here")
    args = parser.parse_args(argv)
    print(json.dumps({"parse_cost": _parse_cost(args.docs)}), flush=True)
    with serving(args.docs) as server, tempfile.TemporaryDirectory() as tmp, LocalDnsServer() as dns:
        base_url = server.base_url
        for requisites in (False, True):
            server.counts.clear()
            data = Path(tmp) / f"requisites-{requisites}"
            wall = _crawl(f"{base_url}/index.html", data, args.rate, requisites, dns.address)
            print(json.dumps({"requisites": requisites, "crawl_s": round(wall, 1), **_requests(server.counts),
                              **_stored(data, args.docs), "names_asked": sorted(dns.queries)}), flush=True)
        if args.pywb is not None:
            print(json.dumps(_replay(data, args.docs, base_url, args.pywb, args.page, args.screenshot,
                                     Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
