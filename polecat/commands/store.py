"""``polecat store ls|get|verify|export|repair DIR``: inspect, check, export and repair a crawl's page
stores (opened as polecat/commands/stores.py says)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from polecat.commands.stores import (
    add_store_args,
    body_store,
    crawl_config,
    data_dirs,
    latest,
    open_stores,
    sealed_fetches,
    store_config,
)
from polecat.config import StoreConfig
from polecat.errors import ConfigError, NotFound
from polecat.frontier.refetch import request_refetch
from polecat.store import export, fsck, repair
from polecat.store.archive import archive_info
from polecat.store.index import STATE_NAMES
from polecat.store.segments import segment_name

_HEX_HASH = re.compile(r"^[0-9a-fA-F]{64}$")


def cmd_get(args: argparse.Namespace) -> int:
    """The whole WARC record: of the body (by hash) or of the URL's latest fetch."""
    with open_stores(args) as stores:
        key: str = args.key
        if _HEX_HASH.match(key):
            digest = bytes.fromhex(key)
            store = body_store(stores, digest)
            body = store.index.body(digest)
            if body is None:
                raise NotFound(f"no body with hash {key}")
            store.get(digest)  # verifies the hash
            stored_by = store.index.log_entry(body.seq)
            if stored_by is not None and stored_by.record.kind == "revisit":  # a near-duplicate's delta
                raw = store.decompress(store.read_frame(stored_by.loc))
                sys.stdout.buffer.write(export.whole_response(store, stored_by.record, raw)[1])
                sys.stdout.buffer.flush()
                return 0
            loc = body.loc
        else:
            store, entry = latest(stores, key, with_body=False)
            loc = entry.loc
        frame = store.read_frame(loc)
        sys.stdout.buffer.write(store.decompress(frame))
        sys.stdout.buffer.flush()
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    with open_stores(args) as stores:
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
    with open_stores(args) as stores:
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
    with open_stores(args) as stores:
        skipped = 0
        if args.warc is not None:
            compression = args.compress or export.compression_for(args.warc)
            with open(args.warc, "wb") as fh:  # WARC records (gzip members, zstd frames) concatenate
                out = export.WarcExport(fh, args.warc.name, compression, originals=export.Originals(stores))
                out.start(archive_info(user_agent=crawl_config(args).fetch.user_agent, request_headers=()))
                for store in stores:
                    out.add(store)
                sealed: list[str] = []
                out.add_sealed(sealed_fetches(args, stores, sealed))  # export rule 7
            for entry, why in out.result.skipped:
                print(f"skipped record {entry.seq} ({entry.record.url}): {why}", file=sys.stderr)
            for why in sealed:
                print(f"skipped: {why}", file=sys.stderr)
            skipped = len(out.result.skipped) + len(sealed)
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


def cmd_repair(args: argparse.Namespace) -> int:
    cfg = store_config(args)
    for node in data_dirs(args):  # each worker of a --workers crawl repairs its own store
        _repair(node, cfg, dry_run=args.dry_run)
    return 0


def _repair(node: Path, cfg: StoreConfig, *, dry_run: bool) -> None:
    report = repair.repair(node, cfg, lambda urls: request_refetch(node / "frontier", urls), dry_run=dry_run)
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


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``store`` group to the ``polecat`` command."""
    store = subparsers.add_parser("store", help="inspect, check and export the page store")
    sub = store.add_subparsers(dest="store_command", required=True)
    p = sub.add_parser("ls", help="list segments with state and size")
    add_store_args(p)
    p.set_defaults(func=cmd_ls)
    p = sub.add_parser("get", help="write the WARC record of a hash or of a URL's latest fetch")
    add_store_args(p)
    p.add_argument("key", metavar="HASH|URL")
    p.set_defaults(func=cmd_get)
    p = sub.add_parser("verify", help="check every index entry and hash; exit 1 on any fault")
    add_store_args(p)
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("export", help="export a WARC file (.warc.gz, .warc.zst, .warc) and CDXJ indexes")
    add_store_args(p)
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
    add_store_args(p)
    p.add_argument("--dry-run", action="store_true", help="only report what would be repaired")
    p.set_defaults(func=cmd_repair)
