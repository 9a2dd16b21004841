"""The refresh indexes: which finished URLs are due when, and the freshness counters, kept with every write
of a URL record so that neither the refresh scan nor the freshness figures read every finished URL.

Three tables (key layouts in polecat/frontier/keys.py rule 7), and counters kept in ``meta``:

Rules:
1. Every URL record with a history (refresh rule 1) has one ``refresh`` row, keyed by its host then its
   fingerprint, holding what the scan needs of it without reading the record: its believed change rate
   and importance (its host's budget plan, refresh rule 3), its due time and its freshness boundary.
2. Its due time is the one the scan compares with ``now``: the stored due time, recomputed with the
   settings of this run for a history that keeps its prior (refresh rules 4-6, without the host's
   next-allowed time, as the full scan did); a record with no due time (queued again, or never
   refreshed) has none. A URL with a due time has one ``due`` row at that time, so the scan reads the
   due rows only, in time order, and then its hosts' ``refresh`` rows for their budget plans.
3. Its freshness boundary is ``last_visit + interval`` (refresh rule 9): tracked (an interval exists),
   due from the boundary on, within its window up to it. ``tracked``, ``important`` (and ``revisited``,
   histories with an observed interval) are counted as rows change. A time cursor ``t``: the rows whose
   boundary is before it are counted in ``passed`` (and ``passed_important``); the others have one
   ``fresh`` row at their boundary. The figures at ``now`` >= ``t`` move the cursor to ``now``, counting
   the ``fresh`` rows it passes (read in time order from the cursor: their deletes are written with the
   next commit); a ``now`` before the cursor (the clock stepped back) is answered by a full recount.
   A refresh scan walks them in steps (:meth:`RefreshIndex.freshness_step`): a step moves the cursor to
   the boundary it stopped at, never between two rows of one boundary.
4. Every write of a URL record goes through :meth:`RefreshIndex.update` (completions, requeues, blocks,
   adoption, refetch requests); a release of slices removes the rows of its URLs (:meth:`release_rows`,
   a bounded number a step: polecat/frontier/handover.py rule 7), read by their slices' ``refresh``
   ranges. Rows written in the open decision are read from memory
   (writes.py rule 3) until the next commit.
5. The counters are written to ``meta`` (:data:`INDEX_KEY`) at every commit, with the settings they were
   computed under; an open whose settings differ, or of data written before the index (0.3.0), builds
   the index again from the ``urls`` table (one full pass, the only one).
6. That build reads ``urls`` a slice at a time and hands its writes over only between two slices, no
   read of the table open: so whoever applies them may make an LMDB commit between two batches (the
   open does once they are many, polecat/frontier/db.py rule 16), which ends the transaction a read
   would have gone on in. A build cut by a kill -9 between such commits left the settings unmarked (the
   mark is its last write): the next open builds it again from the start.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from collections.abc import Iterable, Iterator
from dataclasses import astuple, dataclass
from itertools import islice

from polecat.config import RefreshConfig
from polecat.frontier.keys import due_key, fresh_key, refresh_prefix, refresh_row, url_key_of_refresh_row
from polecat.frontier.records import UrlRecord
from polecat.frontier.refresh import Freshness, History, RefreshPolicy
from polecat.frontier.slices import SLICES, slice_prefix
from polecat.frontier.tables import FrontierTables, TableReader
from polecat.hosts import host_key
from polecat.writes import Delete, Put, Write

INDEX_KEY = b"refresh_index"
"""Meta key of the counters and the settings they were computed under (rule 5)."""

_ROW = struct.Struct(">ddddB")
_TIME = struct.Struct(">d")
REBUILD_BATCH = 100_000
"""Writes per batch of a rebuild (rule 5)."""
NONE = -1.0
"""A due time or boundary that is not there (times are >= 0)."""


@dataclass(frozen=True, slots=True)
class RefreshRow:
    """One URL's ``refresh`` row (rule 1)."""

    rate: float
    weight: float
    due: float
    """The scan's due time (rule 2); :data:`NONE`: not due."""
    boundary: float
    """Its freshness boundary (rule 3); :data:`NONE`: not tracked."""
    important: bool
    revisited: bool

    def encode(self) -> bytes:
        return _ROW.pack(self.rate, self.weight, self.due, self.boundary,
                         self.important | (self.revisited << 1))

    @classmethod
    def decode(cls, raw: bytes) -> RefreshRow:
        rate, weight, due, boundary, flags = _ROW.unpack(raw)
        return cls(rate, weight, due, boundary, bool(flags & 1), bool(flags & 2))


def settings_mark(cfg: RefreshConfig) -> str:
    """The settings a row's values depend on (rule 5), as a short digest."""
    used = (cfg.min_interval, cfg.max_interval, cfg.k, cfg.default_interval, cfg.min_visits,
            cfg.overrides, cfg.never, cfg.important, cfg.important_min)
    return hashlib.sha256(repr(used).encode()).hexdigest()[:16]


@dataclass(slots=True)
class FreshCounts:
    """The counters of rule 3."""

    tracked: int = 0
    important: int = 0
    revisited: int = 0
    passed: int = 0
    passed_important: int = 0
    cursor: float = 0.0

    def add(self, row: RefreshRow, sign: int) -> None:
        self.revisited += sign * row.revisited
        if row.boundary == NONE:
            return
        self.tracked += sign
        self.important += sign * row.important
        if row.boundary < self.cursor:
            self.passed += sign
            self.passed_important += sign * row.important


def row_of(policy: RefreshPolicy, host: str, rec: UrlRecord) -> RefreshRow | None:
    """The ``refresh`` row of ``rec`` (rules 1-3); None when it has no history."""
    if not rec.history:
        return None
    h = History.from_hex(rec.history)
    due = rec.due
    if due is not None and h.prior_rate >= 0.0:
        # Recomputed with today's settings (an operator's new --refresh-min applies to schedules made
        # before); a 0.2 history keeps its stored time, whose sitemap prior is not in it.
        due = policy.due_at(host, h, None, 0.0) or due
    boundary = policy.boundary(host, h)
    return RefreshRow(policy.rate(h, None, h.last_visit), rec.importance, NONE if due is None else due,
                      NONE if boundary is None else boundary, policy.is_important(rec.url, rec.importance),
                      h.n > 0)


class RefreshIndex:
    """The indexes and counters of the module docstring over one frontier's tables."""

    def __init__(self, db: FrontierTables, policy: RefreshPolicy) -> None:
        self._db = db
        self._policy = policy
        self._mark = settings_mark(policy.config)
        self._recent: dict[bytes, bytes | None] = {}
        """``refresh`` rows written since the last commit, by key (rule 4; None: deleted)."""
        self._passed: list[bytes] = []
        """``fresh`` rows the cursor passed since the last commit: their deletes go with it (rule 3)."""
        self.reads = 0
        """Rows read by the scan, the figures and releases (an operation count for tests and benchmarks)."""
        stored = db.get("meta", INDEX_KEY)
        info = json.loads(stored) if stored is not None else {}
        self.counts = FreshCounts(*(info.get(f, 0) for f in ("tracked", "important", "revisited", "passed",
                                                             "passed_important", "cursor")))
        self.stale = info.get("settings") != self._mark
        """The stored index was not made as this run would make it, or not at all (rule 5): the open
        builds it again (:meth:`rebuild`)."""

    def rebuild(self, now: float) -> Iterator[list[Write]]:
        """The index built again from the ``urls`` table (rule 5), in batches of at most
        :data:`REBUILD_BATCH` writes: each must be applied before the next is asked for (the next reads
        what it deleted), so a data dir of any size is rebuilt in bounded memory."""
        db = self._db
        for table in ("refresh", "due", "fresh"):
            while doomed := [key for key, _ in islice(db.items(table), REBUILD_BATCH)]:
                yield [Delete(table, key) for key in doomed]
        self.counts = counts = FreshCounts(cursor=now)
        self._recent.clear()
        out: list[Write] = []
        for slice_id in range(SLICES):  # a slice's pass ends before a batch is yielded (rule 6)
            for key, raw in db.items("urls", slice_prefix(slice_id)):
                rec = UrlRecord.decode(raw)
                host = host_key(rec.url)
                row = row_of(self._policy, host, rec)
                if row is not None:
                    self._put(host, key, row, out)
                    counts.add(row, 1)
            if len(out) >= REBUILD_BATCH:
                yield out
                out = []
        out.append(self.counter_write())
        self.stale = False
        yield out

    def update(self, host: str, ukey: bytes, rec: UrlRecord | None, out: list[Write]) -> None:
        """Keep the rows of the URL ``ukey`` of ``host`` with its record ``rec`` (None: deleted), the
        writes to ``out`` (rule 4): only the rows whose key or value changes are written."""
        key = refresh_row(host, ukey)
        raw = self._recent[key] if key in self._recent else self._db.get("refresh", key)
        old = RefreshRow.decode(raw) if raw is not None else None
        new = row_of(self._policy, host, rec) if rec is not None else None
        if old == new:
            return
        counts = self.counts
        cursor = counts.cursor
        if old is not None:
            counts.add(old, -1)
        if new is None:
            out.append(Delete("refresh", key))
            self._recent[key] = None
        else:
            value = self._recent[key] = new.encode()
            out.append(Put("refresh", key, value))
            counts.add(new, 1)
        old_due = NONE if old is None else old.due
        new_due = NONE if new is None else new.due
        if old_due != new_due:
            if old_due != NONE:
                out.append(Delete("due", due_key(old_due, ukey)))
            if new_due != NONE:
                out.append(Put("due", due_key(new_due, ukey), b""))
        old_fresh = None if old is None or old.boundary < cursor else (old.boundary, old.important)
        new_fresh = None if new is None or new.boundary < cursor else (new.boundary, new.important)
        if old_fresh != new_fresh:
            if old_fresh is not None and (new_fresh is None or new_fresh[0] != old_fresh[0]):
                out.append(Delete("fresh", fresh_key(old_fresh[0], ukey)))
            if new_fresh is not None:
                out.append(Put("fresh", fresh_key(new_fresh[0], ukey), b"\x01" if new_fresh[1] else b""))

    def _put(self, host: str, ukey: bytes, row: RefreshRow, out: list[Write]) -> None:
        """The rows of a URL that had none (a rebuild, rule 5: applied batch by batch, not kept)."""
        out.append(Put("refresh", refresh_row(host, ukey), row.encode()))
        if row.due != NONE:
            out.append(Put("due", due_key(row.due, ukey), b""))
        if row.boundary >= self.counts.cursor:
            out.append(Put("fresh", fresh_key(row.boundary, ukey), b"\x01" if row.important else b""))

    def due(self, now: float, after: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """The ``due`` rows at ``now`` after the row ``after`` (b"": from the first), earliest first, as
        ``(row key, URL key)`` (rule 2)."""
        rows = self._db.items_after("due", after) if after else self._db.items("due")
        for key, _ in rows:
            self.reads += 1
            if _TIME.unpack_from(key)[0] > now:
                return
            yield key, key[_TIME.size :]

    def host_rows(self, host: str, after: bytes = b"") -> Iterator[tuple[bytes, bytes, RefreshRow]]:
        """The ``refresh`` rows of ``host`` after the row ``after`` (b"": from the first), in key order, as
        ``(row key, URL key, row)`` (its budget plan, rule 1)."""
        prefix = refresh_prefix(host)
        rows = self._db.items_after("refresh", after) if after else self._db.items("refresh", prefix)
        for key, raw in rows:
            if not key.startswith(prefix):
                return
            self.reads += 1
            yield key, url_key_of_refresh_row(key), RefreshRow.decode(raw)

    def freshness(self, now: float) -> Freshness:
        """The freshness SLO at ``now`` (rule 3)."""
        fresh = self.freshness_step(now, sys.maxsize)
        assert fresh is not None, "a walk without a bound reaches now"
        return fresh

    def freshness_step(self, now: float, budget: int) -> Freshness | None:
        """Rule 3 in a step of about ``budget`` ``fresh`` rows past the cursor (a refresh scan's last part,
        polecat/frontier/refresh_queue.py rule 1): the figures at ``now``, or None when the cursor is not
        there yet (the next step goes on from where this one stopped)."""
        counts = self.counts
        if now < counts.cursor:
            return self.recount(now)
        # From the cursor on: the rows before it are passed, their deletes waiting for the next commit.
        walk = _Walk(self._db.items_after("fresh", _TIME.pack(counts.cursor)), counts.cursor, now, budget)
        self.reads += walk.reads
        self._passed += walk.passed_keys
        counts.passed += len(walk.passed_keys)
        counts.passed_important += walk.passed_important
        counts.cursor = walk.until
        if walk.stopped:
            return None
        return Freshness(counts.tracked, counts.passed + walk.at, counts.important,
                         counts.important - counts.passed_important)

    def recount(self, now: float) -> Freshness:
        """The freshness SLO at ``now`` from every URL record (the clock stepped back, rule 3)."""
        count = Freshness()
        for _, raw in self._db.items("urls"):
            self.reads += 1
            rec = UrlRecord.decode(raw)
            h = History.from_hex(rec.history)
            self._policy.tally(count, host_key(rec.url), rec.url, h, rec.importance, now)
        return count

    def release_rows(self, s: int, budget: int, out: list[Write]) -> int:
        """Remove the rows of the URLs of slice ``s`` (a release, rule 4: its ``refresh`` range, and their
        ``due`` and ``fresh`` rows), at most ``budget`` of them (at least 3: a URL's rows go together);
        returns how many deletes went to ``out``. The next call goes on once they are applied."""
        self._recent.clear()  # what it says of this slice is about to be deleted; of others, applied
        n = 0
        for key, raw in self._db.items("refresh", slice_prefix(s)):
            if n + 3 > budget:
                break
            self.reads += 1
            row = RefreshRow.decode(raw)
            ukey = url_key_of_refresh_row(key)
            self.counts.add(row, -1)
            out.append(Delete("refresh", key))
            n += 1
            if row.due != NONE:
                out.append(Delete("due", due_key(row.due, ukey)))
                n += 1
            if row.boundary >= self.counts.cursor:
                out.append(Delete("fresh", fresh_key(row.boundary, ukey)))
                n += 1
        return n

    def counter_write(self) -> Write:
        c = self.counts
        return Put("meta", INDEX_KEY, json.dumps({"settings": self._mark, **dict(zip(
            ("tracked", "important", "revisited", "passed", "passed_important", "cursor"), astuple(c),
            strict=True))}).encode())

    def commit_writes(self) -> list[Write]:
        """The counters and the deletes of the ``fresh`` rows passed, for the next commit (rules 3, 5)."""
        out: list[Write] = [Delete("fresh", key) for key in self._passed]
        self._passed.clear()
        self._recent.clear()
        out.append(self.counter_write())
        return out


class _Walk:
    """The ``fresh`` rows from ``cursor`` up to ``now`` (rule 3), read in time order from ``rows`` (rows
    before ``cursor`` are passed already, their deletes waiting for a commit). Past ``budget`` rows from
    the cursor on it stops at the next boundary (``stopped``, ``until`` that boundary): never between two
    rows of one boundary, which the next walk from ``until`` would count again."""

    def __init__(self, rows: Iterable[tuple[bytes, bytes]], cursor: float, now: float,
                 budget: int = sys.maxsize) -> None:
        self.passed_keys: list[bytes] = []
        self.passed_important = self.at = self.reads = 0
        self.until, self.stopped = now, False
        walked, last = 0, cursor
        for key, raw in rows:
            self.reads += 1
            boundary = _TIME.unpack_from(key)[0]
            if boundary < cursor:
                continue
            if boundary > now:
                break
            if walked >= budget and boundary != last:
                self.until, self.stopped = boundary, True
                break
            walked += 1
            last = boundary
            if boundary == now:
                self.at += 1  # due (now >= boundary) and still within its window (now <= boundary)
                continue
            self.passed_keys.append(key)
            self.passed_important += bool(raw)


def stored_freshness(tables: TableReader, cfg: RefreshConfig, now: float) -> tuple[Freshness, int] | None:
    """The freshness SLO at ``now`` and the URLs revisited, from the counters and ``fresh`` rows of the
    last commit (rule 3), for a reader of a data dir (``polecat status``); None when they were not
    made under ``cfg`` (or not made: the index is built by a frontier's open) or ``now`` is before
    their cursor: the caller counts from the URL records."""
    stored = tables.get("meta", INDEX_KEY)
    info = json.loads(stored) if stored is not None else {}
    if info.get("settings") != settings_mark(cfg) or now < info["cursor"]:
        return None
    walk = _Walk(tables.items("fresh"), info["cursor"], now)
    passed, important = info["passed"] + len(walk.passed_keys), info["important"]
    return (Freshness(info["tracked"], passed + walk.at, important,
                      important - info["passed_important"] - walk.passed_important), info["revisited"])
