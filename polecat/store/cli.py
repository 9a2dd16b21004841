"""Commands that read a crawl's page store: ``pages``, ``cat`` and the ``store`` group.

Each takes the crawler's data dir; the store lives in ``DIR/store``, or in ``DIR/workers/<k>/store`` for
each worker of a ``--workers`` crawl (polecat/cluster/layout.py), and every command reads all of them.
They open stores read-only, so they run beside a crawl as well as after one (they see what the crawler
last flushed). ``--config FILE.toml``
supplies the ``[store]`` section (object-store URL and options) when sealed segments live remotely;
without it the URL the writer recorded is used, with credentials from the environment.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from polecat.cluster.layout import node_dirs
from polecat.config import Config, StoreConfig, config_from_mapping, load_toml
from polecat.dedup.canon import Canonicalizer
from polecat.errors import ConfigError, NotFound
from polecat.frontier.status import read_outcomes
from polecat.store import export, fsck, listing, repair
from polecat.store.archive import archive_info
from polecat.store.base import FetchRecord
from polecat.store.feed import Feed
from polecat.store.index import STATE_NAMES, LogEntry
from polecat.store.segments import segment_name
from polecat.store.segstore import SegmentStore

_HEX_HASH = re.compile(r"^[0-9a-fA-F]{64}$")
_HEX_PREFIX = re.compile(r"^[0-9a-fA-F]{6,64}$")


@contextmanager
def _open(args: argparse.Namespace) -> Iterator[list[SegmentStore]]:
    """Every store of the crawl in ``args.dir``, read-only."""
    cfg = StoreConfig()
    if args.config is not None:
        cfg = config_from_mapping(load_toml(args.config)).store
    dirs = node_dirs(Path(args.dir))
    found = [d / "store" for d in dirs if (d / "store").exists()] or [dirs[0] / "store"]
    with ExitStack() as stack:
        yield [stack.enter_context(SegmentStore.open(path, cfg, read_only=True)) for path in found]


def _body_store(stores: list[SegmentStore], digest: bytes) -> SegmentStore:
    for store in stores:
        if store.has(digest):
            return store
    raise NotFound(f"no body with hash {digest.hex()}")


def _latest(stores: list[SegmentStore], url: str, *, with_body: bool) -> tuple[SegmentStore, LogEntry]:
    """The URL's newest log entry over every store (``with_body``: newest whose body is stored), with the
    store that holds it."""
    entries = [(entry.record.fetched_at, i, entry) for i, store in enumerate(stores)
               for entry in store.index.history(url)
               if not with_body or store.has(entry.record.content_hash)]
    if not entries:
        raise NotFound(f"no stored page for {url}")
    _, i, entry = max(entries, key=lambda e: (e[0], e[1]))
    return stores[i], entry


def cmd_pages(args: argparse.Namespace) -> int:
    statuses = listing.status_filter(args.status) if args.status else None
    with _open(args) as stores:
        rows: Iterator[listing.Row] = (listing.row_of_fetch(r) for store in stores for r in store.records()
                                       if not listing.is_robots(r.url))
        if args.failed:  # URLs without a stored page: failed, blocked, refused by robots.txt...
            rows = (row for node in node_dirs(Path(args.dir)) if (node / "frontier" / "data.mdb").exists()
                    for row in listing.not_stored(read_outcomes(node / "frontier")))
        listing.write(listing.select(rows, statuses=statuses, host=args.host), sys.stdout, args.format)
    return 0


def _digest_for(stores: list[SegmentStore], key: str) -> tuple[SegmentStore, bytes] | None:
    """The body a hex hash or a unique hash prefix (at least 6 digits) names, or None if not a hash."""
    if not _HEX_PREFIX.match(key):
        return None
    prefix = key.lower()
    found = [(store, d) for store in stores for d in store.index.digests_with_prefix(prefix)]
    if not found:
        raise NotFound(f"no body with a hash starting {prefix}")
    if len(found) > 1:
        raise NotFound(f"hash prefix {prefix} is ambiguous: give more digits")
    return found[0]


def _canonicalizer(args: argparse.Namespace) -> Canonicalizer:
    """The crawl's canonicalizer: URLs typed by a person are keyed as the crawler keyed them."""
    dedup = _crawl_config(args).dedup
    return Canonicalizer(dedup.tracking_params, dedup.keep_query_order)


def cmd_cat(args: argparse.Namespace) -> int:
    with _open(args) as stores:
        key: str = args.key
        found = _digest_for(stores, key)
        if found is not None:
            store, digest = found
        else:
            url = _canonicalizer(args).canonicalize(key.strip())
            if url is None:
                raise NotFound(f"{key!r} is neither an http(s) URL nor a content hash (or a prefix of "
                               "at least 6 hex digits)")
            store, entry = _latest(stores, url, with_body=True)
            digest = entry.record.content_hash
        sys.stdout.buffer.write(store.get(digest))
        sys.stdout.buffer.flush()
    return 0


def cmd_export_feed(args: argparse.Namespace) -> int:
    """``polecat export DIR --jsonl FILE|-``: polecat/store/feed.py."""
    with _open(args) as stores:
        def latest(url: str) -> FetchRecord | None:
            try:
                return _latest(stores, url, with_body=False)[1].record
            except NotFound:
                return None

        def body(record: FetchRecord) -> bytes:
            return _body_store(stores, record.content_hash).get(record.content_hash)

        records = (r for store in stores for r in store.records() if not listing.is_robots(r.url))
        feed = Feed(latest, body, _canonicalizer(args))
        if str(args.jsonl) == "-":
            n = feed.write(records, sys.stdout)
            sys.stdout.flush()
        else:
            with open(args.jsonl, "w", encoding="utf-8") as out:
                n = feed.write(records, out)
        print(f"{n} pages written to {args.jsonl}", file=sys.stderr)
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    """The whole WARC record: of the body (by hash) or of the URL's latest fetch."""
    with _open(args) as stores:
        key: str = args.key
        if _HEX_HASH.match(key):
            store = _body_store(stores, bytes.fromhex(key))
            body = store.index.body(bytes.fromhex(key))
            if body is None:
                raise NotFound(f"no body with hash {key}")
            store.get(bytes.fromhex(key))  # verifies the hash
            loc = body.loc
        else:
            store, entry = _latest(stores, key, with_body=False)
            loc = entry.loc
        frame = store.read_frame(loc)
        sys.stdout.buffer.write(store.decompress(frame))
        sys.stdout.buffer.flush()
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    with _open(args) as stores:
        for store in stores:
            for seg, info in sorted(store.segment_states().items()):
                print(f"{segment_name(store.store_id, seg)}\t{STATE_NAMES[info.state]}\t{info.length}")
            s = store.stats()
            ratio = s.raw_bytes / s.stored_bytes if s.stored_bytes else 0.0
            where = f" in {store.root}" if len(stores) > 1 else ""
            print(f"# {s.records} records, {s.bodies} bodies, {s.revisits} revisits, {s.segments} segments "
                  f"({s.remote_segments} remote), {s.raw_bytes} body bytes in {s.stored_bytes} "
                  f"stored bytes (x{ratio:.2f}){where}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    with _open(args) as stores:
        reports = [fsck.verify(store) for store in stores]
    faults = records = bodies = 0
    for report in reports:
        for note in report.notes:
            print(f"note: {note}")
        for fault in report.faults:
            print(f"FAULT: {fault}")
        faults += len(report.faults)
        records += report.records
        bodies += report.bodies
    verdict = "OK" if not faults else f"{faults} FAULTS"
    print(f"{verdict}: {records} records, {bodies} bodies checked")
    return 0 if not faults else 1


def cmd_export(args: argparse.Namespace) -> int:
    if args.cdxj is not None and args.warc is None:
        raise ConfigError("--cdxj indexes the exported WARC file: give --warc FILE too "
                          "(--cdxj-segments FILE indexes the live segments)")
    if args.warc is None and args.cdxj_segments is None:
        raise ConfigError("store export: give --warc FILE (with --cdxj FILE for its index) "
                          "and/or --cdxj-segments FILE")
    with _open(args) as stores:
        skipped = 0
        if args.warc is not None:
            compression = args.compress or export.compression_for(args.warc)
            with open(args.warc, "wb") as fh:  # WARC records (gzip members, zstd frames) concatenate
                out = export.WarcExport(fh, args.warc.name, compression)
                out.start(archive_info(user_agent=_crawl_config(args).fetch.user_agent, request_headers=()))
                for store in stores:
                    out.add(store)
            for entry, why in out.result.skipped:
                print(f"skipped record {entry.seq} ({entry.record.url}): {why}", file=sys.stderr)
            skipped = len(out.result.skipped)
            print(f"{out.result.written} records written to {args.warc} ({compression})"
                  + (f", {skipped} corrupt records skipped (run `polecat store repair`)" if skipped else ""),
                  file=sys.stderr)
            if args.cdxj is not None:
                _write_lines(args.cdxj, sorted(out.result.index))
        if args.cdxj_segments is not None:
            _write_lines(args.cdxj_segments, sorted(line for s in stores for line in export.cdxj_lines(s)))
    return 1 if skipped else 0


def _write_lines(path: Path, lines: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(line + "\n" for line in lines)
    print(f"{len(lines)} index lines written to {path}", file=sys.stderr)


def _crawl_config(args: argparse.Namespace) -> Config:
    """The crawl's own settings (polecat/settings.py) where it saved them, else the defaults: the user
    agent for an export's warcinfo, the canonicalization rules for URLs typed to ``cat``."""
    from polecat import settings

    try:
        return config_from_mapping(settings.load(Path(args.dir)))
    except ConfigError:
        return Config()


def cmd_repair(args: argparse.Namespace) -> int:
    cfg = StoreConfig()
    if args.config is not None:
        cfg = config_from_mapping(load_toml(args.config)).store
    for node in node_dirs(Path(args.dir)):  # each worker of a --workers crawl repairs its own store
        _repair(node, cfg, dry_run=args.dry_run)
    return 0


def _repair(node: Path, cfg: StoreConfig, *, dry_run: bool) -> None:
    report = repair.repair(node, cfg, dry_run=dry_run)
    for entry, why in report.dropped:
        print(f"dropped record {entry.seq} ({entry.record.url}): {why}")
    for seg, before, after in report.cut:
        print(f"segment {seg}: committed length {before} -> {after}")
    for url in report.refetch:
        print(f"refetch {url}")
    if report.clean:
        print(f"OK: {report.records} records intact, nothing to repair")
    elif dry_run:
        print(f"would drop {len(report.dropped)} of {report.records} records "
              f"({report.bodies_dropped} bodies) and queue {len(report.refetch)} URLs again "
              "(dry run: nothing changed)")
    else:
        queued = (f"{report.requested} URLs queued again for the next crawl" if report.requested
                  else f"{len(report.refetch)} URLs to fetch again (no frontier in {node})")
        print(f"repaired: kept {report.records - len(report.dropped)} of {report.records} records, "
              f"dropped {len(report.dropped)} ({report.bodies_dropped} bodies); {queued}")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="the crawler's data dir (the store is DIR/store)")
    p.add_argument("--config", type=Path, default=None, metavar="FILE.toml",
                   help="config file whose [store] section names the object store")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pages``, ``cat`` and ``store ...`` to the ``polecat`` command."""
    p = subparsers.add_parser("pages", help="list every fetch: URL, status, time, hash, size, duplicate-of")
    _common(p)
    p.add_argument("--format", choices=listing.FORMATS, default="tsv", help="tsv (default), csv or jsonl")
    p.add_argument("--status", metavar="2xx,404", help="only these status classes or codes")
    p.add_argument("--host", metavar="HOST|*.SUFFIX", help="only URLs of this host (pattern)")
    p.add_argument("--failed", action="store_true",
                   help="list the URLs without a stored page instead (failed, blocked, robots), with why")
    p.set_defaults(func=cmd_pages)
    p = subparsers.add_parser("cat", help="write a stored page body to stdout")
    _common(p)
    p.add_argument("key", metavar="URL-or-HASH", help="a URL as typed, or a content hash or unique prefix")
    p.set_defaults(func=cmd_cat)
    p = subparsers.add_parser("export", help="one JSON line per fetched page (url, status, title, text...)")
    _common(p)
    p.add_argument("--jsonl", type=Path, required=True, metavar="FILE|-", help="output file, - for stdout")
    p.set_defaults(func=cmd_export_feed)

    store = subparsers.add_parser("store", help="inspect, check and export the page store")
    sub = store.add_subparsers(dest="store_command", required=True)
    p = sub.add_parser("ls", help="list segments with state and size")
    _common(p)
    p.set_defaults(func=cmd_ls)
    p = sub.add_parser("get", help="write the WARC record of a hash or of a URL's latest fetch")
    _common(p)
    p.add_argument("key", metavar="HASH|URL")
    p.set_defaults(func=cmd_get)
    p = sub.add_parser("verify", help="check every index entry and hash; exit 1 on any fault")
    _common(p)
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("export", help="export a WARC file (.warc.gz, .warc.zst, .warc) and CDXJ indexes")
    _common(p)
    p.add_argument("--warc", type=Path, default=None, metavar="FILE",
                   help="WARC file to write; its name picks the compression unless --compress")
    p.add_argument("--compress", choices=export.COMPRESSIONS, default=None,
                   help="gzip: one member per record (.warc.gz); zstd: the stored frames; none")
    p.add_argument("--cdxj", type=Path, default=None, metavar="FILE",
                   help="CDXJ index of the exported WARC file (offsets into it)")
    p.add_argument("--cdxj-segments", type=Path, default=None, metavar="FILE",
                   help="CDXJ index of the live segments (offsets into DIR/store/segments)")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("repair", help="drop damaged records, cut torn segments, queue lost URLs again")
    _common(p)
    p.add_argument("--dry-run", action="store_true", help="only report what would be repaired")
    p.set_defaults(func=cmd_repair)
