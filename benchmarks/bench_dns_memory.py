"""Anonymous memory a c-ares channel keeps per distinct name resolved, with and without c-ares' own query
cache (polecat/fetch/dns.py: the channel polecat makes has it off).

    python -m benchmarks.bench_dns_memory --names 40000 --ttl 300

Serves ``--names`` names (TTL ``--ttl``) from a local DNS server (polecat.testing.dns, a thread of this
process), then resolves each once through an aiodns resolver, 20 at a time, results dropped: first over
a channel as aiodns makes it, then over polecat's, each in a fresh child process. Prints the child's
RssAnon every ``--every`` names and the growth per name. A cached answer lives for its TTL (c-ares caps
it at one hour), so the first growth is what a crawl meeting that many new names within one TTL holds.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys

import aiodns

from polecat.fetch.dns import _uncached_resolver
from polecat.testing.dns import LocalDnsServer


def _anon_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon"):
                return int(line.split()[1]) / 1024
    return 0.0


async def _resolve(names: int, ttl: int, every: int, uncached: bool) -> None:
    dns = LocalDnsServer()
    dns.start()
    try:
        for i in range(names):
            dns.add(f"h{i}.memory.test", ["127.0.0.2"], ttl=ttl)
        make = _uncached_resolver if uncached else aiodns.DNSResolver
        resolver = make(nameservers=[dns.address], timeout=5, tries=2)
        start, errors = _anon_mib(), 0
        for first in range(0, names, 20):
            batch = range(first, min(first + 20, names))
            asked = [resolver.query_dns(f"h{i}.memory.test", "A") for i in batch]
            got = await asyncio.gather(*asked, return_exceptions=True)
            errors += sum(isinstance(g, Exception) for g in got)
            done = min(first + 20, names)
            if done % every == 0 or done == names:
                print(f"  {done:8d} names: RssAnon {_anon_mib():7.1f} MiB", flush=True)
        grown = _anon_mib() - start
        print(f"  grown {grown:.1f} MiB: {grown * 2**20 / names:.0f} B a name ({errors} errors)", flush=True)
    finally:
        dns.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", type=int, default=40_000)
    ap.add_argument("--ttl", type=int, default=300)
    ap.add_argument("--every", type=int, default=10_000)
    ap.add_argument("--child", choices=["aiodns", "polecat"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        asyncio.run(_resolve(args.names, args.ttl, args.every, args.child == "polecat"))
        return
    for child, label in (("aiodns", "a channel as aiodns makes it (c-ares' query cache on)"),
                         ("polecat", "polecat's channel (c-ares' query cache off)")):
        print(f"{label}:", flush=True)
        subprocess.run([sys.executable, "-m", "benchmarks.bench_dns_memory", "--names", str(args.names),
                        "--ttl", str(args.ttl), "--every", str(args.every), "--child", child], check=True)


if __name__ == "__main__":
    main()
