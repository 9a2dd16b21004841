"""The crawlers under comparison, each a command line the harness runs pinned to one core.

- ``polecat``: the full pipeline through its CLI, resolving through the harness's local DNS server.
- ``scrapy``: Scrapy (pinned release) in its own virtualenv under benchmarks/.venvs, see scrapy_crawl.py.
- ``limit``: a bare uvloop + aiohttp loop over the ground-truth URL list, see bare.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RUNNERS", "SCRAPY_VERSION", "RunContext", "command", "ensure_scrapy"]

SCRAPY_VERSION = "2.19.0"
RUNNERS = ("polecat", "scrapy", "limit")
_HERE = Path(__file__).resolve().parent
SCRAPY_VENV = _HERE.parent / ".venvs" / "scrapy"


@dataclass(frozen=True, slots=True)
class RunContext:
    seeds_file: Path
    """Host roots, one a line."""
    urls_file: Path
    """The ground truth, one URL a line (for the limit runner)."""
    hosts_file: Path
    """JSON ``{host: loopback address}`` for runners that cannot use the DNS server."""
    dns_address: str
    out_dir: Path
    """An empty directory this run may write to."""
    rate: float
    """Requests per second per host (the per-host delay is its inverse)."""
    concurrency: int
    scope: str = "any"
    """polecat's ``--scope``: ``host`` keeps it on the seeds' hosts (a real web links elsewhere)."""


def ensure_scrapy() -> Path:
    """The Scrapy virtualenv's python, creating it (``pip install scrapy==VERSION``) on first use."""
    python = SCRAPY_VENV / "bin" / "python"
    probe = [str(python), "-c", f"import scrapy, sys; sys.exit(scrapy.__version__ != {SCRAPY_VERSION!r})"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    shutil.rmtree(SCRAPY_VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(SCRAPY_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"scrapy=={SCRAPY_VERSION}"], check=True)
    return python


def _polecat_cli() -> list[str]:
    # The interpreter running the harness, not the virtualenv's ``polecat`` script: the script imports the
    # tree its install named, while ``-m`` runs the tree on PYTHONPATH (the one being measured).
    return [sys.executable, "-m", "polecat"]


def command(runner: str, ctx: RunContext) -> list[str]:
    """The argv that runs ``runner`` over the benchmark web."""
    if runner == "polecat":
        return [
            *_polecat_cli(),
            "crawl",
            "--seeds-file", str(ctx.seeds_file),
            "--data", str(ctx.out_dir / "data"),
            "--rate", f"{ctx.rate:g}",
            "--concurrency", str(ctx.concurrency),
            "--allow-private",
            "--scope", ctx.scope,
            "--dns-server", ctx.dns_address,
            "--quiet",
        ]  # fmt: skip
    if runner == "scrapy":
        return [
            str(ensure_scrapy()),
            str(_HERE / "scrapy_crawl.py"),
            str(ctx.seeds_file),
            str(ctx.hosts_file),
            str(ctx.out_dir / "pages"),
            f"{1 / ctx.rate:g}",
            str(ctx.concurrency),
        ]
    if runner == "limit":
        return [
            sys.executable,
            "-m",
            "benchmarks.runners.bare",
            str(ctx.urls_file),
            str(ctx.hosts_file),
            str(ctx.concurrency),
        ]
    raise ValueError(f"unknown runner {runner!r}; choose from {', '.join(RUNNERS)}")
