"""In-memory doubles of the node's I/O seams, for unit tests without sockets or disks.

- :class:`FakeClock`: a :class:`polecat.clock.Clock` that moves only when told (or by a fixed tick per
  reading, so code that reads the time in a loop still sees it advance).
- :class:`MemoryPageStore`: a :class:`polecat.store.base.PageStore` in dicts.
- :class:`FakeFetcher`: answers ``fetch``/``fetch_robots`` from canned responses and records the calls.
- :class:`MemoryFrontierDB`: the frontier's tables (:class:`polecat.frontier.tables.FrontierTables`) in
  sorted dicts, so frontier decisions run without LMDB.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import TypeVar, get_args

from polecat.errors import FetchError, NotFound, RequestWithheld
from polecat.fetch.dns import DnsStats
from polecat.fetch.http import RedirectPacer, Response, StreamChoice
from polecat.fetch.pool import SendGate, TlsStats
from polecat.frontier.handover_ranges import SLICED_TABLES, WrittenSlices
from polecat.frontier.read_ahead import Head
from polecat.frontier.slices import PREFIX_LEN, slice_prefix
from polecat.frontier.tables import Lookup
from polecat.store.base import HASH_NAME, FetchRecord, StoreStats
from polecat.writes import Decided, Delete, DeleteSlices, Put, Table, Write, expand

T = TypeVar("T")


class FakeClock:
    """A clock under the test's control. ``tick``: seconds each reading moves it forward."""

    def __init__(self, wall: float = 1_000_000.0, monotonic: float = 100.0, *, tick: float = 0.0) -> None:
        self._offset = wall - monotonic
        self._mono = monotonic
        self._tick = tick
        self._slept = 0.0
        """Seconds the machine was suspended (:meth:`suspend`): boottime and wall counted them."""

    def monotonic(self) -> float:
        self._mono += self._tick
        return self._mono

    def wall(self) -> float:
        return self.monotonic() + self._offset + self._slept

    def boottime(self) -> float:
        return self.monotonic() + self._slept

    def advance(self, seconds: float) -> None:
        self._mono += seconds

    def suspend(self, seconds: float) -> None:
        """The machine slept ``seconds``: the wall clock and boottime moved, the monotonic clock did not
        (polecat/clock.py rule 4)."""
        self._slept += seconds


class MemoryPageStore:
    """A PageStore in memory: bodies by hash, histories by URL, the log in order."""

    hash_name = HASH_NAME

    def __init__(self) -> None:
        self.bodies: dict[bytes, bytes] = {}
        self.log: list[FetchRecord] = []
        self.flushes = 0
        self._pending = 0

    def put(self, record: FetchRecord, body: bytes | None) -> bool:
        self.log.append(record)
        self._pending += 1
        if body is None or record.content_hash in self.bodies:
            return False
        self.bodies[record.content_hash] = body
        return True

    def has(self, digest: bytes) -> bool:
        return digest in self.bodies

    def get(self, digest: bytes) -> bytes:
        try:
            return self.bodies[digest]
        except KeyError:
            raise NotFound(digest.hex()) from None

    def history(self, url: str) -> list[FetchRecord]:
        return [r for r in self.log if r.url == url]

    def records(self) -> Iterator[FetchRecord]:
        return iter(list(self.log))

    def records_since(self, seq: int) -> Iterator[FetchRecord]:
        return iter(self.log[seq:])

    def record_count(self) -> int:
        return len(self.log)

    def flush(self) -> None:
        self.flushes += 1
        self._pending = 0

    def seal(self) -> None:
        """Nothing to seal: a memory store has no segments."""

    def unshipped(self) -> int | None:
        return None

    def stats(self) -> StoreStats:
        raw = sum(len(b) for b in self.bodies.values())
        return StoreStats(records=len(self.log), bodies=len(self.bodies),
                          revisits=len(self.log) - len(self.bodies), raw_bytes=raw, stored_bytes=raw,
                          segments=1, sealed_segments=0, remote_segments=0, pending_records=self._pending)

    def close(self) -> None:
        self.flush()


@dataclass
class Canned:
    """One canned answer: a status, headers and body, or an error to raise."""

    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "text/html"),)
    error: FetchError | None = None
    duration: float = 0.01


class FakeResolver:
    """Every name resolves to 127.0.0.1 at once; counts lookups."""

    def __init__(self) -> None:
        self.lookups = 0

    async def lookup(self, host: str) -> tuple[tuple[str, int], ...]:
        self.lookups += 1
        return (("127.0.0.1", 0),)

    def prefetch(self, host: str) -> None:
        return None

    def stats(self) -> DnsStats:
        return DnsStats(hits=self.lookups, misses=0, coalesced=0, failures=0, entries=0,
                        hit_ratio=1.0 if self.lookups else 0.0)

    def ttl_left(self, host: str) -> float | None:
        return None


@dataclass
class FakeFetcher:
    """Answers from ``pages`` (URL -> :class:`Canned`; unknown URLs get 404), timed by ``clock``;
    ``calls`` lists the URLs answered, in order."""

    clock: FakeClock
    pages: dict[str, Canned] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    resolver: FakeResolver = field(default_factory=FakeResolver)
    sent: list[str] = field(default_factory=list)
    """The URLs whose request went out (its send gate, if any, was open)."""
    connecting: asyncio.Event | None = None
    """Set: every request waits for it before its send gate is asked (a slow connect)."""
    answering: asyncio.Event | None = None
    """Set: every request sent waits for it before its response comes (a request in flight)."""
    short: bool = False
    """What :meth:`connections_short` answers (no descriptors here)."""
    full: bool = False
    """What :meth:`connections_full` answers (no TLS connections here)."""
    let_go_urls: list[str] = field(default_factory=list)
    """The URLs :meth:`let_go` was called with, in order (polecat/fetch/pool.py rule 11)."""

    async def __aenter__(self) -> FakeFetcher:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        return None

    def respond(self, url: str) -> Response:
        self.calls.append(url)
        canned = self.pages.get(url, Canned(404, b"not found", (("Content-Type", "text/plain"),)))
        if canned.error is not None:
            self.clock.advance(canned.duration)
            raise canned.error
        started = self.clock.monotonic()
        self.clock.advance(canned.duration / 2)
        first_byte = self.clock.monotonic()
        self.clock.advance(canned.duration / 2)
        headers = canned.headers
        ctype = next((v for k, v in headers if k.lower() == "content-type"), "")
        location = next((v for k, v in headers if k.lower() == "location"), None)
        return Response(url, canned.status, headers, canned.body, False, ctype.split(";")[0].strip().lower(),
                        None, location, None, "127.0.0.1", started, first_byte, self.clock.monotonic(),
                        len(canned.body))

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None,
                    stream: StreamChoice | None = None, max_bytes: int | None = None,
                    gate: SendGate | None = None) -> Response:
        resp = await self._gated(url, gate)
        sink = stream(resp.status, resp.content_type) if stream is not None else None
        if sink is None:
            return resp
        # As the real fetcher streams: in reads of 64 KiB, up to the sink's cap, until it is done.
        cut = len(resp.body) > sink.max_bytes
        for i in range(0, min(len(resp.body), sink.max_bytes), 65536):
            sink.feed(resp.body[i : min(i + 65536, sink.max_bytes)])
            if sink.done:
                cut = True
                break
        return replace(resp, body=b"", truncated=cut, streamed=True)

    async def fetch_robots(self, url: str, *, pacer: RedirectPacer | None = None,
                           gate: SendGate | None = None) -> Response:
        return await self._gated(url, gate)

    async def _gated(self, url: str, gate: SendGate | None) -> Response:
        """The real fetcher's order: a connect (``connecting``, when set, is waited for), the gate asked
        with no wait before the send (polecat/fetch/pool.py rule 8), the response (``answering``)."""
        if self.connecting is not None:
            await self.connecting.wait()
        if gate is not None and not gate():
            raise RequestWithheld(f"{url}: the send gate closed")
        self.sent.append(url)
        if self.answering is not None:
            await self.answering.wait()
        return self.respond(url)

    def connections_short(self) -> bool:
        return self.short

    def connections_full(self, leases: int) -> bool:
        return self.full

    def let_go(self, url: str) -> None:
        self.let_go_urls.append(url)

    def tls_stats(self) -> TlsStats:
        return TlsStats(handshakes=0, resumed=0, sessions=0)  # no connections: no TLS


class MemoryTables:
    """Named tables of byte keys in dicts, each with its keys kept sorted: the reads of
    polecat/frontier/tables.py (rule 1) and the writes that change them."""

    def __init__(self, tables: dict[Table, dict[bytes, bytes]] | None = None) -> None:
        self._rows: dict[Table, dict[bytes, bytes]] = {
            t: dict((tables or {}).get(t, {})) for t in get_args(Table) if t != "near"}
        self._keys = {t: sorted(rows) for t, rows in self._rows.items()}

    def get(self, table: Table, key: bytes) -> bytes | None:
        return self._rows[table].get(key)

    def getter(self, table: Table) -> Lookup:
        return self._rows[table].get

    def items(self, table: Table, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        rows, keys = self._rows[table], self._keys[table]
        i = bisect_left(keys, prefix)
        while i < len(keys) and keys[i].startswith(prefix):
            key = keys[i]
            yield key, rows[key]
            # As an LMDB cursor: on to the next key after this one, whatever was written meanwhile.
            i = bisect_right(keys, key)

    def count(self, table: Table) -> int:
        return len(self._rows[table])

    def items_after(self, table: Table, key: bytes) -> Iterator[tuple[bytes, bytes]]:
        rows, keys = self._rows[table], self._keys[table]
        i = bisect_right(keys, key)
        while i < len(keys):
            at = keys[i]
            yield at, rows[at]
            i = bisect_right(keys, at)  # as an LMDB cursor, as in items()

    def put(self, table: Table, key: bytes, value: bytes) -> None:
        rows = self._rows[table]
        if key not in rows:
            insort(self._keys[table], key)
        rows[key] = value

    def delete(self, table: Table, key: bytes) -> None:
        if self._rows[table].pop(key, None) is not None:
            keys = self._keys[table]
            del keys[bisect_left(keys, key)]

    def copy(self) -> MemoryTables:
        return MemoryTables(self._rows)

    def close(self) -> None:
        """Nothing to release: a snapshot in memory is a copy."""


class MemoryFrontierDB:
    """A :class:`~polecat.frontier.tables.FrontierTables` in memory, for frontier decision tests: the
    rules of polecat/frontier/tables.py kept with dicts instead of LMDB. :meth:`close` drops what is
    uncommitted, as a crash does, and the object then reads as the data dir opened again. The
    near-duplicate index (``near``, LMDB dupsort) is not the frontier's and is not kept."""

    def __init__(self) -> None:
        self._tables = MemoryTables()
        self._committed = MemoryTables()
        self.seq = 0
        """The commit counter (:class:`~polecat.frontier.db.FrontierDB` keeps it in ``meta`` too)."""
        self.pending = 0
        self.commits = 0
        """Commits made since this object was created."""
        self.written = WrittenSlices()
        """The slices written (polecat/frontier/tables.py rule 6)."""

    def get(self, table: Table, key: bytes) -> bytes | None:
        return self._tables.get(table, key)

    def getter(self, table: Table) -> Lookup:
        return self._tables.getter(table)

    def items(self, table: Table, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        return self._tables.items(table, prefix)

    def count(self, table: Table) -> int:
        return self._tables.count(table)

    def items_after(self, table: Table, key: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._tables.items_after(table, key)

    def apply(self, writes: Sequence[Write]) -> None:
        tables, written = self._tables, self.written
        for w in expand(writes):  # writes.py rule 5
            if isinstance(w, Put | Delete) and w.table in written.sliced:
                written.marks.add(w.key[:PREFIX_LEN])
            if isinstance(w, Put):
                tables.put(w.table, w.key, w.value)
            elif isinstance(w, Delete):
                tables.delete(w.table, w.key)
            elif isinstance(w, DeleteSlices):
                written.mark_all(w.slices)
                for table in SLICED_TABLES:
                    for s in w.slices:
                        doomed = [key for key, _ in tables.items(table, slice_prefix(s))]
                        for key in doomed:
                            tables.delete(table, key)

    def applied(self, decided: Decided[T]) -> T:
        """Apply ``decided``'s writes and return its answer, as FrontierDB does."""
        self.apply(decided.writes)
        return decided.value

    def commit_if_big(self) -> bool:
        """Never: the tables are in memory whatever their writes (db.py rule 16 is the disk's)."""
        return False

    def commit(self) -> int:
        self.written.commit()
        self.seq += 1
        self.commits += 1
        self._tables.put("meta", b"seq", str(self.seq).encode())
        self._committed = self._tables.copy()
        self.pending = 0
        return self.seq

    def snapshot(self) -> MemoryTables:
        return self._committed.copy()

    def take_written(self) -> frozenset[int]:
        return self.written.take()

    def mark_written(self, slices: Iterable[int]) -> None:
        self.written.give_back(slices)

    def close(self) -> None:
        """Drop what is uncommitted; the tables read as the last commit from now on."""
        self._tables = self._committed.copy()
        self.pending = 0


class FakeHeadReader:
    """A :class:`~polecat.frontier.read_ahead.HeadReader` that reads nothing: it keeps the heads handed to
    it (:attr:`handed`, in order, a batch a list) and reports the counts a test sets."""

    def __init__(self) -> None:
        self.handed: list[list[Head]] = []
        self.read_so_far = 0
        self.faults = 0
        self.started = 0
        self.stopped = 0

    def start(self) -> None:
        self.started += 1

    def read(self, heads: list[Head]) -> None:
        self.handed.append(list(heads))

    def counts(self) -> tuple[int, int]:
        return self.read_so_far, self.faults

    def stop(self) -> None:
        self.stopped += 1
