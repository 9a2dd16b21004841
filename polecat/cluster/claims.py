"""Content claims: which fetch of a body, anywhere in the crawl, is stored in full (sans-IO).

A member that fetched a body its own store does not hold *claims* the body's content hash from the
hash's owner; the owner answers "first" (store it in full) or "copy of URL fetched at T" (store a
revisit). Decisions are plain objects; :mod:`polecat.cluster.claimlink` moves them.

Rules (this module owns them):

1. A content hash belongs to a *content slice* (:func:`content_slice`: its first four bytes modulo
   ``SLICES``), owned by the member the Ring gives that slice, as URL slices are: every member agrees on
   the owner from the member list alone.
2. The owner's :class:`ClaimBook` answers in arrival order: the first claim of a hash is "first" and
   recorded; a later claim of it from another URL is a copy of the recorded one, answered only once the
   recorded page is *durable* (its claimer reports the store flush that holds it, :meth:`ClaimBook.durable`):
   a copy is never made a revisit of a page a crash could still lose. A copy that waited ``hold``
   seconds for that report takes the record over and is answered "first" (the recorded claimer is dead
   or slow: both are stored in full, never neither). A claim of the recorded URL itself (a claim sent
   again, a refetch after a crash) is "first" again, so a repeat never turns the stored page into a
   revisit of itself.
3. The book keeps at most ``capacity`` hashes, dropping the oldest: a copy of a dropped hash is stored in
   full again (a missed collapse, never a lost page). It outlives the run (rule 8).
4. The claimer's :class:`ClaimQueue` holds each page until its answer, at most ``capacity`` pages:
   adding one to a full queue stores the oldest in full at once. A claim whose owner is this member is
   decided at once by its own book, with no message.
5. Claims go in batches, one per owner (:meth:`ClaimQueue.batches`), never one message per page. A batch
   that could not be delivered (the owner is not listening yet, or has died) is sent again after
   :data:`RETRY_AFTER`; one the owner refused (a release without claims) is given up at once. A page
   that waited ``wait`` seconds without an answer, or whose batch was refused, is stored in full and
   marked (:data:`UNANSWERED`); so are the pages still held when the member stops
   (:meth:`ClaimQueue.drain`): a page is never dropped, and the crawl never waits for an owner longer
   than ``wait``.
6. An answer that names no waiting page (late, repeated, forged seq) is ignored and counted.

7. A claimer reports to each owner, after each store flush, the hashes it stored in full on that
   owner's "first" since the flush before (:meth:`ClaimQueue.stored_first`, sent by the runner).
8. A record of the book is kept, once durable (rule 2), in the ``claims`` table of the owner's frontier
   under its content slice's prefix (:func:`book_key`): the book returns the writes
   (:meth:`ClaimBook.take_writes`, a ``Put`` when a record becomes durable, a ``Delete`` when rule 3 drops
   one), which commit with the frontier. So the book survives a restart (:meth:`ClaimBook.load` of the
   table at open, oldest first by the time each was recorded), and a content slice's records move with the
   URL slice of the same number: exported, adopted (loaded then, counted newest) and checkpointed with it,
   dropped with it (:meth:`ClaimBook.forget`). A record not yet durable is not kept: lost with the
   process, the next copy is stored in full (rule 3's missed collapse). A frontier without the table
   (0.3.0) starts with an empty book.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgpack

from polecat.frontier.slices import PREFIX_LEN, SLICES, slice_prefix
from polecat.writes import Delete, Put, Write

UNANSWERED = "unanswered"
"""The mark of a page stored in full because its claim had no answer (rule 5)."""
RETRY_AFTER = 0.05
"""Seconds before a batch that could not be delivered goes again (rule 5)."""


def content_slice(digest: bytes) -> int:
    """Rule 1."""
    return int.from_bytes(digest[:4], "big") % SLICES


def book_key(digest: bytes) -> bytes:
    """A book record's key in the frontier's ``claims`` table (rule 8): its content slice first."""
    return slice_prefix(content_slice(digest)) + digest


@dataclass(frozen=True, slots=True)
class Claim:
    """One page's claim of its body: ``seq`` is the claimer's number for it (answers name it)."""

    seq: int
    digest: bytes
    url: str
    fetched_at: float


@dataclass(frozen=True, slots=True)
class Answer:
    """The owner's answer to claim ``seq``: ``original`` None means "first: store it in full"; else the
    (URL, fetch time) of the page recorded first, of which this one is a copy."""

    seq: int
    original: tuple[str, float] | None


@dataclass(slots=True)
class _First:
    url: str
    fetched_at: float
    claimer: str
    at: float
    """When the owner recorded it (rule 8 orders a loaded book by it)."""
    durable: bool = False

    def encode(self) -> bytes:
        return bytes(msgpack.packb([self.url, self.fetched_at, self.at]))


Routed = list[tuple[str, Answer]]
"""Answers with the member each goes to."""


class ClaimBook:
    """The owner's record of the first claim of each hash (rules 2 and 3); copies wait at most ``hold``
    seconds for their original to be durable."""

    def __init__(self, capacity: int, hold: float) -> None:
        self._capacity = capacity
        self._hold = hold
        self._first: OrderedDict[bytes, _First] = OrderedDict()
        self._copies: dict[bytes, list[tuple[str, Claim, float]]] = {}
        self._writes: list[Write] = []
        self.copies = 0
        """Claims answered as copies."""
        self.unreadable = 0
        """Kept records that did not decode (rule 8): skipped, logged by the runner."""

    def take_writes(self) -> list[Write]:
        """The writes that keep the book (rule 8) since the last call, in order."""
        out, self._writes = self._writes, []
        return out

    def load(self, records: Iterable[tuple[bytes, bytes]]) -> int:
        """Rule 8: add kept records (``claims`` table key and value), oldest first; a hash recorded here
        already keeps its record. Returns how many were added; one that does not decode is skipped and
        counted (:attr:`unreadable`)."""
        got: list[tuple[float, bytes, _First]] = []
        for key, value in records:
            digest = bytes(key[PREFIX_LEN:])
            try:
                url, fetched_at, at = msgpack.unpackb(value)
                first = _First(str(url), float(fetched_at), "", float(at), durable=True)
            except (ValueError, TypeError, msgpack.UnpackException):
                self.unreadable += 1
                continue
            if len(digest) == 32 and digest not in self._first:
                got.append((first.at, digest, first))
        got.sort(key=lambda g: g[0])
        for _, digest, first in got:
            self._first[digest] = first
        self._trim()
        return len(got)

    def forget(self, slices: Iterable[int]) -> int:
        """Drop the records of content ``slices`` (handed over: their rows leave with the URL slices,
        rule 8); returns how many."""
        gone = frozenset(slices)
        doomed = [d for d in self._first if content_slice(d) in gone]
        for d in doomed:
            del self._first[d]
        return len(doomed)

    def decide(self, claimer: str, claims: Iterable[Claim], now: float) -> Routed:
        """Answer ``claimer``'s claims in order (rule 2); a copy of a page not yet durable waits."""
        out: Routed = []
        for c in claims:
            first = self._first.get(c.digest)
            if first is None:
                self._record(c, claimer, now)
            elif first.url == c.url:
                first.claimer = claimer
            elif first.durable:
                self.copies += 1
                out.append((claimer, Answer(c.seq, (first.url, first.fetched_at))))
                continue
            else:
                self._copies.setdefault(c.digest, []).append((claimer, c, now))
                continue
            out.append((claimer, Answer(c.seq, None)))
        return out

    def _record(self, c: Claim, claimer: str, now: float) -> None:
        self._first[c.digest] = _First(c.url, c.fetched_at, claimer, now)
        self._trim()

    def _trim(self) -> None:
        while len(self._first) > self._capacity:  # copies waiting on the forgotten one take over by expiry
            digest, first = self._first.popitem(last=False)
            if first.durable:  # kept (rule 8)
                self._writes.append(Delete("claims", book_key(digest)))

    def durable(self, claimer: str, digests: Iterable[bytes]) -> Routed:
        """``claimer`` flushed these first pages (rule 7): the copies waiting on them are answered."""
        out: Routed = []
        for d in digests:
            first = self._first.get(d)
            if first is None or first.claimer != claimer:
                continue
            if not first.durable:
                first.durable = True
                self._writes.append(Put("claims", book_key(d), first.encode()))
            for who, c, _ in self._copies.pop(d, ()):
                self.copies += 1
                out.append((who, Answer(c.seq, (first.url, first.fetched_at))))
        return out

    def expired(self, now: float) -> Routed:
        """Copies that waited ``hold`` seconds: the first of each hash takes the record over (rule 2)."""
        out: Routed = []
        for d in [d for d, waiting in self._copies.items() if now - waiting[0][2] >= self._hold]:
            who, c, _ = self._copies[d].pop(0)
            if not self._copies[d]:
                del self._copies[d]
            self._first[d] = _First(c.url, c.fetched_at, who, now)
            out.append((who, Answer(c.seq, None)))
        return out

    def waiting(self) -> int:
        """Copies waiting for their original to be durable."""
        return sum(map(len, self._copies.values()))

    def __len__(self) -> int:
        return len(self._first)


@dataclass(slots=True)
class _Waiting:
    claim: Claim
    owner: str
    since: float
    sent: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to do with one held page: store it in full (``original`` None; ``marked`` when no answer
    decided it, rule 5) or as a copy of ``original``."""

    seq: int
    original: tuple[str, float] | None
    marked: bool = False


class ClaimQueue:
    """The claimer's pages waiting for answers (rules 4-6). ``owner_of(slice)`` is the Ring's owner of a
    content slice; ``book`` answers the claims this member owns."""

    def __init__(self, self_id: str, owner_of: Callable[[int], str], book: ClaimBook, *, capacity: int,
                 wait: float) -> None:
        self.self_id = self_id
        self._owner_of = owner_of
        self._book = book
        self._capacity = capacity
        self._wait = wait
        self._waiting: OrderedDict[int, _Waiting] = OrderedDict()
        self._retry_at: dict[str, float] = {}
        self._stored: dict[str, list[bytes]] = {}
        """Owner -> hashes stored in full on its "first" since the last flush (rule 7)."""
        self._seq = 0
        self.sent = 0
        """Claims sent to other members."""
        self.unanswered = 0
        """Pages stored in full because no answer came (rule 5), including overflow (rule 4)."""
        self.stray = 0
        """Answers that named no waiting page (rule 6)."""

    def set_owner(self, owner_of: Callable[[int], str]) -> None:
        """Route later claims by a new Ring (a member joined or left)."""
        self._owner_of = owner_of

    def add(self, digest: bytes, url: str, fetched_at: float, now: float) -> tuple[int, list[Outcome]]:
        """Hold a page: its seq, and what is decided now (its own answer when this member owns the hash,
        rule 4; the oldest page, stored in full, when the queue was full)."""
        self._seq += 1
        claim = Claim(self._seq, digest, url, fetched_at)
        owner = self._owner_of(content_slice(digest))
        out = []
        if owner == self.self_id:
            decided = self._book.decide(self.self_id, [claim], now)
            if decided:
                return claim.seq, [self._outcome(owner, claim, decided[0][1].original)]
        if len(self._waiting) >= self._capacity:
            seq, _ = self._waiting.popitem(last=False)
            self.unanswered += 1
            out.append(Outcome(seq, None, marked=True))
        # This member's own claims are never sent: they wait on its book like another member's copies.
        self._waiting[claim.seq] = _Waiting(claim, owner, now, sent=owner == self.self_id)
        return claim.seq, out

    def _outcome(self, owner: str, claim: Claim, original: tuple[str, float] | None) -> Outcome:
        if original is None:
            self._stored.setdefault(owner, []).append(claim.digest)
        return Outcome(claim.seq, original)

    def stored_first(self) -> dict[str, list[bytes]]:
        """Rule 7: by owner, the hashes stored in full on its "first" since the last call; call it right
        before a store flush and report them once the flush is done."""
        out, self._stored = self._stored, {}
        return out

    def decide(self, claimer: str, claims: Iterable[Claim], now: float) -> Routed:
        """Answer ``claimer``'s claims of the hashes this member owns (rule 2)."""
        return self._book.decide(claimer, claims, now)

    def durable(self, claimer: str, digests: Iterable[bytes]) -> Routed:
        """``claimer`` reports its first pages durable (rule 7)."""
        return self._book.durable(claimer, digests)

    def holding(self) -> int:
        """Other members' copies this member's book holds (rule 2)."""
        return self._book.waiting()

    def held_copies(self, now: float) -> Routed:
        """Copies the book stopped holding (rule 2)."""
        return self._book.expired(now)

    def pending(self) -> int:
        """Pages held, sent or not."""
        return len(self._waiting)

    def batches(self, now: float) -> dict[str, list[Claim]]:
        """Every claim not yet sent, by owner, but for owners to retry later (rule 5); they count as sent
        from now."""
        out: dict[str, list[Claim]] = {}
        for w in self._waiting.values():
            if not w.sent and self._retry_at.get(w.owner, 0.0) <= now:
                w.sent = True
                out.setdefault(w.owner, []).append(w.claim)
                self.sent += 1
        return out

    def answered(self, answers: Iterable[Answer]) -> list[Outcome]:
        """The held pages these answers decide (rule 6 for the rest)."""
        out = []
        for a in answers:
            w = self._waiting.pop(a.seq, None)
            if w is None:
                self.stray += 1
                continue
            out.append(self._outcome(w.owner, w.claim, a.original))
        return out

    def undelivered(self, owner: str, claims: Iterable[Claim], now: float) -> None:
        """A batch did not reach ``owner``: its claims go again after :data:`RETRY_AFTER` (rule 5)."""
        self._retry_at[owner] = now + RETRY_AFTER
        for c in claims:
            w = self._waiting.get(c.seq)
            if w is not None:
                w.sent = False

    def refused(self, claims: Iterable[Claim]) -> list[Outcome]:
        """The held pages of a batch the owner refused: stored in full, marked (rule 5)."""
        return self._give_up(c.seq for c in claims)

    def expired(self, now: float) -> list[Outcome]:
        """The held pages that waited ``wait`` seconds (rule 5)."""
        return self._give_up([seq for seq, w in self._waiting.items() if now - w.since >= self._wait])

    def drain(self) -> list[Outcome]:
        """Every held page, stored in full and marked: the member stops (rule 5)."""
        return self._give_up(list(self._waiting))

    def _give_up(self, seqs: Iterable[int]) -> list[Outcome]:
        out = []
        for seq in seqs:
            if self._waiting.pop(seq, None) is not None:
                self.unanswered += 1
                out.append(Outcome(seq, None, marked=True))
        return out
