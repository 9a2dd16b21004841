"""``polecat crawl --workers N``: throughput and CPU per page for several worker counts, and the cost of
the hand-off per URL.

    python -m benchmarks.bench_workers --hosts 400 --pages-per-host 40 --rate 20 --workers 1,2
    python -m benchmarks.bench_workers --handoff 200000
    python -m benchmarks.bench_workers --resize 2,3 --queued 200000 --hosts 2000

Crawl part: one generated web (``--hosts`` x ``--pages-per-host``, served by benchmarks/server.py in its
own processes) is crawled to the end once per worker count, each time from an empty data dir, in the same
run so that the counts see the same machine load. The politeness ceiling (hosts x rate) is set well above
what the crawler can do, so the crawler's CPU is the limit. Figures: pages from the server's request log,
pages/s over the span from the first to the last request, CPU seconds of the whole process tree (parent
and workers, from wait4), CPU ms per page, politeness violations (must be 0), the web server's CPU per page
(it runs on the same machine) and the bound that puts on pages/s: every core busy with the crawler and
the server, ``cores / (crawler + server CPU per page)``.

Hand-off part: one process sends ``--handoff`` URLs of the generated web through the real path (outbox in
LMDB, msgpack batches, HTTP over a unix socket, receiver, acknowledgements); CPU per URL is the process's
CPU time (sender and receiver together) over the URLs, bytes per URL the request bodies over the URLs.

Resize part: ``--queued`` URLs over ``--hosts`` hosts are queued in the frontiers of an N-worker layout
(each at its owner), then the layout is resized to M workers as ``polecat crawl --workers M`` would do
(export, adopt, release, offline); figures are the slices and URLs moved and the time it took.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks.bench_politeness import ADDRESSES
from benchmarks.compare import run_child
from benchmarks.server import StaticServer, render_site
from polecat.cluster.batch import Batch, HandoffUrl
from polecat.cluster.handoff import Handoff
from polecat.cluster.layout import record_layout, worker_config
from polecat.cluster.outbox import Outbox
from polecat.cluster.receiver import HandoffReceiver
from polecat.cluster.resize import member_ids, resize
from polecat.cluster.ring import Ring
from polecat.cluster.transport import HttpTransport, serve
from polecat.config import config_from_mapping
from polecat.frontier.opener import open_frontier
from polecat.frontier.slices import SLICES, slice_of
from polecat.hosts import host_key
from polecat.testing.dns import LocalDnsServer
from polecat.testing.serverlog import politeness_violations
from polecat.testing.sitegen import Site, SiteSpec
from polecat.testing.siteserve import reserve_port

ROOT = Path(__file__).resolve().parent.parent


def crawl(args: argparse.Namespace) -> None:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    port = reserve_port(ADDRESSES)
    site = Site(SiteSpec(hosts=args.hosts, pages_per_host=args.pages_per_host, seed=9))
    size = render_site(site, port, out / "site")
    seeds = site.seeds(port)
    (out / "seeds.txt").write_text("\n".join(seeds) + "\n")
    print(f"site: {args.hosts} hosts x {args.pages_per_host} pages, {size / 1024**2:.0f} MB; "
          f"{os.cpu_count()} cores; politeness ceiling {args.hosts * args.rate:.0f} req/s")
    print("| workers | pages | wall s | pages/s (first..last request) | CPU s | CPU ms/page | violations "
          "| server CPU ms/page | machine bound pages/s | largest worker's hosts | split bound x |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with LocalDnsServer() as dns:
        for i, host in enumerate(site.hosts):
            dns.add(host, [ADDRESSES[i % len(ADDRESSES)]])
        for n in args.workers:
            data = out / f"data-{n}"
            shutil.rmtree(data, ignore_errors=True)
            argv = [sys.executable, "-m", "polecat", "crawl", "--seeds-file", str(out / "seeds.txt"),
                    "--data", str(data), "--rate", str(args.rate), "--concurrency", str(args.concurrency),
                    "--scope", "host", "--allow-private", "--quiet", "--dns-server", dns.address,
                    "--workers", str(n)]
            server = StaticServer(out / "site", port, len(ADDRESSES), args.server_workers, out / "server",
                                  None)
            server.start()
            try:
                code, wall, cpu_s, _ = run_child(argv, None, out / f"crawler-{n}.txt", args.timeout)
            finally:
                log = server.stop()
            pages = [r for r in log if r.target != "/robots.txt"]
            starts = [r.start for r in log]
            span = max(starts) - min(starts) if starts else 0.0
            violations = politeness_violations(log, 1.0 / args.rate)
            for v in violations[:5]:  # what a non-zero count is made of, for whoever has to chase it
                print(f"violation ({n} workers): {v.kind} on {v.host}: {v.first.target} [{v.first.status}] "
                      f"-> {v.second.target} [{v.second.status}] {v.gap * 1000:.1f} ms apart, "
                      f"{v.required * 1000:.0f} required", file=sys.stderr)
            crawler_ms = cpu_s * 1000 / max(1, len(pages))
            server_ms = server.cpu_s * 1000 / max(1, len(pages))
            # Every core of the machine busy with this crawl and its server, nothing else: what no worker
            # count can beat here.
            bound = (os.cpu_count() or 1) * 1000 / (crawler_ms + server_ms)
            # A host belongs to one worker (its slice's owner): the worker with the most hosts finishes
            # last, so n workers beat one by at most hosts / that worker's hosts (the pages per host are
            # alike), however many cores there are.
            ring = Ring(member_ids(n))
            largest = max(Counter(ring.owner(slice_of(host_key(seed))) for seed in seeds).values())
            print(f"| {n} | {len(pages):,} | {wall:.1f} | {len(pages) / span:,.0f} | {cpu_s:.1f} | "
                  f"{crawler_ms:.2f} | {len(violations)} | {server_ms:.2f} | {bound:,.0f} | "
                  f"{largest} of {len(seeds)} | {len(seeds) / largest:.2f} |"
                  + ("" if code == 0 else f" exit {code}"), flush=True)


async def handoff(n_urls: int, batch_urls: int) -> None:
    site = Site(SiteSpec(hosts=400, pages_per_host=max(1, n_urls // 400 + 1), seed=9))
    urls = [HandoffUrl(site.url(i, 8080), 3, 0.01) for i in range(n_urls)]
    received = 0

    async def sink(batch: Batch) -> None:
        nonlocal received
        received += len(batch.urls)

    with tempfile.TemporaryDirectory(prefix="pc-bench-") as tmp:
        address = f"unix:{tmp}/r.sock"
        runner = await serve(HandoffReceiver(sink), address)
        transport = HttpTransport()
        box = Outbox(Path(tmp) / "outbox", batch_urls=batch_urls)
        h = Handoff("w0", box, transport, {"w1": address})
        task = asyncio.create_task(h.run())
        cpu0, t0 = time.process_time(), time.monotonic()
        for start in range(0, n_urls, 50):  # a page's worth of outlinks at a time, as the node stages them
            h.stage("w1", urls[start : start + 50])
        await h.drain()
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await transport.close()
        await runner.cleanup()
        box.close()
    mean_len = sum(len(u.url) for u in urls) / len(urls)
    print(f"hand-off: {received:,} of {n_urls:,} URLs acknowledged in {wall:.2f} s wall; "
          f"CPU {cpu * 1e6 / n_urls:.1f} us/URL (sender + receiver, one process); "
          f"{h.bytes_sent / n_urls:.1f} bytes/URL on the wire (mean URL {mean_len:.0f} chars); "
          f"batches of {batch_urls}")


def resize_bench(out: Path, old: int, new: int, queued: int, hosts: int) -> None:
    data = out / "resize"
    shutil.rmtree(data, ignore_errors=True)
    cfg = config_from_mapping({"data_dir": str(data), "scope": {"mode": "any"}})
    ring = Ring(member_ids(old))
    record_layout(data, old)
    now = time.time()
    t0 = time.monotonic()
    for k in range(old):
        lf = open_frontier(worker_config(cfg, k, old), now)
        for i in range(queued):
            url = f"http://h{i % hosts}.test/p/{i}"
            if ring.owner(slice_of(host_key(url))) == f"w{k}":
                lf.db.applied(lf.frontier.add(url, 1, 1.0, now))
        lf.commit()
        lf.close()
    print(f"built {old} worker frontiers with {queued:,} queued URLs over {hosts:,} hosts in "
          f"{time.monotonic() - t0:.1f} s")
    report = resize(cfg, new, now)
    print(f"resize {old} -> {new}: {report.slices_moved:,} of {SLICES} slices moved, {report.hosts:,} hosts, "
          f"{report.queued:,} queued URLs in {report.seconds:.2f} s = {report.queued / report.seconds:,.0f} "
          f"URLs/s, {report.slices_moved / report.seconds:,.0f} slices/s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_workers",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=400)
    ap.add_argument("--pages-per-host", type=int, default=40)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    ap.add_argument("--server-workers", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--handoff", type=int, default=0, help="URLs for the hand-off cost (0: crawl part)")
    ap.add_argument("--batch-urls", type=int, default=1024)
    ap.add_argument("--resize", type=lambda s: [int(x) for x in s.split(",")], metavar="N,M",
                    help="resize part: worker counts before and after")
    ap.add_argument("--queued", type=int, default=200_000, help="resize part: queued URLs")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-out" / "workers")
    args = ap.parse_args(argv)
    if args.resize:
        resize_bench(args.out, args.resize[0], args.resize[1], args.queued, args.hosts)
    elif args.handoff:
        asyncio.run(handoff(args.handoff, args.batch_urls))
    else:
        crawl(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
