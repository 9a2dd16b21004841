"""``polecat pages``: rows of a crawl, filtered and written as TSV, CSV or JSON lines.

Rows come from two places. Every page fetch the store recorded (responses, revisits, redirects; not the
archived robots.txt responses) is a row with its status, time, the hash of the body it received, size
and, for a duplicate, the URL it duplicates; a store found in the crawl's object store whose dir is not
named (a dead node's) gives the rows of its sealed segments (polecat/commands/stores.py). With ``failed``,
the URLs the frontier finished without a stored page (failed after retries, blocked, refused by
robots.txt, out of budget) are rows too, with the outcome and the reason.

Formats: ``tsv`` (default) and ``csv`` start with a header line naming :data:`COLUMNS`; ``jsonl`` writes
one object a line with the same keys. Filters: ``--status`` takes ``2xx``-style classes or exact codes
(comma-separated), ``--host`` a host (``host`` or ``host:port``) or ``*.suffix`` pattern.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from itertools import chain
from typing import TextIO
from urllib.parse import urlsplit

from polecat.commands.stores import add_store_args, data_dirs, open_stores, sealed_fetches
from polecat.errors import ConfigError
from polecat.frontier.records import PAGE_OUTCOMES, UrlRecord
from polecat.frontier.status import read_outcomes
from polecat.hosts import HostPatternMap, host_key
from polecat.store.base import SKIPPED_HEADER, FetchRecord

COLUMNS = ("url", "status", "fetched_at", "hash", "size", "duplicate_of", "outcome", "reason")
FORMATS = ("tsv", "csv", "jsonl")


@dataclass(frozen=True, slots=True)
class Row:
    url: str
    status: int | None
    fetched_at: str
    hash: str
    size: int | None
    duplicate_of: str
    outcome: str
    """``fetched``, ``revisit``, ``redirect``, or for a URL without a stored page ``failed`` or
    ``skipped``."""
    reason: str
    """Why a URL was not fetched or stored (error kind, ``robots``, ``blocked``), else empty."""


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def is_robots(url: str) -> bool:
    """robots.txt responses are archived with the pages but are not pages: listings leave them out."""
    return urlsplit(url).path == "/robots.txt"


def _skip_reason(record: FetchRecord) -> str:
    return next((v for k, v in record.headers if k == SKIPPED_HEADER), "")


def row_of_fetch(r: FetchRecord) -> Row:
    outcome = "revisit" if r.kind == "revisit" else ("redirect" if 300 <= r.status < 400 else "fetched")
    return Row(r.url, r.status, iso(r.fetched_at), r.own_hash.hex(), r.size, r.duplicate_of or "",
               outcome, _skip_reason(r))


def row_of_outcome(r: UrlRecord) -> Row:
    status = int(r.reason) if r.reason.isdigit() else None
    return Row(r.url, status, iso(r.fetched_at) if r.fetched_at else "", r.content_hash, None, "",
               r.outcome, r.reason)


def not_stored(records: Iterable[UrlRecord]) -> Iterator[Row]:
    """Rows of URLs the frontier finished without a stored page."""
    for r in records:
        if r.outcome not in PAGE_OUTCOMES:
            yield row_of_outcome(r)


def status_filter(spec: str) -> frozenset[int]:
    """``2xx,404`` -> the set of statuses it names; raises ConfigError naming ``--status``."""
    codes: set[int] = set()
    for part in (p.strip().lower() for p in spec.split(",") if p.strip()):
        if len(part) == 3 and part[0] in "12345" and part[1:] == "xx":
            base = int(part[0]) * 100
            codes.update(range(base, base + 100))
        elif part.isdigit() and 100 <= int(part) <= 599:
            codes.add(int(part))
        else:
            raise ConfigError(f"--status: expected classes like 2xx or codes like 404, got {part!r}")
    return frozenset(codes)


def select(rows: Iterable[Row], *, statuses: frozenset[int] | None, host: str | None) -> Iterator[Row]:
    """The rows with one of ``statuses`` whose host matches the pattern ``host`` (polecat/hosts.py: with
    a port, as the summary names a host, or without, for any port)."""
    hosts = HostPatternMap([(host, True)]) if host is not None else None
    for row in rows:
        if statuses is not None and row.status not in statuses:
            continue
        if hosts is not None and host_key(row.url) not in hosts:
            continue
        yield row


def write(rows: Iterable[Row], out: TextIO, fmt: str) -> int:
    """Write ``rows`` in ``fmt`` (see the module docstring); returns how many."""
    count = 0
    if fmt == "jsonl":
        for row in rows:
            out.write(json.dumps(asdict(row), ensure_ascii=False) + "\n")
            count += 1
        return count
    writer = csv.writer(out, delimiter="\t" if fmt == "tsv" else ",", lineterminator="\n",
                        quoting=csv.QUOTE_MINIMAL)
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(["" if v is None else v for v in (getattr(row, c) for c in COLUMNS)])
        count += 1
    return count


def cmd_pages(args: argparse.Namespace) -> int:
    statuses = status_filter(args.status) if args.status else None
    with open_stores(args) as stores:
        skipped: list[str] = []
        fetched = chain((r for store in stores for r in store.records()),
                        (f.record for f in sealed_fetches(args, stores, skipped)))  # a dead node's
        rows: Iterator[Row] = (row_of_fetch(r) for r in fetched if not is_robots(r.url))
        if args.failed:  # URLs without a stored page: failed, blocked, refused by robots.txt...
            rows = (row for node in data_dirs(args) if (node / "frontier" / "data.mdb").exists()
                    for row in not_stored(read_outcomes(node / "frontier")))
        write(select(rows, statuses=statuses, host=args.host), sys.stdout, args.format)
        for why in skipped:
            print(f"skipped: {why}", file=sys.stderr)
    return 1 if skipped else 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pages`` to the ``polecat`` command."""
    p = subparsers.add_parser("pages", help="list every fetch: URL, status, time, hash, size, duplicate-of")
    add_store_args(p)
    p.add_argument("--format", choices=FORMATS, default="tsv", help="tsv (default), csv or jsonl")
    p.add_argument("--status", metavar="2xx,404", help="only these status classes or codes")
    p.add_argument("--host", metavar="HOST[:PORT]|*.SUFFIX", help="only URLs of this host (pattern)")
    p.add_argument("--failed", action="store_true",
                   help="list the URLs without a stored page instead (failed, blocked, robots), with why")
    p.set_defaults(func=cmd_pages)
