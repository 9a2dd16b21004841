"""polecat: a polite, fast, crash-safe asyncio web crawler with an embedded LMDB frontier."""

from polecat.config import Config, config_from_mapping
from polecat.errors import PolecatError

__all__ = ["Config", "PolecatError", "config_from_mapping"]
__version__ = "0.1.0"
