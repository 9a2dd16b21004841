"""polecat: a polite, fast, crash-safe asyncio web crawler with an embedded LMDB frontier.

Public API: :class:`Crawler` (one node), :class:`Config` and :func:`config_from_mapping` (the one
validated configuration), :class:`Page` (what callbacks receive), :class:`CrawlStats` (metrics) and the
:class:`PolecatError` exception root. Everything else is implementation.
"""

from polecat.config import Config, config_from_mapping
from polecat.errors import PolecatError
from polecat.node import Crawler
from polecat.pipeline import Page
from polecat.stats import CrawlStats

__all__ = ["Config", "CrawlStats", "Crawler", "Page", "PolecatError", "config_from_mapping"]
__version__ = "0.1.0"
