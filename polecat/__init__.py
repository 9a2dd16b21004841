"""polecat: a polite, fast, crash-safe asyncio web crawler with an embedded LMDB frontier.

Public API: :class:`Crawler` (one node), :class:`Config` and :func:`config_from_mapping` (the one
validated configuration), :class:`Page` (what callbacks receive), :class:`CrawlStats` (metrics) and the
:class:`PolecatError` exception root. Everything else is implementation.

The names load on first use (PEP 562), so that ``import polecat.commands.main`` can settle process-wide
settings (polecat/commands/main.py: the BLAS thread pool) before the crawler's modules import numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from polecat.version import __version__ as __version__

if TYPE_CHECKING:
    from polecat.config import Config, config_from_mapping
    from polecat.errors import PolecatError
    from polecat.node.crawler import Crawler
    from polecat.node.pipeline import Page
    from polecat.node.stats import CrawlStats

__all__ = ["Config", "CrawlStats", "Crawler", "Page", "PolecatError", "config_from_mapping"]

_HOMES = {
    "Config": "polecat.config",
    "config_from_mapping": "polecat.config",
    "PolecatError": "polecat.errors",
    "Crawler": "polecat.node.crawler",
    "Page": "polecat.node.pipeline",
    "CrawlStats": "polecat.node.stats",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'polecat' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
