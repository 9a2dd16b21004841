"""The physical limit: a bare uvloop + aiohttp loop that GETs a URL list and reads each body, with no
robots, no politeness, no parsing, no storage. Run as ``python -m benchmarks.runners.bare URLS HOSTS N``
where URLS has one URL a line and HOSTS is a JSON object ``{host: address}`` used instead of DNS."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
from aiohttp.abc import AbstractResolver, ResolveResult


class StaticResolver(AbstractResolver):
    """Answers from a fixed ``{host: address}`` map (the benchmark's hosts), nothing else."""

    def __init__(self, hosts: dict[str, str]) -> None:
        self._hosts = hosts

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[ResolveResult]:
        address = self._hosts[host.lower()]
        return [
            ResolveResult(hostname=host, host=address, port=port, family=socket.AF_INET, proto=0, flags=0)
        ]

    async def close(self) -> None:
        return None


async def fetch_all(urls: list[str], hosts: dict[str, str], concurrency: int) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(resolver=StaticResolver(hosts), limit=concurrency, limit_per_host=0)
    pending = iter(urls)
    ok = failed = body_bytes = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal ok, failed, body_bytes
        for url in pending:
            try:
                async with session.get(url, allow_redirects=False) as resp:
                    body_bytes += len(await resp.read())
                    ok += resp.status == 200
            except aiohttp.ClientError:
                failed += 1

    timeout = aiohttp.ClientTimeout(total=60)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
        asyncio.TaskGroup() as group,
    ):
        for _ in range(concurrency):
            group.create_task(worker(session))
    return {"ok": ok, "failed": failed, "bytes": body_bytes}


def main() -> None:
    urls_file, hosts_file, concurrency = sys.argv[1:4]
    urls = Path(urls_file).read_text().split()
    hosts = json.loads(Path(hosts_file).read_text())
    result = uvloop.run(fetch_all(urls, hosts, int(concurrency)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
