"""A crawl's page stores, opened for the commands that read them (``pages``, ``cat``, ``export``, ``store``).

Each command takes the crawler's data dir; the store lives in ``DIR/store``, or in ``DIR/workers/<k>/store``
for each worker of a ``--workers`` crawl (polecat/cluster/layout.py), and every command reads all of them.
Several dirs (each node of a cluster, a dead node's dir kept aside, or a parent of node dirs) are read as
one collection (layout rule 7): a revisit in one store of a body another store holds reads that body. Two
dirs holding the same store (one store id: a copy) are read once.
They open stores read-only, so they run beside a crawl as well as after one (they see what the crawler
last flushed). ``--config FILE.toml`` supplies the ``[store]`` section (object-store URL and options) when
sealed segments live remotely; without it the URL the writer recorded is used, with credentials from the
environment. A store found in that object store whose dir is not named (a dead node's, its disk gone) is
read from its sealed segments by ``store export`` and ``pages`` (:func:`sealed_fetches`,
polecat/store/remote.py).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from polecat.cluster.layout import collection_dirs
from polecat.commands import saved_settings
from polecat.config import Config, StoreConfig, config_from_mapping, load_toml
from polecat.dedup.canon import Canonicalizer
from polecat.errors import ConfigError, NotFound, StoreError
from polecat.store.index import LogEntry
from polecat.store.segstore import SegmentStore

if TYPE_CHECKING:
    from polecat.store.remote import SealedFetch

_HEX_PREFIX = re.compile(r"^[0-9a-fA-F]{6,64}$")


@contextmanager
def open_stores(args: argparse.Namespace) -> Iterator[list[SegmentStore]]:
    """Every store of the crawls in ``args.dir`` (one or more dirs), read-only, each store once."""
    cfg = store_config(args)
    dirs = data_dirs(args)
    found = [d / "store" for d in dirs if (d / "store").exists()] or [dirs[0] / "store"]
    with ExitStack() as stack:
        stores: dict[str, SegmentStore] = {}
        for path in found:
            store = stack.enter_context(SegmentStore.open(path, cfg, read_only=True))
            if stores.setdefault(store.store_id, store) is not store:
                print(f"note: {path} is a copy of {stores[store.store_id].root} (store {store.store_id}): "
                      "read once", file=sys.stderr)
        yield list(stores.values())


def store_config(args: argparse.Namespace) -> StoreConfig:
    """The ``[store]`` section of ``--config``, or the defaults."""
    return config_from_mapping(load_toml(args.config)).store if args.config is not None else StoreConfig()


def sealed_fetches(args: argparse.Namespace, stores: list[SegmentStore], skipped: list[str]
                   ) -> Iterator[SealedFetch]:
    """The fetches of the stores in the collection's object store (``--config``'s ``[store] url``, else
    the one its stores recorded) that none of ``stores`` is: a dead node's, read from its sealed segments
    only (polecat/store/remote.py), each record once. What could not be read goes to ``skipped``."""
    cfg = store_config(args)
    url = cfg.url or next((u for s in stores if (u := s.index.remote_url())), "")
    if not url:
        return
    # obstore loads here, not with the CLI: a crawl, or a collection with no remote, never needs it.
    from polecat.store.object import make_object_store
    from polecat.store.remote import fetches, records, stores_in
    local = {s.store_id for s in stores}
    try:
        remote = make_object_store(url, cfg.options)
        found = {sid: names for sid, names in stores_in(remote).items() if sid not in local}
    except StoreError as exc:  # the indexed stores are read all the same
        print(f"warning: stores in object storage only are not read: {exc}", file=sys.stderr)
        return
    seen: set[str] = set()
    for store_id, names in found.items():
        print(f"note: store {store_id} is in object storage only (a node whose disk is gone?): its "
              f"{len(names)} sealed segments are read", file=sys.stderr)
        for name in names:
            try:
                yield from fetches(records(remote, name), seen, skipped)
            except StoreError as exc:  # the segment's records before the fault are in
                skipped.append(f"segment {name}: {exc}")


def data_dirs(args: argparse.Namespace) -> list[Path]:
    """The node data dirs of every crawl the command names (polecat/cluster/layout.py rule 7)."""
    return collection_dirs([Path(d) for d in args.dir])


def body_store(stores: list[SegmentStore], digest: bytes) -> SegmentStore:
    """The store that holds the body ``digest``."""
    for store in stores:
        if store.has(digest):
            return store
    raise NotFound(f"no body with hash {digest.hex()}")


def latest(stores: list[SegmentStore], url: str, *, with_body: bool) -> tuple[SegmentStore, LogEntry]:
    """The URL's newest log entry over every store (``with_body``: newest whose own body is stored: for a
    near-duplicate its own page, polecat/store/delta.py, in whichever store holds that body), with the
    store that holds it (``with_body``: the store that holds the body)."""
    entries = [(entry.record.fetched_at, i, entry) for i, store in enumerate(stores)
               for entry in store.index.history(url)]
    if with_body:  # a revisit's body may be in another store of the collection
        entries = [e for e in entries if any(s.has(e[2].record.own_hash) for s in stores)]
    if not entries:
        raise NotFound(f"no stored page for {url}")
    _, i, entry = max(entries, key=lambda e: (e[0], e[1]))
    if with_body:
        return body_store(stores, entry.record.own_hash), entry
    return stores[i], entry


def is_hash_prefix(key: str) -> bool:
    """Whether ``key`` reads as a content hash or a prefix of one (at least 6 hex digits)."""
    return bool(_HEX_PREFIX.match(key))


def digest_for(stores: list[SegmentStore], key: str) -> tuple[SegmentStore, bytes] | None:
    """The body a hex hash or a unique hash prefix (at least 6 digits) names, or None if not a hash."""
    if not is_hash_prefix(key):
        return None
    prefix = key.lower()
    found = [(store, d) for store in stores for d in store.index.digests_with_prefix(prefix)]
    if not found:
        raise NotFound(f"no body with a hash starting {prefix}")
    if len(found) > 1:
        raise NotFound(f"hash prefix {prefix} is ambiguous: give more digits")
    return found[0]


def canonicalizer(args: argparse.Namespace) -> Canonicalizer:
    """The crawl's canonicalizer: URLs typed by a person are keyed as the crawler keyed them."""
    dedup = crawl_config(args).dedup
    return Canonicalizer(dedup.tracking_params, dedup.keep_query_order)


def crawl_config(args: argparse.Namespace) -> Config:
    """The crawl's own settings (polecat/commands/saved_settings.py) where it saved them, else the
    defaults: the user agent for an export's warcinfo, the canonicalization rules for URLs typed to
    ``cat``."""
    try:
        return config_from_mapping(saved_settings.load(Path(args.dir[0])))
    except ConfigError:
        return Config()


def add_store_args(p: argparse.ArgumentParser) -> None:
    """The arguments every store command takes: the data dirs and the config file."""
    p.add_argument("dir", metavar="DIR", nargs="+",
                   help="the crawler's data dir (the store is DIR/store); several dirs (a cluster's nodes, "
                        "or their parent dir) are read as one collection")
    p.add_argument("--config", type=Path, default=None, metavar="FILE.toml",
                   help="config file whose [store] section names the object store")
