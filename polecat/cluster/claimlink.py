"""Runs one member's content claims (polecat/cluster/claims.py) over the members' transport.

The pipeline hands over each page it would store in full (:meth:`ContentClaims.claim`); the page waits
here for its answer and is then stored, in full or as a revisit of the first copy (its
``WARC-Refers-To-Target-URI`` is the original's URL; ``store export`` of the whole collection adds the
original's date and digest, polecat/store/export.py rule 6). :meth:`run` sends the claims in batches per
owner and the answers this member owes, a tick after the first is ready; :meth:`receive` takes both
kinds of frame from the socket the hand-off uses. :meth:`claim` returns a future done once the page is
in the store: the node completes the page's lease only then (polecat/node/lease_runner.py), so the
frontier never records as done a page the store does not hold, and a crash while a page is held fetches
it again. A page waits at most ``wait`` seconds (claims rule 5).

The book is kept in the frontier's ``claims`` table (claims rule 8): :meth:`ContentClaims.bind` loads it,
every change of it is applied to the frontier's open transaction at once (it commits with the frontier),
and the member tells the book of the content slices it adopts or releases (:meth:`ContentClaims.adopted`,
:meth:`ContentClaims.released`). Claims that come before the book is loaded are answered "busy", so
their claimer sends them again (claims rule 5) rather than hear "first" from an empty book.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.batch import HandoffError, Signer, Verifier
from polecat.cluster.claims import (
    RETRY_AFTER,
    UNANSWERED,
    Answer,
    Claim,
    ClaimBook,
    ClaimQueue,
    Outcome,
    Routed,
)
from polecat.cluster.claimwire import decode, encode_answers, encode_claims, encode_durable, is_claim_frame
from polecat.cluster.receiver import HandoffReceiver, Reply
from polecat.frontier.slices import slice_prefix
from polecat.store.base import FetchRecord, PageStore
from polecat.writes import Table, Write

if TYPE_CHECKING:  # aiohttp's transport is a cluster node's; workers speak unixwire (tests/test_startup.py)
    from polecat.cluster.transport import Transport

log = logging.getLogger("polecat.claims")

CLAIM_HEADER = "X-Polecat-Claim"
"""Added to the headers of a page stored in full because its claim had no answer (claims rule 5)."""
TICK = 0.005
"""Seconds a ready claim waits for others to share its batch: batches, not a message per page."""


@dataclass(frozen=True, slots=True)
class ClaimStats:
    claims_sent: int
    copies: int
    """Pages stored as revisits of a copy another member (or this one) stored first."""
    unanswered: int
    """Pages stored in full, marked, because no answer came in time (owner unreachable, slow, a commit)."""
    stray_answers: int
    bad_frames: int


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

    async def receive(self, data: bytes) -> Reply:
        if self._claims is not None and is_claim_frame(data):
            return await self._claims.receive(data)
        return await self._handoff.receive(data)


class ContentClaims:
    """One member's claims: see the module docstring. ``owner_of`` maps a content slice to its owner
    (the Ring); ``addresses`` the members' transport addresses."""

    def __init__(self, self_id: str, owner_of: Callable[[int], str], transport: Transport,
                 addresses: Mapping[str, str], *, capacity: int, wait: float, book_capacity: int,
                 sign: Signer | None = None, verify: Verifier | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._self_id = self_id
        self._transport = transport
        self._addresses = dict(addresses)
        self._sign = sign
        self._verify = verify
        self._clock = clock
        # The book holds a copy half the claimer's wait, so that the claimer hears "first" before it gives up.
        self.book = ClaimBook(book_capacity, wait / 2)
        self.queue = ClaimQueue(self_id, owner_of, self.book, capacity=capacity, wait=wait)
        self._held: dict[int, tuple[FetchRecord, bytes, asyncio.Future[None]]] = {}
        self._owed: dict[str, list[Answer]] = {}
        self._store: PageStore | None = None
        self._tables: BookTables | None = None
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.copies = 0
        self.bad_frames = 0

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        """The members' addresses from a new member list (an etcd cluster's membership changes)."""
        self._addresses = dict(addresses)

    def bind(self, store: PageStore, tables: BookTables | None = None) -> None:
        """The store the held pages go to, and the tables the book is kept in (claims rule 8; None: the
        book lives for the run), loaded now."""
        self._tables = tables
        if tables is not None:
            loaded = self.book.load(tables.items("claims"))
            if loaded:
                log.info("content claims: %d hashes recorded before this start", loaded)
            self._keep()
        self._store = store

    def _keep(self) -> None:
        """Apply the book's writes (claims rule 8): they commit with the frontier."""
        writes = self.book.take_writes()
        if self._tables is not None and writes:
            self._tables.apply(writes)
            self._tables.pending += 1  # an owner with nothing else to do commits them too
        if self.book.unreadable:
            log.warning("content claims: %d kept records did not decode (skipped: their copies are "
                        "stored in full)", self.book.unreadable)
            self.book.unreadable = 0

    def adopted(self, slices: Iterable[int]) -> None:
        """The member adopted these slices (their ``claims`` rows are applied): the book takes their
        records (claims rule 8)."""
        if self._tables is not None:
            tables = self._tables
            self.book.load(kv for s in sorted(slices) for kv in tables.items("claims", slice_prefix(s)))
            self._keep()

    def released(self, slices: Iterable[int]) -> None:
        """The member released these slices (their rows are deleted): the book forgets their records."""
        self.book.forget(slices)

    def claim(self, record: FetchRecord, body: bytes) -> asyncio.Future[None]:
        """Hold a page the pipeline would store in full until its hash's owner answers; the future is
        done once the page is stored."""
        seq, outcomes = self.queue.add(record.content_hash, record.url, record.fetched_at, self._clock.wall())
        stored = asyncio.get_running_loop().create_future()
        self._held[seq] = (record, body, stored)
        self._keep()
        self._apply(outcomes)
        if self.queue.pending():
            self._wake.set()
        return stored

    def _apply(self, outcomes: list[Outcome]) -> None:
        if not outcomes:
            return
        assert self._store is not None, "ContentClaims.bind(store) first: only a bound member holds pages"
        for o in outcomes:
            record, body, stored = self._held.pop(o.seq)
            try:
                if o.original is None:
                    if o.marked:
                        record = replace(record, headers=(*record.headers, (CLAIM_HEADER, UNANSWERED)))
                    self._store.put(record, body)
                else:
                    self.copies += 1
                    self._store.put(replace(record, duplicate_of=o.original[0], kind="revisit"), None)
            except Exception as exc:  # the store's fault is the page's lease's to report (it fails the node)
                if not stored.done():
                    stored.set_exception(exc)
                continue
            if not stored.done():  # a lease cancelled meanwhile (an abort) no longer waits
                stored.set_result(None)

    async def receive(self, data: bytes) -> Reply:
        """A frame of claims (answered by this member's book, the answers sent back by :meth:`run`) or of
        answers (the held pages they decide are stored)."""
        try:
            frame = decode(data, self._verify)
        except HandoffError as exc:
            self.bad_frames += 1
            return Reply("bad", detail=str(exc))
        if frame.claims:
            if self._store is None:  # the book is not loaded yet: the claimer sends them again
                return Reply("busy", detail="content claims: the book is not open yet")
            self._route(self.queue.decide(frame.sender, frame.claims, self._clock.wall()))
        if frame.durable:
            self._route(self.queue.durable(frame.sender, frame.durable))
        if frame.answers:
            self._apply(self.queue.answered(frame.answers))
        return Reply("ok")

    def _route(self, answers: Routed) -> None:
        """Answers of this member's book: its own applied now, the others' sent by :meth:`run`; the
        book's writes applied (claims rule 8)."""
        self._keep()
        mine = []
        for claimer, answer in answers:
            if claimer == self._self_id:
                mine.append(answer)
            else:
                self._owed.setdefault(claimer, []).append(answer)
                self._wake.set()
        self._apply(self.queue.answered(mine))

    def before_flush(self) -> dict[str, list[bytes]]:
        """The first pages the coming store flush makes durable, by owner (claims rule 7)."""
        return self.queue.stored_first()

    def after_flush(self, stored: dict[str, list[bytes]]) -> None:
        """Report them to their owners now that the flush is done (claims rule 7); undelivered reports
        only make copies wait their hold out and be stored in full."""
        for owner, digests in stored.items():
            if owner == self._self_id:
                self._route(self.queue.durable(owner, digests))
            elif (address := self._addresses.get(owner)) is not None:
                self._spawn(self._post(address, encode_durable(self._self_id, digests, self._sign)))

    async def run(self) -> None:
        """Send claims and answers as they become ready, and give up on claims that waited too long."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RETRY_AFTER if self.queue.pending() or
                                       self.queue.holding() else None)
            self._wake.clear()
            await asyncio.sleep(TICK)
            self._send_ready()
            now = self._clock.wall()
            self._route(self.queue.held_copies(now))
            self._apply(self.queue.expired(now))

    def _send_ready(self) -> None:
        for owner, claims in self.queue.batches(self._clock.wall()).items():
            self._spawn(self._send_claims(owner, claims))
        owed, self._owed = self._owed, {}
        for peer, answers in owed.items():
            self._spawn(self._send_answers(peer, answers))

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
        log.warning("content claims refused by %s (%s: %s): %d pages stored in full", owner, reply.status,
                    reply.detail, len(claims))
        self._apply(self.queue.refused(claims))

    async def _send_answers(self, peer: str, answers: list[Answer]) -> None:
        address = self._addresses.get(peer)
        if address is not None:  # undelivered answers: the claimer stores its pages in full (rule 5)
            await self._post(address, encode_answers(self._self_id, answers, self._sign))

    async def _post(self, address: str, data: bytes) -> None:
        await self._transport.post(address, data)

    async def close(self) -> None:
        """Stop sending; a page still held (its lease was cancelled) is stored in full, marked."""
        self._apply(self.queue.drain())
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stats(self) -> ClaimStats:
        q = self.queue
        return ClaimStats(q.sent, self.copies, q.unanswered, q.stray, self.bad_frames)
