"""polecat.store: content-addressed page storage in WARC/zstd segments with an LMDB index."""

from polecat.store.base import FetchRecord, PageStore, StoreStats, content_hash
from polecat.store.segstore import open_store

__all__ = ["FetchRecord", "PageStore", "StoreStats", "content_hash", "open_store"]
