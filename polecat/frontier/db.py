"""The frontier's LMDB environment: named tables, schema check, and the one batched write transaction.

All frontier state lives in one environment so that one commit moves it atomically: a page's completion,
the outlinks it discovered, their seen-set entries and the host's next-allowed time land together or not
at all. The frontier keeps a single write transaction open and commits it when the node commits
(every N operations or T milliseconds); a kill -9 loses at most that window, which is then replayed.

Rules of the writer thread:
1. LMDB ties a write transaction's lock to the thread that began it: every write transaction is begun,
   committed and aborted on one writer thread (polecat/frontier/writer.py), so the commit's fsync runs
   there while the event loop goes on (:meth:`FrontierDB.start_commit`).
2. Between those, the event-loop thread reads and writes through :attr:`FrontierDB.txn`, never two
   threads at once: while a commit is in flight, reading :attr:`~FrontierDB.txn` waits for it (the node
   holds its frontier calls back until then, so that wait is the rare exception, not the rule).
3. Decisions' writes (polecat/writes.py) applied while a commit is in flight do not wait for
   it: they are kept, in order, and applied to the next transaction before anything reads it. So a
   decision that needs no read of the tables (an operator control) answers at once during a commit;
   its writes belong to the next commit, like any change made after :meth:`FrontierDB.start_commit`.

Rules of the tables:
4. The ``seen`` table is not an LMDB table but sorted runs of keys beside it
   (:class:`~polecat.frontier.seenlog.SeenRuns`, in the environment's ``seen/`` directory), listed in
   ``meta`` and so committed with everything else: random URL fingerprints dirtied an LMDB page each,
   ~4 KB written per URL at every commit (issue 39). A commit prepares its run (the memtable sorted) and
   makes it durable on the writer thread before the LMDB commit that lists it (seenlog.py rule 2,
   writer.py rule 4): every read of the seen table waits for an LMDB commit in flight, and its writes
   wait in the backlog (rule 3), so the loop's thread does not touch it meanwhile.
5. Schema 3 keeps ``seen`` so; schema 2 (0.3.0) kept it in LMDB and is upgraded on open by moving its
   keys, already sorted, into one run (:meth:`FrontierDB._upgrade_v2`); schema 1 is upgraded to 2
   first, in the same commit.

Rules of the write-ahead log (polecat/frontier/wal.py; issue 39: each LMDB commit copies every page it
dirtied, ~4 KB per queue or host row changed):
6. A commit (:meth:`FrontierDB.start_commit`) appends the writes applied through :meth:`FrontierDB.apply`
   since the last one (encoded as they are applied, wal.py rule 7) to the log, with the commit counter, and
   fsyncs it on the writer thread; the LMDB transaction stays open. Only an *LMDB commit* commits it: when
   the log has reached :attr:`FrontierDB.lmdb_commit_at` (rule 14: at least ``log_bytes``,
   ``frontier.log_mb``, 64 MiB by default; 0 makes every commit an LMDB commit and the log stays empty:
   benchmarks/README.md), when asked (an open that creates or upgrades the
   schema), for a :meth:`FrontierDB.snapshot`, and at :meth:`FrontierDB.close` when nothing was applied
   since the last commit. An LMDB commit writes ``seq`` (the last commit it holds) and the seen runs'
   manifest into ``meta``, and the log is emptied once it is durable (wal.py rule 4). LMDB commits and
   appends run in order on the one writer thread (writer.py rule 5). Reads and writes of the loop go on
   during an append (it does not touch the transaction); during an LMDB commit they wait, as in rule 2.
7. The open replays, in order, the log's entries whose sequence is past ``meta``'s ``seq`` into the
   transaction (an entry at or below it is in the LMDB already: never applied twice) and takes the last
   one's as its commit counter; a torn tail is dropped (wal.py rule 3, :attr:`FrontierDB.log_dropped`).
   The writes are applied as they are decoded, in batches of rows, each key's last write, a table at a
   time in key order (wal.py rules 8 and 11, rule 17), and ``meta``'s ``seq`` once at the end (one
   transaction: a crash mid-replay leaves the LMDB as it was, and the next open replays the log again);
   an entry whose checksum holds but that does not decode refuses the open (the transaction, never
   committed, is dropped with it).
   An absent log is an empty one (data dirs of 0.3.0). What the node committed is what the log and the
   LMDB hold together, so a kill -9 loses what was applied after the last commit, as before.
8. The seen keys go through the log like every other write, not as a run per commit: the replay then
   restores them with the queue rows and URL records they go with, in one order, and the runs are
   written only at LMDB commits (seenlog.py rule 2: its "commit" is an LMDB commit), bigger and fewer,
   so merges rewrite fewer keys. The memtable holds the keys since the last LMDB commit.
9. A :meth:`FrontierDB.snapshot` is of the last commit, as before (tables.py rule 5): when the log holds
   commits the LMDB lacks, it commits the LMDB first if nothing was applied since the last commit (a cluster
   checkpoint round asks for an LMDB commit, made off the loop, before it takes one: polecat/node/commits.py
   rule 9), or else reads the log's entries on top of the LMDB's last
   commit (:class:`~polecat.frontier.wal.LogOverlay`; it decodes the log, up to
   :attr:`FrontierDB.lmdb_commit_at`, on the caller's thread): an LMDB commit then would make durable
   writes whose store records are not flushed yet (polecat/node/commits.py rule 1).

Rule of schema 4:
10. Schema 4 keeps schema 3's keys and packs the ``queue`` and ``urls`` values (polecat/frontier/records.py:
    no JSON, no origin the key names, no default fields; issue 39); schema 3 is upgraded on open by
    rewriting both tables in one commit (:meth:`FrontierDB._upgrade_v3`), after the upgrades above.

Rules of ``writemap`` (``frontier.writemap``, on by default: the open transaction's dirty pages out of
anonymous memory, for ~1.26 times the bytes written at 1M URLs, ~1.47 times at 10M seeds with a 256 MiB
log, where the kernel's writeback of pages dirty for 30 s, not the log's cap, bounds how writes to a page
coalesce; benchmarks/README.md, "Issue 39: writemap by default", "Issue 39: bytes written per URL at the
defaults"):
11. With ``writemap`` the data file's blocks are allocated ahead of LMDB's pages
    (polecat/frontier/reserve.py): at the open, for the replay of the log and any upgrade, at every
    commit (:meth:`FrontierDB.start_commit`) for what the open transaction may still copy (reserve.py
    rule 2), before anything else is done, and before a batch of :data:`ROOM_CHECK_WRITES` writes or
    more (a slice adopted, a seeds batch) is applied, for twice its bytes. A reservation that fails (a
    full disk) fails that commit or batch as a write would (:class:`~polecat.errors.StorageFault`, the
    node stops with what was committed, polecat/node/commits.py rule 6), or refuses the open
    (:class:`~polecat.errors.FrontierError`), and no LMDB commit is made after it (:meth:`FrontierDB.close`
    leaves the log to the next open's replay): so a full disk is never met by a write through the map,
    which would be a SIGBUS. A filesystem that cannot reserve (no ``fallocate``) opens without
    ``writemap``, with a warning.
12. With ``writemap`` nothing writes the map's dirty pages back ahead of the LMDB commit: that commit
    (LMDB's ``mdb_page_flush``) writes into every page its transaction dirtied, to clear the page's dirty
    flag, so a page written back before it is dirtied again and written again by the commit's sync; the
    commit writes every page either way, and the leasing pause (rule 6) is not shortened by an earlier
    writeback. Issue 39: an ``fdatasync`` once the log passed three quarters of
    :attr:`FrontierDB.lmdb_commit_at` wrote each page dirtied before it twice: 1,572 B per URL admitted
    at 10M seeds with a 256 MiB log, 1,319 B without it (benchmarks/README.md, "Issue 39: bytes written
    per URL at the defaults"). The kernel's own writeback of pages dirty past its expiry (30 s by
    default) costs the same for the pages it takes, and is the system's to tune, not the frontier's.

Rule of schema 5 (numbered after the ``writemap`` rules, which came before it):
13. Schema 5 numbers the hosts: a ``queue`` key holds its host's number (kept in the host's record) and a
    6-byte FIFO seq (polecat/frontier/keys.py rule 1; issue 39: 16 bytes less per queued URL with the
    names of bench_frontier); schema 4 is upgraded on open by numbering the records in key order and
    rewriting the ``hosts`` values and ``queue`` keys in one commit of its own
    (:meth:`FrontierDB._upgrade_v4`), after the upgrades above: a kill -9 in it leaves schema 4.

Rule of the LMDB commit's size (numbered after schema 5's):
14. The log size that makes a commit an LMDB commit (rule 6; :attr:`FrontierDB.lmdb_commit_at`) grows with
    the data: ``log_share`` (``frontier.log_share``) of the bytes the LMDB's tables use, taken at the open
    and after each LMDB commit, at most ``log_max_bytes`` (``frontier.log_max_mb``), and never under
    ``log_bytes``. An LMDB commit writes each page it dirtied once, at most every page of the tables: a
    log of a share of them keeps that under the log's own bytes over the share, per URL, whatever the
    size, where a fixed log made it grow with the tables (issue 39: 902 B per URL at 1M URLs, 2,744 B at
    10M, with 64 MiB). The cap bounds what a kill -9 leaves to replay (rule 7: a resume's first request
    within 10 s; 3-7 s for 62 MiB at 3M-4M URLs here, 12-36 s for 255 MiB at 3M-10M, before wal.py rule
    11; 7.1-8.1 s for 320 MiB at 11.5M since, 11.7-14.3 s in bench_frontier's reopen), the leasing pause
    of an LMDB commit and its dirty pages in memory; by default (0) it is ``log_bytes``, and the log is
    sized as before (benchmarks/README.md, "Issue 39: LMDB commits sized to the data", "Issue 39: a
    faster log replay": 320 MiB writes 985 B per URL at 10M). The log's size is its entries' msgpack
    (:attr:`~polecat.frontier.wal.WriteLog.held`), not the compressed file's (wal.py rule 12): what the
    replay decodes, so compression does not lengthen it (benchmarks/README.md, "Issue 39: the log's
    entries compressed").

Rule of writes applied in steps (numbered after rule 14's):
15. Writes given to :meth:`FrontierDB.apply_later` are queued, not applied, and :meth:`FrontierDB.apply_step`
    applies them a few rows at a time, so that whoever drives it (the node's periodic commit,
    polecat/node/commits.py rule 11) gives the loop a turn between steps; so do the writes the backlog of
    an LMDB commit holds (rule 3), at :meth:`FrontierDB.finish_commit`. Writes applied (:meth:`apply`)
    while some are queued go behind them, in order, and every read (:meth:`get`, :meth:`getter`,
    :meth:`items`, :meth:`count`, :attr:`txn`, and so a commit or a snapshot) applies the queue first: a
    read sees every write made before it, as when they were applied at once. The log's entry takes them
    at once, in the order given (rule 6), as before.
16. A commit whose own entry would reach :attr:`FrontierDB.lmdb_commit_at` (or :data:`MAX_ENTRY`, what an
    entry's 32-bit length holds) is an LMDB commit, not an append (rule 6): logged, it would be written
    twice (the log, then the LMDB commit the log's size then asks for). Such a commit is the open's after
    a migration or an index build (a 50M-URL frontier's refresh indexes: ~150M rows, past 4 GiB in one
    entry, so the first commit after the open failed with ``struct.error``: benchmarks/bench_periodic.py
    at 50M), or a node's after a big adoption; a node's periodic commits are far smaller. A long run of
    writes outside the periodic commits asks for such commits as it goes (:meth:`FrontierDB.commit_if_big`:
    the open's index build, polecat/frontier/refresh_index.py rule 6), or it holds them all in memory
    until the next commit, as the entry's encoding and the open transaction's dirty pages (7.8 GB of
    RssAnon at the end of that 50M build).

Rule of the replay's order of puts (numbered after rule 16's):
17. The replay (rule 7) puts a batch's rows of a table (each key's last write, wal.py rule 11) into the
    LMDB in the order of their keys' first :data:`ORDER_BYTES` bytes (numpy sorts them: Python's sort of
    the rows cost more than it saved), and deletes its deletes so, where the batch holds at least
    :data:`ORDER_ROWS` of them: a put whose key is on the leaf page of the one before it finds it without
    a descent from the root, through pages the put before it brought into the CPU's caches. A batch holds
    one write a key, so the order of its rows does not change what the table ends with. Issue 39: at
    1.5M URLs, 670,000 queue rows in log order cost ~1.1 s of CPU in ``putmulti`` (1.6 us each: a
    random descent of a 130 MB tree), 0.66 s so; the whole replay of 139 MiB 3.07-3.16 -> 2.66-2.79 s of
    CPU, of 320 MiB 7.29-7.73 -> 6.22-6.58 s (benchmarks/README.md, "Issue 39: the replay's puts in key
    order").

Rule of schema 6 (numbered after rule 17's):
18. Schema 6 marks a seed's host in its ``hosts`` record (the top bit of its number field,
    polecat/frontier/records.py ``SEED_BIT``; polecat/frontier/intake.py rule 9), not by a ``seedhost`` row
    of ``ops`` (issue 39: a random leaf of ``ops`` written a seed host, beside its record's own). Slice
    bundles and checkpoints still carry the mark as that row, 0.3.0's wire (handover.py rule 11). Schema 5
    is upgraded on open (:meth:`FrontierDB._upgrade_v5`) by replaying its log first (its entries are
    schema 5's writes: rule 7 would replay them after the upgrade), then moving each ``seedhost`` row into
    its host's record and deleting the row, in one commit of its own, after the upgrades above: a kill -9
    in it leaves schema 5 and its log. A seed host with no record here (its seed refused or seen, or
    another member's: host_table.py rule 26) keeps its row: a record made for it would count as a host
    this frontier knows (``scope.max_hosts``, ``polecat status``), N times over in a crawl of N workers.

Rules of schema 7 (numbered after rule 18's):
19. Schema 7 shortens the ``queue`` key (polecat/frontier/keys.py rule 1: the host's number and the FIFO seq
    as order-preserving varints, the rank in 16 bits, the depth in 8; issue 39: at most 12 bytes, not 18, at
    100,000 hosts and 10M URLs). Schema 6 is upgraded on open (:meth:`FrontierDB._upgrade_v6`) by replaying
    its log first (schema 6's writes, as in rule 18), then rewriting the ``queue`` table in key order
    (polecat/frontier/migrate.py ``rekey_queue_v6``) and dropping the bands' count (its bands are of the
    new rank's grid: host_table.py rule 24 counts it again), in one commit of its own, after the upgrades
    above: a kill -9 in it leaves schema 6 and its log. The slices' wire is 0.3.0's as before (keys.py
    rule 1); the ``--workers`` of one machine run one release, so their unix socket meets no schema-6 peer.
20. Schema 7 also writes a ``hosts`` value compact (polecat/frontier/records.py :func:`encode_host`): a tag
    byte (its top bit set, the seed mark and which fields follow), the next-allowed time, the number, the
    queued count as a varint, then only the fields that differ from a new record's, then the address: a
    seed host never leased is 14 bytes, not 48 (issue 39: the ``hosts`` table's leaves, random by name,
    were most of the LMDB's pages written at 10M seeds; fewer bytes a row, fewer leaves, fewer pages a
    commit and a writeback window dirties: 1,041-1,064 -> 806-893 B per URL admitted, benchmarks/README.md,
    "Issue 39: bytes written per URL at the defaults, frontier schema 7 (stop 54)"). A schema-6 value's
    first byte is a next-allowed time's, a double >= 0, so its top bit is clear: the two forms are read
    side by side, and a record is rewritten compact when it is next written; rule 19's upgrade rewrites no
    ``hosts`` value (its log's entries hold schema 6's, read as they are). Slice bundles and checkpoints
    carry schema 4's values, as before (handover.py rule 11). A schema-7 data dir also lists each seen run
    with the LMDB commit that listed it (seenlog.py rule 7; a run listed before, without it, is read as of
    an unknown commit).
Rule of an upgrade's disk reservation (numbered after schema 7's):
21. With ``writemap``, the open reserves before each upgrade step (rule 11), after the commits of the
    steps before it, a copy of every table and two more of the tables the step rewrites through the
    scratch table (:data:`UPGRADE_REWRITES`; reserve.py rule 4), not three copies of every table once: a
    schema-6 frontier of 50M URLs (a 20 GiB file; its upgrade rewrites the 50 MB ``queue``) asked for
    [0, 83 GiB) and, on a disk with less free, would have filled it (reserve.py rule 5) and refused the
    open (benchmarks/README.md, "Issue 39: the schema 6 -> 7 upgrade at 50M").
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from functools import partial
from itertools import compress, repeat
from operator import is_, is_not, itemgetter
from pathlib import Path
from typing import Any, TypeVar, cast

import lmdb

from polecat.errors import FrontierError, PolecatError
from polecat.faults import fault_cause, storage_fault
from polecat.frontier import reserve
from polecat.frontier.handover_ranges import WrittenSlices, delete_ranges
from polecat.frontier.host_table import BANDS, HOST_SEQ
from polecat.frontier.migrate import (
    CompactReport,
    MigrationReport,
    RekeyReport,
    RenumberReport,
    SeedMarkReport,
    compact_v3,
    mark_seeds_v5,
    migrate_v1,
    mismatch,
    rekey_queue_v6,
    release_of,
    renumber_v4,
)
from polecat.frontier.seenlog import MANIFEST, SeenRuns, SeenView
from polecat.frontier.slices import PREFIX_LEN, SLICES, slice_prefix
from polecat.frontier.tables import Lookup, Snapshot
from polecat.frontier.wal import IN_ORDER, LOG_NAME, Batch, Entry, LogOverlay, Replay, WriteLog
from polecat.frontier.writer import TxnWriter
from polecat.version import __version__
from polecat.writes import Decided, Delete, DeleteSlices, Put, PutRows, Table, Write, put_bytes, row_count

T = TypeVar("T")

SCHEMA_VERSION = 7
"""7: shorter ``queue`` keys and compact ``hosts`` values (rules 19 and 20); 6: seed hosts marked in their
records (rule 18); 5: host numbers in ``queue`` keys (rule 13); 4: compact ``queue`` and ``urls`` values (rule
10); 3: the seen table in runs (rule 4); 2: tables keyed slice-first (polecat/frontier/keys.py), upgraded on
open (rule 5); 1 is upgraded to 2 on open (frontier/migrate.py)."""
UPGRADABLE = (1, 2, 3, 4, 5, 6)
"""The older schemas an open upgrades (rules 10, 13, 18 and 19, and the upgrades before them)."""
UPGRADE_REWRITES: dict[int, tuple[str, ...]] = {
    1: ("hosts", "queue", "urls", "ops", "robots", "seen"), 2: (), 3: ("queue", "urls"),
    4: ("hosts", "queue"), 5: (), 6: ("queue",)}
"""The LMDB tables (``seen``: schema 2's) each schema's upgrade copies through the scratch table, for the
reservation before it (rule 21); schemas 2 and 5 move or change rows in place."""

STORE_MARK = b"store_mark"
"""Meta key the node keeps (polecat/node/commits.py rule 4): the store's record count at the last commit.
Store records past it are indexed again for near-duplicates when the node opens."""
NEAR_REBUILD = b"near_rebuild"
"""Meta key: the store sequence number from which stored pages still need a near-duplicate index entry
after a fingerprint format change (absent: none do). Set by the upgrade, cleared by the node
(polecat/node/commits.py rule 7) in the commit that holds the entries."""

TABLES = ("meta", "queue", "hosts", "seen", "urls", "near", "ops", "robots", "priors", "ready", "resident",
          "refresh", "due", "fresh", "claims")

ROOM_CHECK_WRITES = 1_000
"""A batch of writes at least this long gets disk space reserved for it before it is applied (rule 11)."""

MAX_ENTRY = (1 << 32) - 1
"""The most bytes a log entry's payload may hold: its length is 32 bits (wal.py rule 1; rule 16)."""
LOG_BYTES = 64 << 20
"""Log bytes after which a commit is also an LMDB commit, at least (rules 6 and 14; the default of
``frontier.log_mb``, 64 MiB)."""
LOG_SHARE = 1.0
"""The share of the LMDB's bytes in use the log reaches before an LMDB commit (rule 14; the default of
``frontier.log_share``)."""
ORDER_BYTES = 8
"""The bytes of a key rule 17 orders a batch's puts by (a slice prefix and a host's number, for a queue
key): one big-endian 64-bit integer a key, which numpy sorts ~3x faster than the keys as strings."""
ORDER_ROWS = 1_024
"""The fewest rows of a table rule 17 orders: below it numpy's ~25-45 us a call is more than it saves."""
LOG_MAX_BYTES = 0
"""The most log bytes rule 14 lets the log reach (the default of ``frontier.log_max_mb``; 0: ``log_bytes``,
the replay's bound)."""

_SLICE_OF_KEY = itemgetter(slice(PREFIX_LEN))
"""A slice-keyed row's key to its slice prefix (``key[:PREFIX_LEN]``, as a C call: a batch's rows are
marked in one ``map``)."""


def _in_key_order(rows: Mapping[bytes, bytes | None]) -> tuple[list[bytes], list[bytes | None]]:
    """The keys and values of ``rows`` in the order of the keys' first :data:`ORDER_BYTES` bytes (rule
    17), as they are if there are fewer than :data:`ORDER_ROWS`."""
    keys, values = list(rows), list(rows.values())
    if len(keys) < ORDER_ROWS:
        return keys, values
    import numpy as np  # as in seenlog.py: an open with nothing to replay loads no numpy

    order = np.array(keys, dtype=f"S{ORDER_BYTES}").view(f">u{ORDER_BYTES}").argsort().tolist()
    return list(map(keys.__getitem__, order)), list(map(values.__getitem__, order))


log = logging.getLogger("polecat")


class FrontierDB:
    """Owns the environment, the writer thread and the open write transaction (rules above). Its callers
    are one thread (the event loop's). The frontier reads and writes it as
    :class:`~polecat.frontier.tables.FrontierTables`."""

    def __init__(self, path: Path, *, map_size: int, params: dict[str, Any],
                 log_bytes: int = LOG_BYTES, log_share: float = LOG_SHARE, log_max_bytes: int = LOG_MAX_BYTES,
                 writemap: bool = False) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        try:
            if writemap and not reserve.supported(path):  # rule 11
                log.warning("frontier: %s cannot reserve disk space (no fallocate): opened without writemap",
                            path)
                writemap = False
        except OSError as exc:  # a full disk already
            raise FrontierError(f"{fault_cause(exc, path)}: cannot reserve disk space for the frontier in "
                                f"{path} ({exc})") from exc
        self.writemap = writemap
        try:
            self.env = lmdb.open(
                str(path), map_size=map_size, max_dbs=len(TABLES) + 2, subdir=True, sync=True,
                # One fsync per commit instead of two: LMDB keeps its integrity, and an OS crash can
                # undo at most the last commit, which the at-least-once replay covers. A process kill
                # loses nothing committed either way.
                metasync=False, readahead=False, max_readers=256, writemap=writemap,
            )
        except lmdb.Error as exc:
            raise FrontierError(f"cannot open frontier database in {path}: {exc}") from exc
        self.meta = self.env.open_db(b"meta")
        self.queue = self.env.open_db(b"queue")
        self.hosts = self.env.open_db(b"hosts")
        self.old_seen = self.env.open_db(b"seen")
        """The LMDB seen table of schema 2 and before, emptied by the upgrade (rule 5)."""
        self.urls = self.env.open_db(b"urls")
        self.near = self.env.open_db(b"near", dupsort=True)
        self.ops = self.env.open_db(b"ops")
        self.robots = self.env.open_db(b"robots")
        self.priors = self.env.open_db(b"priors")
        """Sitemap hints per URL (refresh priors), keyed like ``urls``."""
        self.ready = self.env.open_db(b"ready")
        self.resident = self.env.open_db(b"resident")
        """The due index of the hosts out of memory, and the hosts in it (host_table.py rules 7-8)."""
        self.refresh = self.env.open_db(b"refresh")
        self.due = self.env.open_db(b"due")
        self.fresh = self.env.open_db(b"fresh")
        """The refresh indexes (polecat/frontier/refresh_index.py)."""
        self.claims = self.env.open_db(b"claims")
        """The content claims this member's book holds, keyed by content slice (polecat/cluster/claims.py
        rule 8). A frontier written before it (0.3.0) has none: its book starts empty."""
        self.sliced: dict[str, Any] = {"ops": self.ops, "robots": self.robots, "hosts": self.hosts,
                                       "urls": self.urls, "queue": self.queue, "priors": self.priors,
                                       "claims": self.claims}
        """The slice-keyed LMDB tables by name (polecat/frontier/keys.py); ``seen`` is :attr:`seen`."""
        self.tables: dict[str, Any] = {**self.sliced, "meta": self.meta, "near": self.near,
                                       "ready": self.ready, "resident": self.resident,
                                       "refresh": self.refresh, "due": self.due, "fresh": self.fresh}
        """Every LMDB table a decision writes, by its :data:`~polecat.writes.Table` name."""
        self._trees = [*self.tables.values(), self.old_seen]
        """Every LMDB table, for the reservation's bound (rule 11)."""
        self._reserve = reserve.DiskReserve(path / "data.mdb") if writemap else None
        self._no_room: OSError | None = None
        """The failed reservation, after which no LMDB commit is made (rule 11)."""
        self.written = WrittenSlices()
        """The slices written, for checkpoint rounds (polecat/frontier/tables.py rule 6)."""
        self._writer = TxnWriter(self.env, "polecat-frontier-writer")
        try:
            manifest = self._writer.txn.get(MANIFEST, db=self.meta)
            self.seen = SeenRuns(path / "seen", None if manifest is None else bytes(manifest))
        except (OSError, ValueError) as exc:
            self._writer.close()
            if self._reserve is not None:
                self._reserve.close()
            self.env.close()
            raise FrontierError(f"cannot open the seen table in {path / 'seen'}: {exc}") from exc
        self.tables["seen"] = self.seen
        self._backlog: list[Write] = []
        """Writes applied during the commit in flight, for the next transaction (rule 3)."""
        self._queued: deque[Write] = deque()
        """Writes given to :meth:`apply_later` (and the ones applied after them) not applied yet (rule 15)."""
        self._lookups: dict[Table, Lookup] = {}
        """:meth:`getter`'s answers in the open transaction (a commit begins another)."""
        self.seq = 0
        self.pending = 0
        self.log_bytes = log_bytes
        self.log_share = log_share
        self.log_max_bytes = log_max_bytes
        self._lmdb_used = 0
        """Bytes of the LMDB's tables at the open or the last LMDB commit (rule 14)."""
        self._entry = Entry()
        """The writes applied since the last commit, encoded for its log entry (rule 6)."""
        self._appending: Future[None] | None = None
        """The last log append started (rule 6)."""
        self._log_failed: OSError | None = None
        self.wal = WriteLog(path / LOG_NAME)
        self.replayed = 0
        """Log entries the open replayed (rule 7)."""
        self._in_lmdb = 0
        """The commit counter of the last LMDB commit (rule 6)."""
        self.upgraded: MigrationReport | None = None
        """What the open upgraded from schema 1, if it did."""
        self.compacted: CompactReport | None = None
        """What the open packed from schema 3, if it did (rule 10)."""
        self.renumbered: RenumberReport | None = None
        """What the open numbered from schema 4, if it did (rule 13)."""
        self.seeds_marked: SeedMarkReport | None = None
        """What the open moved from schema 5's seed-host rows, if it did (rule 18)."""
        self.rekeyed: RekeyReport | None = None
        """What the open rekeyed from schema 6's queue, if it did (rule 19)."""
        self.near_dropped: int | None = None
        """Entries of a near-duplicate index of an older format the open dropped (None: none was)."""
        self._psize: int = self.env.stat()["psize"]
        try:
            self._room_at_open()
            self.seq = self._check_schema(params)
            self._replay()
            self._measure_lmdb()
        except FrontierError:
            self.close()  # a refused data dir leaves no environment or write transaction behind
            raise

    @property
    def lmdb_commit_at(self) -> int:
        """Log bytes from which the next commit is an LMDB commit (rule 14; 0: every commit is one)."""
        if not self.log_bytes:
            return 0
        return max(self.log_bytes, min(int(self.log_share * self._lmdb_used), self.log_max_bytes))

    def _measure_lmdb(self) -> None:
        """Rule 14: the pages of every table, branches, leaves and overflow, in the open transaction."""
        txn = self._writer.txn
        pages = 0
        for tree in self._trees:
            st = txn.stat(tree)
            pages += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        self._lmdb_used = pages * self._psize

    @property
    def log_dropped(self) -> int:
        """Bytes of a torn log tail the open dropped (rule 7)."""
        return self.wal.dropped

    def _replay(self) -> None:
        """Rule 7."""
        txn = self._writer.txn
        self._in_lmdb = self.seq
        replay = Replay(self.wal.read(), self.seq)
        try:
            for step in replay:
                if isinstance(step, Batch):
                    self._apply_batch(txn, step)
                else:
                    self._apply(txn, [step])
        except OSError as exc:
            raise FrontierError(f"cannot read the frontier's log {self.wal.path}: {exc}") from exc
        except (ValueError, TypeError) as exc:  # wal.py rule 8: a whole entry, checksum and all, no log entry
            raise FrontierError(f"the frontier's log {self.wal.path} holds an entry, commit {replay.seq}, "
                                f"whose checksum holds but whose writes do not decode ({exc}): not a torn "
                                "tail a crash leaves; the release that wrote it may be newer than this one"
                                ) from exc
        if replay.entries:
            txn.put(b"seq", str(replay.seq).encode(), db=self.meta)
            self.seq, self.replayed = replay.seq, replay.entries
            log.info("frontier: %d commit(s) replayed from the log %s (up to commit %d)", self.replayed,
                     self.wal.path, self.seq)

    def _apply_batch(self, txn: lmdb.Transaction, batch: Batch) -> None:
        """A replay's batch of rows (rule 7, wal.py rule 11): each key's last write, a table's puts in one
        ``putmulti``; :data:`~polecat.frontier.wal.IN_ORDER` 's rows as written."""
        tables, sliced, marks = self.tables, self.written.sliced, self.written.marks
        for table, rows in batch.last.items():
            if not rows:
                continue
            if table in sliced:
                marks.update(map(_SLICE_OF_KEY, rows))
            if table == "seen":
                self.seen.put_many(rows)
                continue
            db = tables[table]
            keys, values = _in_key_order(rows)
            puts: Iterable[tuple[bytes, bytes | None]] = zip(keys, values, strict=True)
            if None in values:
                for key in compress(keys, map(is_, values, repeat(None))):
                    txn.delete(key, db=db)
                puts = compress(puts, map(is_not, values, repeat(None)))
            with txn.cursor(db=db) as cursor:
                cursor.putmulti(cast("Iterable[tuple[bytes, bytes]]", puts))  # the deletes left out
        self._apply(txn, [Put(IN_ORDER, key, value) if value is not None else Delete(IN_ORDER, key)
                          for key, value in batch.in_order])

    def _make_room(self, rewritten: Sequence[Any] = (), extra: int = 0) -> None:
        """Reserve the disk space the open transaction may still need (rule 11; with the tables an upgrade
        rewrites, rule 21); ``OSError`` if there is none, and again at every later call."""
        if self._reserve is None:
            return
        if self._no_room is not None:
            raise self._no_room
        pages = reserve.pages_bound(self.env, self._writer.txn, self._trees, rewritten)
        try:
            self._reserve.ensure(pages * self._psize + extra)
        except OSError as exc:
            self._no_room = exc
            raise

    def _room_at_open(self, rewrites: Sequence[str] = ()) -> None:
        """:meth:`_make_room` for the log's replay (its rows: at most twice its bytes in new pages) and an
        upgrade's, which rewrites the tables named in ``rewrites`` through a scratch table (rules 11 and
        21)."""
        tables = {**self.tables, "seen": self.old_seen}
        try:
            # the log's msgpack, not its compressed file's bytes (wal.py rule 12)
            self._make_room([tables[name] for name in rewrites], 2 * self.wal.bound())
        except OSError as exc:
            raise FrontierError(f"{fault_cause(exc, self.path)}: cannot reserve disk space for the frontier "
                                f"in {self.path} ({exc}): free some, or open it with frontier.writemap "
                                "off") from exc

    def _check_schema(self, params: dict[str, Any]) -> int:
        """Upgrade data written by an older release in place; refuse what cannot be read (naming the
        release that wrote it, this one, and what to do: every upgrade this release knows is done here, so
        what is left has none); record this release; return the commit counter."""
        stored = self.txn.get(b"schema", db=self.meta)
        if stored is None:
            self.txn.put(b"schema", json.dumps({"version": SCHEMA_VERSION, **params, "release": __version__})
                         .encode(), db=self.meta)
            self.txn.put(b"slices", str(SLICES).encode(), db=self.meta)
            self.commit(to_lmdb=True)
            return self.seq
        info = json.loads(bytes(stored))
        wrote = release_of(info)
        slices = int(self.txn.get(b"slices", db=self.meta) or SLICES)
        if slices != SLICES:
            raise FrontierError(mismatch(self.path, wrote, f"{slices} slices", f"{SLICES}", upgradable=False))
        upgrades = (self._upgrade_v1, self._upgrade_v2, self._upgrade_v3, self._upgrade_v4, self._upgrade_v5,
                    self._upgrade_v6)
        for step, upgrade in zip(UPGRADABLE, upgrades, strict=True):
            if info.get("version") == step:
                self._room_at_open(UPGRADE_REWRITES[step])  # rule 21: each step, after the commits before it
                info = upgrade(info)
        if info.get("version") != SCHEMA_VERSION:
            raise FrontierError(mismatch(self.path, wrote, f"schema version {info.get('version')}",
                                         f"schema {SCHEMA_VERSION}", upgradable=False))
        near = info.get("near_index")
        if isinstance(near, int) and near < params["near_index"]:
            info = self._upgrade_near(info, params["near_index"])
        for key, value in params.items():
            if info.get(key) != value:
                raise FrontierError(mismatch(self.path, wrote, f"{key}={info.get(key)!r}",
                                             f"{key}={value!r}", upgradable=False))
        if info.get("release") != __version__:  # durable with the first commit of this run
            self.txn.put(b"schema", json.dumps({**info, "release": __version__}).encode(), db=self.meta)
        return int(self.txn.get(b"seq", db=self.meta) or b"0")

    def _upgrade_v1(self, info: dict[str, Any]) -> dict[str, Any]:
        """Rewrite schema 1's keys slice-first (frontier/migrate.py), uncommitted: the upgrade to schema 3
        that follows commits both at once, so a kill -9 leaves schema 1, 3 or 4 (rule 10)."""
        scratch = self.env.open_db(b"migrate", txn=self.txn)
        report = migrate_v1(self.txn, {**self.sliced, "seen": self.old_seen}, scratch)
        self.txn.drop(scratch, delete=True)
        info = {**info, "version": 2}
        self.txn.put(b"schema", json.dumps(info).encode(), db=self.meta)
        self.txn.put(b"slices", str(SLICES).encode(), db=self.meta)
        log.info("frontier upgraded from schema 1 to 2: %s", report)
        self.upgraded = report
        return info

    def _upgrade_v2(self, info: dict[str, Any]) -> dict[str, Any]:
        """Move the LMDB seen table into one run (rule 5), in one commit: the run is durable before the
        commit that lists it and empties the table, so a kill -9 leaves schema 2 as it was (and an orphan
        run, deleted at the next open, which starts over)."""
        with self.txn.cursor(db=self.old_seen) as cur:
            moved = self.seen.load_sorted(bytes(k) for k in cur.iternext(keys=True, values=False))
        self.txn.drop(self.old_seen, delete=False)
        info = {**info, "version": 3}
        self.txn.put(b"schema", json.dumps(info).encode(), db=self.meta)
        self.seq = int(self.txn.get(b"seq", db=self.meta) or b"0")
        self.commit(to_lmdb=True)
        log.info("frontier upgraded from schema 2 to 3: %d seen URLs moved into a run", moved)
        return info

    def _upgrade_v3(self, info: dict[str, Any]) -> dict[str, Any]:
        """Pack the ``queue`` and ``urls`` values (rule 10) in one commit: a kill -9 leaves schema 3 as it
        was, and the next open starts over."""
        report = compact_v3(self.txn, self.tables, self._scratch())
        self.compacted = report
        return self._upgraded(info, 4, report)

    def _upgrade_v4(self, info: dict[str, Any]) -> dict[str, Any]:
        """Number the hosts and rekey the queue (rule 13) in one commit: a kill -9 leaves schema 4 as it
        was, and the next open starts over."""
        report, last = renumber_v4(self.txn, self.tables, self._scratch())
        self.txn.put(HOST_SEQ, str(last).encode(), db=self.meta)
        self.renumbered = report
        return self._upgraded(info, 5, report)

    def _upgrade_v5(self, info: dict[str, Any]) -> dict[str, Any]:
        """Replay schema 5's log, then move its seed-host rows into their records (rule 18), in one
        commit: a kill -9 leaves schema 5 and its log as they were, and the next open starts over."""
        self.seq = int(self.txn.get(b"seq", db=self.meta) or b"0")
        self._replay()
        report = mark_seeds_v5(self.txn, self.tables)
        self.seeds_marked = report
        return self._upgraded(info, 6, report)

    def _upgrade_v6(self, info: dict[str, Any]) -> dict[str, Any]:
        """Replay schema 6's log, then rekey the queue (rule 19), in one commit: a kill -9 leaves schema 6
        and its log as they were, and the next open starts over. Its ``hosts`` values are read as they are
        (rule 20), so none is rewritten here."""
        self.seq = int(self.txn.get(b"seq", db=self.meta) or b"0")
        self._replay()
        report = rekey_queue_v6(self.txn, self.tables, self._scratch())
        self.txn.delete(BANDS, db=self.meta)
        self.rekeyed = report
        return self._upgraded(info, 7, report)

    def _scratch(self) -> Any:
        """An empty table for an upgrade to copy through, dropped by :meth:`_upgraded`."""
        return self.env.open_db(b"migrate", txn=self.txn)

    def _upgraded(self, info: dict[str, Any], version: int, report: object) -> dict[str, Any]:
        """End an upgrade to ``version`` done in the open transaction: drop its scratch table, record the
        schema and commit, the upgrade's one commit."""
        self.txn.drop(self.env.open_db(b"migrate", txn=self.txn), delete=True)
        info = {**info, "version": version}
        self.txn.put(b"schema", json.dumps(info).encode(), db=self.meta)
        self.seq = int(self.txn.get(b"seq", db=self.meta) or b"0")
        self.commit(to_lmdb=True)
        log.info("frontier upgraded from schema %d to %d: %s", version - 1, version, report)
        return info

    def _upgrade_near(self, info: dict[str, Any], fmt: int) -> dict[str, Any]:
        """Fingerprints of another format cannot be compared with new ones: drop them and record that
        every stored page needs indexing again (:data:`NEAR_REBUILD`), in one commit: a kill -9 leaves the
        old index, or none with the rebuild to do, and the next open goes on from there."""
        old = info.get("near_index")
        self.near_dropped = self.txn.stat(self.near)["entries"]
        self.txn.drop(self.near, delete=False)
        self.txn.put(NEAR_REBUILD, b"0", db=self.meta)
        info = {**info, "near_index": fmt}
        self.txn.put(b"schema", json.dumps(info).encode(), db=self.meta)
        self.seq = int(self.txn.get(b"seq", db=self.meta) or b"0")
        self.commit(to_lmdb=True)
        log.info("near-duplicate index of format %s dropped (%d entries): the stored pages are indexed "
                 "again in format %d", old, self.near_dropped, fmt)
        return info

    def apply(self, writes: Sequence[Write]) -> None:
        """Do a decision's writes in the open transaction (polecat/writes.py rule 2); during a
        commit, in the next one (rule 3); behind the writes queued, if any (rule 15)."""
        self._take(writes, later=False)

    def apply_later(self, writes: Sequence[Write]) -> None:
        """Queue ``writes`` for :meth:`apply_step` (rule 15): in the transaction once stepped through or
        once anything reads it, whichever comes first."""
        self._take(writes, later=True)

    def _take(self, writes: Sequence[Write], *, later: bool) -> None:
        if self.log_bytes:  # with no log (rule 6) nothing is appended, so nothing is kept for it
            self._entry.add(writes)
        if self._writer.committing:
            self._backlog.extend(writes)
            return
        if self._reserve is not None and row_count(writes) >= ROOM_CHECK_WRITES:  # rule 11
            try:
                self._make_room(extra=2 * put_bytes(writes))
            except OSError as exc:
                raise storage_fault(exc, "frontier", self.path) from exc
        if later or self._queued:
            self._queued.extend(writes)
        else:
            self._apply(self._writer.txn, writes)

    def apply_step(self, most: int) -> int:
        """Apply up to ``most`` rows of the queued writes (rule 15; a :class:`PutRows` counts its rows and
        is split where the step ends); answers how many writes are left."""
        queued = self._queued
        if queued:
            if self._writer.committing:  # no step during a commit: its reads wait for it (rule 2)
                self.finish_commit()
            step: list[Write] = []
            while queued and most > 0:
                w = queued.popleft()
                if type(w) is PutRows and len(w.keys) > most:
                    queued.appendleft(PutRows(w.table, w.keys[most:], w.values[most:]))
                    w = PutRows(w.table, w.keys[:most], w.values[:most])
                step.append(w)
                most -= len(w.keys) if type(w) is PutRows else 1
            self._apply(self._writer.txn, step)
        return len(queued)

    def _apply_queued(self) -> None:
        """Every queued write applied, before a read (rule 15)."""
        queued, self._queued = self._queued, deque()
        self._apply(self._writer.txn, queued)

    def applied(self, decided: Decided[T]) -> T:
        """Apply ``decided``'s writes (:meth:`apply`) and return its answer."""
        self.apply(decided.writes)
        return decided.value

    def _apply(self, txn: lmdb.Transaction, writes: Iterable[Write]) -> None:
        tables, seen = self.tables, self.seen
        sliced, mark = self.written.sliced, self.written.marks.add
        for w in writes:
            if type(w) is Put:
                db = tables[w.table]
                if db is seen:
                    seen.put(w.key)
                else:
                    txn.put(w.key, w.value, db=db)
                if w.table in sliced:
                    mark(w.key[:PREFIX_LEN])
            elif type(w) is PutRows:  # writes.py rule 5
                db = tables[w.table]
                if db is seen:
                    seen.put_many(w.keys)
                else:
                    with txn.cursor(db=db) as cursor:
                        cursor.putmulti(zip(w.keys, w.values, strict=True))
                if w.table in sliced:
                    self.written.marks.update(map(_SLICE_OF_KEY, w.keys))
            elif isinstance(w, Delete):
                if w.table == "seen":
                    seen.delete(w.key)
                else:
                    txn.delete(w.key, db=tables[w.table])
                if w.table in sliced:
                    mark(w.key[:PREFIX_LEN])
            elif isinstance(w, DeleteSlices):
                delete_ranges(txn, self.sliced, w.slices)
                seen.delete_slices([slice_prefix(s) for s in sorted(w.slices)])
                self.written.mark_all(w.slices)

    def _current(self) -> None:
        """Before a read: the commit in flight ended (rule 2) and the queued writes applied (rule 15)."""
        if self._writer.committing:
            self.finish_commit()
        if self._queued:
            self._apply_queued()

    @property
    def txn(self) -> lmdb.Transaction:
        """The open write transaction (rule 2: waits for a commit in flight; rule 15: with the queued
        writes applied)."""
        self._current()
        return self._writer.txn

    def get(self, table: Table, key: bytes) -> bytes | None:
        """The value of ``key`` in ``table`` in the open transaction, None if absent."""
        # What :attr:`txn` does, inline: the frontier makes a few gets per URL.
        if self._writer.committing:
            self.finish_commit()
        if self._queued:
            self._apply_queued()
        if table == "seen":
            return self.seen.get(key)
        txn: Any = self._writer.txn  # not opened with ``buffers``: values are bytes
        value: bytes | None = txn.get(key, db=self.tables[table])
        return value

    def getter(self, table: Table) -> Lookup:
        """:meth:`get` of ``table`` as LMDB's own call, made once per transaction: no Python frame per
        lookup. Good until the next commit (which begins another transaction)."""
        if self._queued:  # rule 15: what the lookups will read, applied first
            self._apply_queued()
        if table == "seen":
            return self.seen.get
        lookup = self._lookups.get(table)
        if lookup is None or self._writer.committing:
            txn: Any = self.txn
            lookup = self._lookups[table] = partial(txn.get, db=self.tables[table])
        return lookup

    def items(self, table: Table, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """The records of ``table`` whose key starts with ``prefix``, in key order."""
        if table == "seen":
            self._current()
            return self.seen.items(prefix)
        return key_range(self.txn, self.tables[table], prefix)

    def items_after(self, table: Table, key: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The records of ``table`` whose key sorts after ``key``, in key order (not for ``seen``)."""
        if table == "seen":
            raise ValueError("the seen table is read by prefix only")
        return keys_after(self.txn, self.tables[table], key)

    def seen_keys(self) -> Iterator[bytes]:
        """Every key of the seen table, in key order (to rebuild the seen-set's Bloom filter from)."""
        return (key for key, _ in self.items("seen"))

    def seen_keys_after(self, seq: int) -> Iterator[bytes]:
        """The seen keys committed after the commit ``seq``, and maybe more (seenlog.py rule 7): to bring
        a Bloom snapshot of that commit up to date."""
        self._current()
        return self.seen.keys_after(seq)

    def count(self, table: Table) -> int:
        if table == "seen":
            self._current()
            return self.seen.count()
        entries: int = self.txn.stat(self.tables[table])["entries"]
        return entries

    def snapshot(self) -> Snapshot:
        """The last commit, read in a read transaction of its own until closed (a commit in flight is
        waited for, so that the LMDB tables and the seen runs are of the same commit; the log is
        committed to the LMDB first, rule 9)."""
        self.finish_commit()
        if self.wal.size and not self._entry.rows and self._no_room is None:
            self._commit_lmdb()
        committed = CommittedTables(self.env.begin(), self.tables, self.seen.view())
        if not self.wal.size:
            return committed
        return LogOverlay(committed, self.wal.rows(self._in_lmdb))

    def start_commit(self, *, to_lmdb: bool = False) -> Future[Any]:
        """Start making every write so far durable on the writer thread and return at once (rules 1 and
        6: a log append, or an LMDB commit once the log is big enough or ``to_lmdb``);
        :meth:`finish_commit` ends it (and :attr:`txn` waits for an LMDB commit). Changes counted from now
        on (:attr:`pending`) belong to the next commit."""
        if self._log_failed is not None:
            raise storage_fault(self._log_failed, "frontier", self.path)
        txn = self.txn
        try:
            self._make_room()
        except OSError as exc:
            raise storage_fault(exc, "frontier", self.path) from exc
        self.seq += 1
        txn.put(b"seq", str(self.seq).encode(), db=self.meta)
        self.pending = 0
        self.written.commit()
        lmdb_commit = self.lmdb_next(to_lmdb=to_lmdb)
        entry, self._entry = self._entry, Entry()
        if lmdb_commit:
            return self._start_lmdb_commit(txn)
        self._appending = self._writer.submit(partial(self.wal.append, self.seq, entry))
        return self._appending

    def lmdb_next(self, *, to_lmdb: bool = False) -> bool:
        """Whether a commit started now (:meth:`start_commit`, ``to_lmdb`` as given there) would be an LMDB
        commit, during which the transaction is not read (rules 2, 6 and 16), not a log append."""
        # rules 6, 14 (the log's msgpack bytes, wal.py rule 12) and 16
        return to_lmdb or self.wal.held >= self.lmdb_commit_at or self._too_big_to_log(self._entry)

    def commit_if_big(self) -> bool:
        """Rule 16: an LMDB commit now if the writes applied since the last commit have reached
        :attr:`lmdb_commit_at`; whether it made one. For a long run of writes outside a node's periodic
        commits (the open's index build), so that they are not all held in memory until the next commit."""
        if not self._too_big_to_log(self._entry):
            return False
        self.commit(to_lmdb=True)
        return True

    def _too_big_to_log(self, entry: Entry) -> bool:
        """Rule 16: ``entry`` reaches the log's size, or what an entry's length holds."""
        return entry.size >= min(self.lmdb_commit_at, MAX_ENTRY)

    def _start_lmdb_commit(self, txn: lmdb.Transaction) -> Future[lmdb.Transaction]:
        """Commit the LMDB transaction (rule 6): the seen run first, prepared and written on the writer
        thread (seenlog.py rule 2), the log emptied after."""
        self._in_lmdb = seq = self.seq
        seen, meta = self.seen, self.meta

        def seen_run() -> None:
            txn.put(MANIFEST, seen.prepare(seq), db=meta)
            seen.write_run()

        return self._writer.start_commit(seen_run, self.wal.reset)

    def _commit_lmdb(self) -> None:
        """An LMDB commit of what the log holds, with no new commit (nothing applied since the last)."""
        self._start_lmdb_commit(self.txn)
        self.finish_commit()

    @property
    def committing(self) -> bool:
        """An LMDB commit is in flight: the transaction waits for it (rules 2 and 6)."""
        return self._writer.committing

    def finish_commit(self) -> int:
        """Wait for the commit :meth:`start_commit` started; returns the commit counter it wrote. A
        failed commit raises :class:`~polecat.errors.StorageFault` (its writes are lost; the caller stops)."""
        appending, self._appending = self._appending, None
        if appending is not None:
            try:
                appending.result()
            except OSError as exc:
                self._log_failed = exc
        if self._log_failed is not None:
            raise storage_fault(self._log_failed, "frontier", self.path)
        if self._writer.committing:
            self._lookups.clear()
            try:
                self._writer.finish_commit()
            except (lmdb.Error, OSError) as exc:
                self.seen.abort()
                raise storage_fault(exc, "frontier", self.path) from exc
            self.seen.committed()
            self._measure_lmdb()
            backlog, self._backlog = self._backlog, []
            self._queued.extend(backlog)  # rule 15: stepped through by the caller, or at the next read
        return self.seq

    def commit(self, *, to_lmdb: bool = False) -> int:
        """Make every write since the last commit durable, waiting for it; returns the new commit counter.
        ``to_lmdb``: into the LMDB itself (rule 6)."""
        self.start_commit(to_lmdb=to_lmdb)
        return self.finish_commit()

    def take_written(self) -> frozenset[int]:
        """The slices written up to the last commit since the last take (tables.py rule 6), cleared."""
        return self.written.take()

    def mark_written(self, slices: Iterable[int]) -> None:
        """Mark ``slices`` written again (tables.py rule 6: a checkpoint round that did not ship them)."""
        self.written.give_back(slices)

    @property
    def next_seq(self) -> int:
        """The counter the next commit will write (Bloom snapshots are tagged with it)."""
        return self.seq + 1

    def close(self) -> None:
        """Close the environment, dropping what is uncommitted. Commits belong to the frontier (which
        writes its host records first) and the node's commit; a commit here would store a queue
        without the host counts that go with it. A commit in flight is let finish first; the log goes
        into an LMDB commit when nothing was applied since the last commit (rule 6), so a stopped node's
        LMDB holds everything (and the readers of a stopped data dir, ``polecat status``, see it)."""
        try:
            with contextlib.suppress(PolecatError, lmdb.Error, OSError):
                self.finish_commit()
                if self.wal.size and not self._entry.rows and self._no_room is None:  # rule 11
                    self._commit_lmdb()
        finally:
            try:
                self._writer.close()
            finally:
                if self._reserve is not None:
                    self._reserve.close()
                self.wal.close()
                self.seen.close()
                self.env.close()


def key_range(txn: Any, db: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The records of ``db`` whose key starts with ``prefix``, in key order (as bytes: the environment's
    transactions are not opened with ``buffers``)."""
    with txn.cursor(db=db) as cur:
        if not cur.set_range(prefix):
            return
        if not prefix:
            yield from cur
            return
        for key, value in cur:
            if not key.startswith(prefix):
                return
            yield key, value


def keys_after(txn: Any, db: Any, key: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The records of ``db`` whose key sorts after ``key``, in key order."""
    with txn.cursor(db=db) as cur:
        if not cur.set_range(key) or (cur.key() == key and not cur.next()):
            return
        yield from cur


class CommittedTables:
    """A read transaction on the last commit, read as a :class:`~polecat.frontier.tables.Snapshot`. Use
    it on the thread that opened it only (a worker thread exporting from it crashed the process at a
    later ``lmdb.open``)."""

    def __init__(self, txn: lmdb.Transaction, tables: Mapping[str, Any], seen: SeenView) -> None:
        self._txn = txn
        self._tables = tables
        self._seen = seen

    def get(self, table: Table, key: bytes) -> bytes | None:
        if table == "seen":
            return self._seen.get(key)
        return cast("bytes | None", self._txn.get(key, db=self._tables[table]))

    def items(self, table: Table, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        if table == "seen":
            return self._seen.items(prefix)
        return key_range(self._txn, self._tables[table], prefix)

    def close(self) -> None:
        self._txn.abort()
