"""Runs one member's content claims (polecat/cluster/claims.py) over the members' transport.

The pipeline hands over each page it would store in full (:meth:`ContentClaims.claim`); the page waits
here for its answer and is then stored, in full or as a revisit of the first copy (the original's URL,
fetch time and, in a SHA-256 store, payload digest, polecat/store/segstore.py rule 6; ``store export``
of the whole collection adds what a store could not write, polecat/store/export.py rule 6). :meth:`run`
sends, a tick after the first is ready, one frame to each peer with everything this member owes it: its
claims, the answers to its claims, the reports of its first pages made durable, and the near-duplicate
sections (claimwire.py kind 4; to a peer that takes kinds 1-3 alone, those sections as kinds 1-3);
:meth:`receive` takes both kinds of frame from the socket the hand-off uses. :meth:`claim` returns a
future done once the page is in the store: the node completes the page's lease only then
(polecat/node/lease_runner.py), so the frontier never records as done a page the store does not hold,
and a crash while a page is held fetches it again. A page waits at most ``wait`` seconds (claims rule
5).

The books are kept in the frontier's ``claims`` table (claims rules 8 and 13): :meth:`ContentClaims.bind`
loads them, every change of them is applied to the frontier's open transaction at once (it commits with
the frontier), and the member tells the books of the slices it adopts or releases
(:meth:`ContentClaims.adopted`, :meth:`ContentClaims.released`). Claims that come before the book is
loaded are answered "busy", so their claimer sends them again (claims rule 5) rather than hear "first"
from an empty book.

With ``near`` (``dedup.near_duplicates`` "delta" or "drop"), a page with a fingerprint is first claimed
by its band keys (claims rules 9-12): a near copy of a page another member stored is written as one
process writes it, deposited with its own body as a delta ("drop": the revisit alone) in the store that
holds the original (received here by :meth:`receive`, acknowledged after the store flush that holds it,
:meth:`after_flush`); with no near match the page is stored in full (claims rule 11: its exact copies are
near copies at distance 0 while it is a base of the near books), and claimed by its hash only where a band
owner did not answer or took no near claim. A page waits at most ``wait`` seconds per step (near claim,
then exact claim or deposit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.batch import MAX_BATCH_BYTES, HandoffError, Signer, Verifier
from polecat.cluster.claims import (
    RETRY_AFTER,
    UNANSWERED,
    Answer,
    Claim,
    ClaimBook,
    ClaimQueue,
    NearAnswer,
    NearBook,
    NearOutcome,
    NearQueue,
    NearRouted,
    Original,
    Outcome,
    Routed,
    exact_copy,
    near_copy,
    overdue,
)
from polecat.cluster.claimwire import (
    ClaimFrame,
    decode,
    encode_answers,
    encode_claims,
    encode_durable,
    encode_near,
    is_claim_frame,
)
from polecat.cluster.receiver import HandoffReceiver, Reply
from polecat.dedup.minhash import Fingerprint
from polecat.errors import StoreError
from polecat.frontier.slices import slice_prefix
from polecat.store.base import FetchRecord, PageStore, hasher
from polecat.writes import Table, Write

if TYPE_CHECKING:  # aiohttp's transport is a cluster node's; workers speak unixwire (tests/test_startup.py)
    from polecat.cluster.transport import Transport

log = logging.getLogger("polecat.claims")
Deposit = tuple[int, FetchRecord, bytes | None]
"""A deposit's seq, the near copy's record and its own body (None for an exact copy; claims rule 12)."""
_A = TypeVar("_A", Answer, NearAnswer)
_Again = tuple[Fingerprint, tuple[Original, ...]]
"""What a near-claimed page is claimed again with: its fingerprint, the originals of its refused deposits
(claims rule 17)."""

CLAIM_HEADER = "X-Polecat-Claim"
"""Added to the headers of a page stored in full because its claim had no answer (claims rule 5)."""
TICK = 0.01
"""Seconds a ready claim waits for others to share its batch: batches, not a message per page. Between
workers, 10 ms: a frame costs both ends more than the books' work for a page (the socket, a task, the
codec), and 5 ms sent 0.34-0.64 frames a page (benchmarks/README.md "Issue 35: claim cost cut in the
steady state": fewer with 10 ms in one pair of crawls, not in another); the settle (:data:`SETTLE` of a
1 s wait) is 20 ms either way, so no more settling bases are scanned a claim."""
NODE_TICK = 0.02
""":data:`TICK` between nodes, chosen when each frame was a signed HTTP request (a socket frame between
workers): at a node's usual 50-150 pages/s a 5 ms tick sent about one frame a page to each peer
(benchmarks/README.md, "claim cost"). Frames now go on a stream where the peer offers one
(polecat/cluster/claimstream.py, about a third of a request's CPU); the tick was not measured again.
The wait costs a page only its time held, not its host's next request (polecat/frontier/leasing.py
rule 7)."""
DEPOSIT_BYTES = MAX_BATCH_BYTES // 2
"""Most body bytes of deposits in one frame; a larger near copy is stored in full by its fetcher."""
SETTLE = 0.02
"""Of ``wait``: how long a near claim with no match settles before it is answered "none" (claims rule
10): long enough for the claims of an earlier near copy from another member to arrive (a batch's tick and
its trip, hence at least two ticks), short against the wait; none for a member alone (claims rule 15)."""


@dataclass(frozen=True, slots=True)
class ClaimStats:
    claims_sent: int
    copies: int
    """Pages stored as revisits of a copy another member (or this one) stored first."""
    unanswered: int
    """Pages stored in full, marked, because no answer came in time (owner unreachable, slow, a commit)."""
    stray_answers: int
    bad_frames: int
    near_copies: int = 0
    """Of ``copies``, near copies of a page another member (or this one) stored first (claims rule 12)."""
    deposits_refused: int = 0
    """Near copies whose original's holder did not store them (no base there, or no answer): stored in
    full here."""

    def events(self) -> tuple[tuple[str, int], ...]:
        """The counts by name, as ``/metrics`` gives them (``polecat_cluster_claims_total``)."""
        return (("sent", self.claims_sent), ("copies", self.copies), ("near_copies", self.near_copies),
                ("unanswered", self.unanswered), ("stray_answers", self.stray_answers),
                ("bad_frames", self.bad_frames), ("deposits_refused", self.deposits_refused))


class BookTables(Protocol):
    """Where the book is kept (claims rule 8): the frontier's tables
    (:class:`~polecat.frontier.db.FrontierDB`)."""

    pending: int
    """Changes not yet committed: the node's periodic commit runs while it is not 0."""

    def apply(self, writes: Sequence[Write]) -> None: ...

    def items(self, table: Table, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]: ...


class Receivers:
    """The receiving end of one socket that carries hand-off batches and claim frames (told apart by
    their magic, polecat/cluster/claimwire.py)."""

    def __init__(self, handoff: HandoffReceiver, claims: ContentClaims | None) -> None:
        self._handoff = handoff
        self._claims = claims

    def answer(self, data: bytes) -> Reply | None:
        """A claim frame's reply, at once (polecat/cluster/unixwire.py rule 4); None for a batch."""
        if self._claims is not None and is_claim_frame(data):
            return self._claims.answer(data)
        return None

    async def receive(self, data: bytes) -> Reply:
        reply = self.answer(data)
        return reply if reply is not None else await self._handoff.receive(data)


class ContentClaims:
    """One member's claims: see the module docstring. ``owner_of`` maps a content slice to its owner
    (the Ring); ``addresses`` the members' transport addresses."""

    def __init__(self, self_id: str, owner_of: Callable[[int], str], transport: Transport,
                 addresses: Mapping[str, str], *, capacity: int, wait: float, book_capacity: int,
                 sign: Signer | None = None, verify: Verifier | None = None, near: str = "full",
                 near_distance: int = 4, tick: float = TICK, clock: Clock = SYSTEM_CLOCK) -> None:
        self._self_id = self_id
        self._tick = tick
        """Seconds a ready claim waits for others to share its frame (:data:`TICK`, :data:`NODE_TICK`)."""
        self._transport = transport
        self._addresses = dict(addresses)
        self._sign = sign
        self._verify = verify
        self._clock = clock
        # The book holds a copy half the claimer's wait, so that the claimer hears "first" before it gives up.
        self.book = ClaimBook(book_capacity, wait / 2)
        self.queue = ClaimQueue(self_id, owner_of, self.book, capacity=capacity, wait=wait)
        self._wait = wait
        self._held: dict[int, tuple[FetchRecord, bytes, asyncio.Future[None]]] = {}
        self._owed: dict[str, list[Answer]] = {}
        self._durable_owed: dict[str, list[bytes]] = {}
        """Owner -> first pages made durable (claims rule 7), sent with the next tick's frame."""
        self._empty = ClaimFrame(self_id)
        """A frame with nothing to send (compared with each tick's frames)."""
        self._separate: set[str] = set()
        """Peers that take exact claims, answers and reports as frames of kinds 1-3 only (0.3.0, or a
        member with near claims off: it refused a kind 4 frame; or one that sent those kinds itself)."""
        self._stopping = False
        """Set by :meth:`stopping`: pages are stored in full, marked, unclaimed."""
        self._holding: dict[bytes, int] = {}
        """Hash -> pages of that body held here for claims or a deposit (:meth:`_holds`)."""
        self._near_keep = near
        book = NearBook(book_capacity, wait / 2, near_distance, settle=max(wait * SETTLE, 2 * tick),
                        keep=lambda band: owner_of(band) == self_id)
        self.near = None if near == "full" else NearQueue(self_id, owner_of, book, wait=wait)
        self._tell_alone()
        self._near_held: dict[int, tuple[FetchRecord, bytes, asyncio.Future[None], _Again]] = {}
        """Pages held for their near claims, by seq, with what a refused deposit claims again with (claims
        rule 17): one entry a page."""
        self._deposit_fps: dict[int, _Again] = {}
        """The same, by deposit seq, the deposit's original last (claims rules 12 and 17)."""
        self._near_bases: dict[int, tuple[tuple[str, ...], bool]] = {}
        """Exact claims of pages no near book matched, by seq: their band owners, and whether one did
        not answer (claims rule 11)."""
        self._owed_near: dict[str, list[NearAnswer]] = {}
        self._withdraw_owed: dict[str, list[bytes]] = {}
        self._near_stored: dict[str, list[bytes]] = {}
        """Owner -> bases stored in full since the last flush (claims rule 10), reported with rule 7's."""
        self._deposits: dict[int, tuple[FetchRecord, bytes, asyncio.Future[None], float]] = {}
        """Deposits sent, by seq: the page as fetched, its body, its future, when sent (claims rule 12)."""
        self._deposit_seq = 0
        self._deposit_out: dict[str, list[tuple[int, FetchRecord, bytes | None]]] = {}
        """Deposits to send, by holder."""
        self._parked: dict[bytes, list[tuple[str, int, FetchRecord, bytes | None]]] = {}
        """Deposits taken here whose base is a page this member still holds, by its hash (claims rule 12)."""
        self._deposited: dict[str, list[tuple[int, bool]]] = {}
        """Deposits stored here since the last flush, by depositor, acknowledged after the next one."""
        self._deposited_flushing: dict[str, list[tuple[int, bool]]] = {}
        self._owed_deposited: dict[str, list[tuple[int, bool]]] = {}
        self.near_copies = 0
        self.deposits_refused = 0
        self.flush_soon: Callable[[], None] = lambda: None
        """Asks the node for a store flush soon (a deposit waits for one; set by polecat/node/commits.py rule
        8)."""
        self._store: PageStore | None = None
        self._tables: BookTables | None = None
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.copies = 0
        self.bad_frames = 0

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        """The members' addresses from a new member list (an etcd cluster's membership changes)."""
        self._addresses = dict(addresses)
        self._tell_alone()

    def _tell_alone(self) -> None:
        """A member alone in the member list answers its own near claims without a settle (claims rule
        15): a lone node pays for no window that no other member's claim can use."""
        if self.near is not None:
            self.near.book.alone = self._addresses.keys() == {self._self_id}

    def bind(self, store: PageStore, tables: BookTables | None = None) -> None:
        """The store the held pages go to, and the tables the book is kept in (claims rule 8; None: the
        book lives for the run), loaded now."""
        self._tables = tables
        if tables is not None:
            loaded = self.book.load(tables.items("claims"))
            bases = self.near.book.load(tables.items("claims")) if self.near is not None else 0
            if loaded or bases:
                log.info("content claims: %d hashes and %d near bases recorded before this start", loaded,
                         bases)
            self._keep()
        self._store = store

    def _keep(self) -> None:
        """Apply the book's writes (claims rule 8): they commit with the frontier."""
        writes = self.book.take_writes() + (self.near.book.take_writes() if self.near is not None else [])
        if self._tables is not None and writes:
            self._tables.apply(writes)
            self._tables.pending += 1  # an owner with nothing else to do commits them too
        for book in (self.book, self.near.book if self.near is not None else None):
            if book is not None and book.unreadable:
                log.warning("content claims: %d kept records did not decode (skipped: their copies are "
                            "stored in full)", book.unreadable)
                book.unreadable = 0

    def adopted(self, slices: Iterable[int]) -> None:
        """The member adopted these slices (their ``claims`` rows are applied): the book takes their
        records (claims rule 8)."""
        if self._tables is not None:
            tables = self._tables
            rows = [kv for s in sorted(slices) for kv in tables.items("claims", slice_prefix(s))]
            self.book.load(rows)
            if self.near is not None:  # claims rule 13
                self.near.book.load(rows)
            self._keep()

    def released(self, slices: Iterable[int]) -> None:
        """The member released these slices (their rows are deleted): the books forget their records."""
        ids = frozenset(slices)
        self.book.forget(ids)
        if self.near is not None:
            self.near.book.forget(ids)

    def claim(self, record: FetchRecord, body: bytes, fp: Fingerprint | None = None) -> asyncio.Future[None]:
        """Hold a page the pipeline would store in full until its claims are answered (by its band keys'
        owners first when it has a fingerprint ``fp`` and near claims are on, then by its hash's owner);
        the future is done once the page is stored."""
        stored = asyncio.get_running_loop().create_future()
        if self._stopping:
            self._put(record, body, stored, marked=True)
            return stored
        if fp is not None and self.near is not None:
            self._claim_near(record, body, fp, stored)
        else:
            self._claim_exact(record, body, stored)
        self._wake.set()
        return stored

    def _claim_near(self, record: FetchRecord, body: bytes, fp: Fingerprint, stored: asyncio.Future[None],
                    refused: tuple[Original, ...] = ()) -> None:
        """The near claim of a page (claims rule 11); ``refused``: again, after deposits against these
        originals were refused (claims rule 17)."""
        assert self.near is not None
        now = self._clock.wall()
        seq, outcomes = self.near.add(record.content_hash, record.url, record.fetched_at, fp, now, refused)
        self._near_held[seq] = (record, body, stored, (fp, refused))
        self._hold(record.content_hash, 1)
        self._apply_near(outcomes)

    def _claim_exact(self, record: FetchRecord, body: bytes, stored: asyncio.Future[None],
                     near: tuple[tuple[str, ...], bool] | None = None) -> None:
        """The exact claim of a page; ``near``: the band owners that recorded it as a base, and whether
        one did not answer (claims rule 11: a page no near book matched is claimed by its hash too)."""
        seq, outcomes = self.queue.add(record.content_hash, record.url, record.fetched_at, self._clock.wall())
        self._held[seq] = (record, body, stored)
        self._hold(record.content_hash, 1)
        if near is not None:
            self._near_bases[seq] = near
        self._keep()
        self._apply(outcomes)

    def _apply(self, outcomes: list[Outcome]) -> None:
        for o in outcomes:
            record, body, stored = self._held.pop(o.seq)
            self._hold(record.content_hash, -1)
            near = self._near_bases.pop(o.seq, None)
            if o.original is None:
                self._first(record, body, stored, () if near is None else near[0],
                            marked=o.marked or (near is not None and near[1]))
            else:
                if near is not None:  # not stored in full: no base (claims rule 10's withdrawal)
                    self._withdraw(near[0], record.content_hash)
                self.copies += 1
                self._put(exact_copy(record, *o.original), None, stored)

    def _first(self, record: FetchRecord, body: bytes, stored: asyncio.Future[None], owners: tuple[str, ...],
               *, marked: bool = False) -> None:
        """Store a first page in full; the band ``owners`` that recorded it as a base learn after the flush
        that it is durable (claims rule 11)."""
        for owner in owners:
            self._near_stored.setdefault(owner, []).append(record.content_hash)
        self._put(record, body, stored, marked=marked)

    def _put(self, record: FetchRecord, body: bytes | None, stored: asyncio.Future[None], *,
             marked: bool = False) -> None:
        assert self._store is not None, "ContentClaims.bind(store) first: only a bound member holds pages"
        if marked:
            record = replace(record, headers=(*record.headers, (CLAIM_HEADER, UNANSWERED)))
        try:
            self._store.put(record, body)
        except Exception as exc:  # the store's fault is the page's lease's to report (it fails the node)
            if not stored.done():
                stored.set_exception(exc)
            return
        finally:
            self._unpark(record.own_hash)
        if not stored.done():  # a lease cancelled meanwhile (an abort) no longer waits
            stored.set_result(None)

    def _apply_near(self, outcomes: list[NearOutcome]) -> None:
        """Claims rules 11 and 12."""
        for o in outcomes:
            record, body, stored, again = self._near_held.pop(o.seq)
            self._hold(record.content_hash, -1)
            orig = o.original
            if orig is None and o.exact:  # an older member took no near claim: the hash's owner decides
                self._withdraw(o.owners, record.content_hash)
                self._claim_exact(record, body, stored)
                continue
            if orig is None:
                self._no_match(record, body, stored, o)
                continue
            # An exact copy of a base of this member's has that base's key: nothing of its own to withdraw.
            if orig.holder != self._self_id or orig.digest != record.content_hash:
                self._withdraw(o.owners, record.content_hash)
            copy = near_copy(record, orig)
            # An exact copy, or any with "drop": a revisit alone, deposited all the same (claims rule 12)
            own = None if orig.digest == record.content_hash or self._near_keep == "drop" else body
            if orig.holder != self._self_id:
                self._deposit(orig, copy, record, body, own, stored, again)
            elif self._stored_here(orig.digest):
                self._copied(copy, own, stored)
            elif self._closes_cycle(record.url, orig):  # claims rule 18: its own twin waits on it
                self._no_match(record, body, stored, o)
            elif self._holds(orig.digest):  # its base is a page held here: stored once that one is
                parked = (self._self_id, self._new_deposit(record, body, stored, again, orig), copy, own)
                self._parked.setdefault(orig.digest, []).append(parked)
            else:  # the base went from this store (a repair): nothing to make the delta against
                self._put(record, body, stored)

    def _no_match(self, record: FetchRecord, body: bytes, stored: asyncio.Future[None],
                  o: NearOutcome) -> None:
        """A page no near book matched (claims rule 11): stored in full once every band owner answered (its
        exact copies meet it there, at distance 0); claimed by its hash when one did not (the hash's owner
        may know a copy that band's owner would have matched)."""
        if o.marked:
            self._claim_exact(record, body, stored, (o.owners, True))
        else:
            self._first(record, body, stored, o.owners)

    def _closes_cycle(self, url: str, orig: Original) -> bool:
        """Whether ``orig``, a page of this member's, waits parked here as a copy of the page ``url``,
        itself or through other pages parked on its hash (claims rule 18)."""
        if orig.holder != self._self_id:
            return False
        waits_for = {r.url: r.duplicate_of for sender, _, r, _ in self._parked.get(orig.digest, ())
                     if sender == self._self_id}
        at: str | None = orig.url
        while at in waits_for:  # popped: a cycle that does not pass through ``url`` ends the walk
            at = waits_for.pop(at)
            if at == url:
                return True
        return False

    def _stored_here(self, digest: bytes) -> bool:
        assert self._store is not None, "ContentClaims.bind(store) first: only a bound member holds pages"
        return self._store.has(digest)

    def _copied(self, copy: FetchRecord, body: bytes | None, stored: asyncio.Future[None]) -> None:
        self.copies += 1
        self.near_copies += 1
        self._put(copy, body, stored)

    def _withdraw(self, owners: tuple[str, ...], digest: bytes) -> None:
        for owner in owners:
            if owner == self._self_id and self.near is not None:
                self._route_near(self.near.book.withdrawn(owner, [digest], self._clock.wall()))
            else:
                self._withdraw_owed.setdefault(owner, []).append(digest)
                self._wake.set()

    def _deposit(self, orig: Original, copy: FetchRecord, record: FetchRecord, body: bytes, own: bytes | None,
                 stored: asyncio.Future[None], again: _Again) -> None:
        """Claims rule 12: the near copy (its own body ``own``; None for an exact copy) goes to the store
        that holds its original ``orig``; ``record`` and ``body`` are the page as fetched, stored here if
        not."""
        holder = orig.holder
        if holder not in self._addresses or len(own or b"") > DEPOSIT_BYTES:  # a revisit alone always fits
            self.deposits_refused += 1
            self._put(record, body, stored)
            return
        seq = self._new_deposit(record, body, stored, again, orig)
        self._deposit_out.setdefault(holder, []).append((seq, copy, own))
        self._wake.set()

    def _new_deposit(self, record: FetchRecord, body: bytes, stored: asyncio.Future[None],
                     again: _Again, orig: Original) -> int:
        """Hold the page as fetched while its deposit against ``orig`` is out (claims rule 12), with what
        it claims again with if refused; returns the deposit's seq."""
        self._deposit_seq += 1
        self._deposits[self._deposit_seq] = (record, body, stored, self._clock.wall())
        self._deposit_fps[self._deposit_seq] = (again[0], (*again[1], orig))
        self._hold(record.content_hash, 1)
        return self._deposit_seq

    def _deposit_done(self, seq: int, stored_there: bool | None) -> None:
        """A deposit acknowledged (True), refused (False) or unanswered (None: stored here, marked)."""
        held = self._deposits.pop(seq, None)
        if held is None:
            self.queue.stray += 1
            return
        record, body, stored, _ = held
        again = self._deposit_fps.pop(seq)
        self._hold(record.content_hash, -1)
        if stored_there:
            self.copies += 1
            self.near_copies += 1
            self._unpark(record.content_hash)  # not a base here: deposits waiting on it are refused
            if not stored.done():
                stored.set_result(None)
        elif stored_there is False and self.near is not None and _new_refusal(again[1]):
            # Refused: its original was not stored in full after all (it became a copy itself). Claimed
            # again, the page meets the original's own original (claims rules 12 and 17).
            self.deposits_refused += 1
            self._claim_near(record, body, again[0], stored, again[1])
            self._wake.set()
        else:
            self.deposits_refused += 1
            self._put(record, body, stored, marked=stored_there is None)

    def _take_deposits(self, sender: str, deposits: tuple[Deposit, ...]) -> None:
        """Store near copies deposited by ``sender`` against bases this store holds (claims rule 12)."""
        assert self._store is not None, "ContentClaims.bind(store) first: only a bound member holds pages"
        digest = hasher(self._store.hash_name)
        for seq, record, body in deposits:
            base = record.content_hash
            if body is not None and digest(body) != record.own_hash:
                log.warning("deposit of %s from %s refused: its body does not hash to its own hash",
                            record.url, sender)
                self._owed_deposited.setdefault(sender, []).append((seq, False))
                self._wake.set()
            elif not self._store.has(base) and self._holds(base):
                self._parked.setdefault(base, []).append((sender, seq, record, body))
            else:
                self._store_deposit(sender, seq, record, body)

    def _holds(self, digest: bytes) -> bool:
        """Whether a page of this body waits here for its claims or its deposit."""
        return digest in self._holding

    def _hold(self, digest: bytes, n: int) -> None:
        """A page of body ``digest`` came to be held here (``n`` 1) or left (-1)."""
        left = self._holding.get(digest, 0) + n
        if left:
            self._holding[digest] = left
        else:
            del self._holding[digest]

    def _unpark(self, digest: bytes) -> None:
        """The page of body ``digest`` was stored (in full, or not): the deposits parked on it follow."""
        for sender, seq, record, body in self._parked.pop(digest, ()):
            self._store_deposit(sender, seq, record, body)

    def _store_deposit(self, sender: str, seq: int, record: FetchRecord, body: bytes | None) -> None:
        """Store a deposit against its base if this store holds it (acknowledged after the next flush),
        else refuse it now."""
        assert self._store is not None
        if sender == self._self_id and seq not in self._deposits:  # given up: stored in full (claims rule 12)
            self.queue.stray += 1
            return
        ok = self._store.has(record.content_hash)
        if ok:
            try:
                self._store.put(record, body)
            except StoreError as exc:
                log.warning("deposit of %s from %s not stored: %s", record.url, sender, exc)
                ok = False
        if sender == self._self_id:  # this member's own copy: its lease's commit follows the store flush
            self._deposit_done(seq, ok)
        elif ok:
            self._deposited.setdefault(sender, []).append((seq, True))
            self.flush_soon()
        else:
            self._owed_deposited.setdefault(sender, []).append((seq, False))
            self._wake.set()

    async def receive(self, data: bytes) -> Reply:
        """:meth:`answer`, for a transport that awaits its receiver."""
        return self.answer(data)

    def answer(self, data: bytes) -> Reply:
        """A frame of claims (answered by this member's book, the answers sent back by :meth:`run`) or of
        answers (the held pages they decide are stored): decided at once, nothing awaited."""
        try:
            frame = decode(data, self._verify)
        except HandoffError as exc:
            self.bad_frames += 1
            return Reply("bad", detail=str(exc))
        if self.near is None and (frame.near or frame.near_answers or frame.withdrawn or frame.deposits):
            self.bad_frames += 1
            return Reply("bad", detail="near-duplicate claims are off here")
        if frame.separate:  # it speaks kinds 1-3 (0.3.0), or takes this member for one that does
            self._separate.add(frame.sender)
        if frame.claims:
            if self._store is None:  # the book is not loaded yet: the claimer sends them again
                return Reply("busy", detail="content claims: the book is not open yet")
            self._route(self.queue.decide(frame.sender, frame.claims, self._clock.wall()))
        if frame.durable:
            self._route(self.queue.durable(frame.sender, frame.durable))
            if self.near is not None:
                self._route_near(self.near.book.durable(frame.sender, frame.durable))
        if frame.answers:
            self._apply(self.queue.answered(frame.answers))
        self._receive_near(frame)
        return Reply("ok")

    def _receive_near(self, frame: ClaimFrame) -> None:
        if self.near is None:
            return
        now = self._clock.wall()
        if frame.near:
            self._route_near(self.near.book.decide(frame.sender, frame.near, now))
            self._wake.set()  # bases that settle are answered by run()
        if frame.withdrawn:
            self._route_near(self.near.book.withdrawn(frame.sender, frame.withdrawn, now))
        if frame.near_answers:
            self._apply_near(self.near.answered(frame.sender, frame.near_answers))
        if frame.deposits:
            self._take_deposits(frame.sender, frame.deposits)
        for seq, stored_there in frame.deposited:
            self._deposit_done(seq, stored_there)

    def _route_near(self, answers: NearRouted) -> None:
        """Near answers of this member's book: its own applied now, the others' sent by :meth:`run`."""
        assert self.near is not None
        self._keep()  # a base made durable is kept (claims rule 13)
        self._apply_near(self.near.answered(self._self_id, self._mine(answers, self._owed_near)))

    def _route(self, answers: Routed) -> None:
        """Answers of this member's book: its own applied now, the others' sent by :meth:`run`; the
        book's writes applied (claims rule 8)."""
        self._keep()
        self._apply(self.queue.answered(self._mine(answers, self._owed)))

    def _mine(self, answers: list[tuple[str, _A]], owed: dict[str, list[_A]]) -> list[_A]:
        """This member's own answers; the others' owed to their claimers."""
        mine = []
        for claimer, answer in answers:
            if claimer == self._self_id:
                mine.append(answer)
            else:
                owed.setdefault(claimer, []).append(answer)
                self._wake.set()
        return mine

    def flush_wanted(self) -> bool:
        """Whether deposits stored here wait for a store flush to be acknowledged (commits rule 8)."""
        return bool(self._deposited)

    def before_flush(self) -> dict[str, list[bytes]]:
        """The first pages (and near bases) the coming store flush makes durable, by owner (claims rules
        7 and 9); the deposits it makes durable are kept for :meth:`after_flush`."""
        stored = self.queue.stored_first()
        for owner, digests in self._near_stored.items():
            # an owner of both the hash and a band of a page hears of it once
            stored[owner] = list(dict.fromkeys([*stored.get(owner, ()), *digests]))
        self._near_stored = {}
        self._deposited_flushing, self._deposited = self._deposited, {}
        return stored

    def after_flush(self, stored: dict[str, list[bytes]]) -> None:
        """Report them to their owners now that the flush is done (claims rule 7), and acknowledge the
        deposits it holds (claims rule 12); undelivered reports only make copies wait their hold out and be
        stored in full."""
        for owner, digests in stored.items():
            if owner == self._self_id:
                self._route(self.queue.durable(owner, digests))
                if self.near is not None:
                    self._route_near(self.near.book.durable(owner, digests))
            else:  # in the next tick's frame to the owner
                self._durable_owed.setdefault(owner, []).extend(digests)
                self._wake.set()
        for sender, acks in self._deposited_flushing.items():
            self._owed_deposited.setdefault(sender, []).extend(acks)
            self._wake.set()
        self._deposited_flushing = {}

    async def run(self) -> None:
        """Send claims and answers as they become ready, and give up on claims that waited too long."""
        while True:
            timeout = RETRY_AFTER if self._busy() else None
            due = self.near.book.settle_due() if self.near is not None else None
            if due is not None:  # a base's "none" goes when it settled, not at the next poll
                timeout = max(0.0, min(timeout or RETRY_AFTER, due - self._clock.wall()))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):  # no task a turn, as wait_for makes on 3.11
                    await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(self._tick)
            self._send_ready()
            now = self._clock.wall()
            self._route(self.queue.held_copies(now))
            self._apply(self.queue.expired(now))
            if self.near is not None:
                self._route_near(self.near.book.expired(now))
                self._route_near(self.near.book.settled(now))
                self._apply_near(self.near.expired(now))
            self._deposits_overdue(now)

    def _deposits_overdue(self, now: float) -> None:
        """Deposits unacknowledged ``wait`` seconds after they were sent: stored here in full, marked (claims
        rule 12). Sent in seq order, the oldest first."""
        for seq in overdue(self._deposits, itemgetter(3), now, self._wait):
            self._deposit_done(seq, None)

    def _busy(self) -> bool:
        near = self.near is not None and (self.near.pending() > 0 or self.near.book.waiting() > 0)
        return bool(self.queue.pending() or self.queue.holding() or near or self._deposits)

    def _send_ready(self) -> None:
        """One frame per peer for everything it is owed: claims, answers, reports of durable first pages,
        near claims, their answers, withdrawn bases, deposits and their answers (claimwire.py kind 4);
        deposits past :data:`DEPOSIT_BYTES` a frame go in frames of their own. To a peer in
        :attr:`_separate` the exact sections go as kinds 1-3."""
        now = self._clock.wall()
        claims = self.queue.batches(now)
        near = self.near.batches(now) if self.near is not None else {}
        owed = (claims, self._owed, self._durable_owed, near, self._owed_near, self._withdraw_owed,
                self._deposit_out, self._owed_deposited)
        for peer in set().union(*owed):
            chunks = _chunks(self._deposit_out.get(peer, []))
            f = ClaimFrame(
                self._self_id, claims=tuple(claims.get(peer, ())), answers=tuple(self._owed.get(peer, ())),
                durable=tuple(self._durable_owed.get(peer, ())), near=tuple(near.get(peer, ())),
                near_answers=tuple(self._owed_near.get(peer, ())),
                withdrawn=tuple(self._withdraw_owed.get(peer, ())), deposits=tuple(chunks[0]),
                deposited=tuple(self._owed_deposited.get(peer, ())))
            if peer in self._separate:
                f = self._send_separate(peer, f)
            if f != self._empty:
                self._spawn(self._send_frame(peer, f))
            for chunk in chunks[1:]:
                self._spawn(self._send_frame(peer, ClaimFrame(self._self_id, deposits=tuple(chunk))))
        self._owed, self._durable_owed = {}, {}
        self._owed_near, self._withdraw_owed, self._deposit_out, self._owed_deposited = {}, {}, {}, {}

    def _send_separate(self, peer: str, f: ClaimFrame) -> ClaimFrame:
        """Send ``f``'s exact sections as frames of kinds 1-3; the rest of ``f`` is left to send."""
        if f.claims:
            self._spawn(self._send_claims(peer, list(f.claims)))
        if f.answers:
            self._spawn(self._send_answers(peer, list(f.answers)))
        if f.durable and (address := self._addresses.get(peer)) is not None:
            self._spawn(self._post(address, encode_durable(self._self_id, f.durable, self._sign)))
        return replace(f, claims=(), answers=(), durable=())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_claims(self, owner: str, claims: list[Claim]) -> None:
        address = self._addresses.get(owner)
        reply = Reply("error", detail=f"no address for {owner}") if address is None else \
            await self._transport.post(address, encode_claims(self._self_id, claims, self._sign))
        if reply.status in ("ok", "busy"):
            if reply.status == "busy":  # not a claims receiver's answer; try again as for an error
                self.queue.undelivered(owner, claims, self._clock.wall())
            return
        if reply.status == "error":  # not listening (yet), or gone: again shortly, until ``wait`` passes
            self.queue.undelivered(owner, claims, self._clock.wall())
            self._wake.set()
            return
        self._refused(owner, reply, claims)

    def _refused(self, owner: str, reply: Reply, claims: Sequence[Claim]) -> None:
        log.warning("content claims refused by %s (%s: %s): %d pages stored in full", owner, reply.status,
                    reply.detail, len(claims))
        self._apply(self.queue.refused(claims))

    async def _send_frame(self, peer: str, f: ClaimFrame) -> None:
        """Claims not delivered go again (claims rule 5); answers, reports, withdrawn bases and deposit
        answers that do not arrive leave their claimers to their waits (rules 5 and 11)."""
        address = self._addresses.get(peer)
        reply = Reply("error", detail=f"no address for {peer}") if address is None else \
            await self._transport.post(address, encode_near(f, self._sign))
        if reply.status == "ok":
            return
        now = self._clock.wall()
        for seq, _, _ in f.deposits:  # not delivered: stored here in full, marked
            self._deposit_done(seq, None)
        if reply.status in ("error", "busy"):  # again shortly, until ``wait`` passes (claims rule 5)
            self.queue.undelivered(peer, f.claims, now)
            if self.near is not None:
                self.near.undelivered(peer, f.near, now)
            self._wake.set()
            return
        if reply.status == "bad" and peer not in self._separate and (f.claims or f.answers or f.durable):
            # 0.3.0 (no kind 4) or near claims off there: the exact sections again, as kinds 1-3
            self._separate.add(peer)
            self.queue.undelivered(peer, f.claims, now)
            self._owed.setdefault(peer, []).extend(f.answers)
            self._durable_owed.setdefault(peer, []).extend(f.durable)
            self._wake.set()
        elif f.claims:
            self._refused(peer, reply, f.claims)
        if self.near is not None:  # a member without near claims (an older release): "none" (claims rule 11)
            self._apply_near(self.near.refused(peer, f.near))

    async def _send_answers(self, peer: str, answers: list[Answer]) -> None:
        address = self._addresses.get(peer)
        if address is not None:  # undelivered answers: the claimer stores its pages in full (rule 5)
            await self._post(address, encode_answers(self._self_id, answers, self._sign))

    async def _post(self, address: str, data: bytes) -> None:
        await self._transport.post(address, data)

    def stopping(self) -> None:
        """The member stops (claims rule 5): every page held is stored in full, marked, now, and so is
        every page handed over from now on, so that no lease waits out its claims (its peers may have
        stopped listening) past the stop's grace and is fetched again after a restart. Claims of others
        are still answered until :meth:`close`."""
        self._stopping = True
        if self.near is not None:
            for seq in self.near.drain():
                record, body, stored, _ = self._near_held.pop(seq)
                self._hold(record.content_hash, -1)
                self._put(record, body, stored, marked=True)
        for seq in list(self._deposits):
            self._deposit_done(seq, None)
        self._apply(self.queue.drain())

    async def close(self) -> None:
        """Stop sending; a page still held (its lease was cancelled) is stored in full, marked."""
        self.stopping()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stats(self) -> ClaimStats:
        q = self.queue
        near_sent = self.near.sent if self.near is not None else 0
        near_unanswered = self.near.unanswered if self.near is not None else 0
        return ClaimStats(q.sent + near_sent, self.copies, q.unanswered + near_unanswered, q.stray,
                          self.bad_frames, self.near_copies, self.deposits_refused)


def _new_refusal(refused: tuple[Original, ...]) -> bool:
    """Whether the last of a page's refused originals is none of the earlier ones (claims rule 17)."""
    return all((o.holder, o.digest) != (refused[-1].holder, refused[-1].digest) for o in refused[:-1])


def _chunks(deposits: list[Deposit]) -> list[list[Deposit]]:
    """Deposits in frames of at most :data:`DEPOSIT_BYTES` body bytes (at least one chunk)."""
    out: list[list[Deposit]] = [[]]
    size = 0
    for d in deposits:
        n = len(d[2] or b"")
        if out[-1] and size + n > DEPOSIT_BYTES:
            out.append([])
            size = 0
        out[-1].append(d)
        size += n
    return out
