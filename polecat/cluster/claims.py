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
5. Claims go in batches, one per owner (:meth:`ClaimQueue.batches`), never one message per page; a
   tick's batches are made from the held pages with a claim not yet sent, kept apart (the pages sent
   wait for answers and are not read again each tick), in the order the pages came. A batch
   that could not be delivered (the owner is not listening yet, or has died) is sent again after
   :data:`RETRY_AFTER`; one the owner refused (a release without claims) is given up at once. A page
   that waited ``wait`` seconds without an answer, or whose batch was refused, is stored in full and
   marked (:data:`UNANSWERED`); so are the pages still held when the member begins to stop
   (:meth:`ClaimQueue.drain`), and those it fetches while it stops, unclaimed (its peers may have stopped
   listening, and a lease that outlives the stop's grace is fetched again): a page is never dropped, and
   the crawl never waits for an owner longer than ``wait``.
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

Near-duplicates (rules 9-12) are claimed before the exact hash, where one process would look its own
near-duplicate index up (polecat/node/pipeline.py):

9. A fingerprint's 4 band keys (polecat/dedup/nearindex.py) belong to *band slices*
   (:func:`band_slice`), owned by the Ring like content slices. A page with text that its member's store
   and near-duplicate index do not match (``dedup.near_duplicates`` not "full") is claimed by its
   fingerprint from each distinct owner of its band keys (:class:`NearQueue`). Two fingerprints within
   the index distance share a band (nearindex.py's pigeonhole), so two near copies meet at that band's
   owner, wherever they were fetched: the candidates are those one process's index would give.
10. The owner's :class:`NearBook` answers in arrival order with one process's test (index distance at
   most ``dedup.minhash_distance`` bits, verification sketch within ``VERIFY_MAX_DISTANCE`` bins, the
   closest first) among the bases it recorded that were *fetched before* the claim (by fetch time, then
   URL): a claim with no such match is recorded as a base under its 4 band keys and answered "none" once
   it *settled* (``settle`` seconds after its arrival; an earlier near copy that arrives meanwhile, e.g.
   from a member whose claims travel while this member's own were decided at once, and shares a band
   with it (rule 9's candidates), makes it that one's copy instead, and takes its place as the base); a
   match is answered "near copy of (hash, URL, time, holder)" at once, its deposit (rule 12) being what
   waits for the base's fate at its holder. Only an earlier fetch is an original (but rule 14), so two
   owners that saw two pages in opposite orders never make each the copy of the other (and neither
   stored in full). A base its claimer did not store in
   full (it was an exact copy) is *withdrawn*, and a copy waiting on it (rule 14) that waited ``hold``
   seconds drops it (a dead or slow claimer): the copies waiting on it are decided again. The book
   keeps at most ``capacity`` bases, the oldest dropped, and at most :data:`BAND_BASES` under one band
   key (the oldest base of that band dropped: bases that share a band without being near each other are
   rare, a band crowded by them costs its owner a scan per claim).
11. The claimer's :class:`NearQueue` holds a page until each owner answered (an owner that refused the
    claim, e.g. a release without near claims, counts as "none", and the page with no match then goes
    on to its exact claim), at most ``wait`` seconds; the closest match of the answers wins (sketch
    bins, then index bits, then the earliest fetch). An exact copy of a page with a fingerprint is its
    near copy at distance 0, found the same way while its original is in a near book. With none, every
    owner having answered, the page is stored in full with no exact claim: a later exact copy meets it at
    those owners as a near copy, their books kept as the exact book is (rule 13), and one process's store
    finds it no other way. Where an owner did not answer in time or refused the claim, the page goes on to
    its exact claim (rules 1-7): the hash's owner may know a copy that owner's book would have matched.
    (Claimed by its hash as well, such pages cost 0.6 items a page more at 4 workers and gave no copy the
    near claims had not found: benchmarks/README.md "Issue 35: no exact claim after the near claims".)
    Stored in full (marked, rule 5, when a near or the exact owner did not answer), the band owners learn
    it (the rule 7 report after the flush); not (an exact copy), it is withdrawn from them (rule 10).
12. A near copy becomes the record one process writes (:func:`near_copy`): a revisit of the original
    carrying its own hash. With ``near_duplicates = "delta"`` it goes to the original's holder (the member
    that stored it in full) in a *deposit*, with its own body to be stored there as a delta against the
    base (polecat/store/delta.py; an exact copy goes alone: the holder writes its revisit whole, with the
    original's date and digest, as one process does); the holder stores it only with the base in its
    store (a deposit whose base is a page the holder still holds for its own claims waits for that page:
    stored in full, the deposit is stored; not, it is refused), and acknowledges it after the store
    flush that made both durable, so the claimer completes the lease only then (which is why rule 10
    answers a copy at once). A deposit refused (its base was not stored in full after all: an early
    answer named a page that became a copy itself) is claimed again by its fingerprint (rule 17): the
    withdrawn base gone, it meets that page's own original. A deposit refused against a base refused
    before, too big for one frame, or unacknowledged within ``wait`` is stored in full by the claimer
    (marked, rule 5, when unacknowledged; both may then hold it, never neither; but a member's own
    deposit, parked on a page it holds, is dropped once given up: its store would hold two records of one
    fetch). With "drop" a near copy is deposited as an exact copy is, its revisit alone (its own body
    dropped): the same wait for the base's fate, so the copy is never a revisit of a page not stored in
    full, and rule 14 holds for "drop" as for "delta".
13. A base, once durable, is kept as rule 8 keeps an exact record: a row of the ``claims`` table under
    the prefix of each band slice of its band keys that this member owns (:func:`near_key`: longer than
    an exact record's key, which :meth:`ClaimBook.load` skips), its fingerprint and fetch in the value;
    dropped (rule 10's bounds, a withdrawal), its rows are deleted. So the near book is loaded at open
    (:meth:`NearBook.load`, oldest fetch first) and its rows move with the URL slice of the same number
    (a bundle, a resize, a checkpoint round, a restore: the ``claims`` table's path, left out for a wire-2
    reader as the exact records are); a base whose every kept band slice was released is forgotten
    (:meth:`NearBook.forget`). A base not yet durable is not kept (its copies, after a restart, are
    stored in full: a missed collapse).
14. A near claim with no earlier base (rule 10) but a later one near it already answered "none" (its
    settle passed before this claim arrived: claims of a loaded member travel longer than the settle) is
    not a base: its later match may be stored in full already. It waits for that base: stored in full
    and durable (the rule 7 report), it is answered a near copy of that later fetch; withdrawn or silent
    past ``hold``, decided again (rule 10). No wait the other way closes a cycle: a copy of an earlier
    base is answered at once (rule 10; "delta" and "drop" both deposit, rule 12), so two pages never wait
    on each other (this one here for the later, the later at another owner for this one). A base
    answered "none" that an earlier claim turns into a copy while still settling, or afterwards by a
    withdrawal, is decided again the same way, so at one owner two near copies are never both "none".
    The claimer takes a later match over an earlier one (rule 11's order): only a base stored in full is
    one.
15. An owner alone in the member list (:attr:`NearBook.alone`) answers a near claim with no match "none"
    at once, without rule 10's settle: no claim of another member can arrive to make it a copy. A member
    that joins meanwhile is rule 14's case (its claim of an earlier near copy meets this base as a later
    one answered "none").
16. A claim this member's own book decides at once (:meth:`NearBook.own`, rule 11) may decide other
    members' claims too (a settling base of theirs made its copy, rule 10): those answers go to their
    claimers with the book's next settled ones (:meth:`NearBook.settled`), never to this claimer's pages.
17. A page claimed again after a refused deposit (rule 12) names every base its deposits were refused
    against (holder and hash), none stored in full by its holder: this member's own book withdraws them
    before deciding, and an answer of another owner that names one (the holder's withdrawal has not
    reached that owner yet: it travels apart from the refusal) is not taken, the claim is asked again
    with the next batch. So the page meets the refused bases' own original, as one process's index (which
    never held a refused page) gives it; its deposit against a base refused for the first time (that base
    too became a copy after it was answered) claims it again the same way, each time against one more
    base, so the claims end. Past half its ``wait`` the page takes such an answer (the withdrawal was
    lost, or a base is stored in full after all and its holder's store lost it, a repair): refused again,
    it is stored in full (rule 12), as one process stores a page whose near original left its store.
18. Two pages of one body fetched by one member meet at each band owner under one base (rule 10: the
    same body from the same claimer is a copy of the base, whichever was fetched first), so the copy is
    the one that arrived there second; owners that took the two claims in opposite orders (a member's
    frames to one owner travel on several connections, polecat/cluster/unixwire.py rule 1) answer each
    page a copy of the other. Both were parked on their own hash (rule 12), neither stored, until one was
    given up after ``wait`` and stored in full, marked (benchmarks/README.md "Issue 35: a near base held
    past its wait (4 workers)"). The claimer, which holds both, breaks the cycle when the answer that
    closes it comes (polecat/cluster/claimlink.py): that page is not parked on a page that waits for it
    (directly or through other pages parked on the hash) but is taken as a page no near book matched
    (rule 11: stored in full, or claimed by its hash where an owner did not answer), and the pages parked
    on it follow once it is stored (in full; or not, and they are refused, rule 12).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter, itemgetter
from typing import Any, Generic, TypeVar

import msgpack

from polecat import native
from polecat.dedup.minhash import VERIFY_BYTES, VERIFY_MAX_DISTANCE, Fingerprint, verify_distance
from polecat.dedup.nearindex import BANDS, band_keys
from polecat.frontier.slices import PREFIX_LEN, SLICES, slice_prefix
from polecat.store.base import OWN_HASH_HEADER, REFERS_DATE_HEADER, FetchRecord
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


EXACT_KEY_LEN = PREFIX_LEN + 32
"""The length of an exact record's key (rule 8); a near base's is longer (rule 13)."""


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
            if len(key) != EXACT_KEY_LEN:  # a near book's row (rule 13)
                continue
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
                out.append((claimer, _make(Answer, c.seq, (first.url, first.fetched_at))))
                continue
            else:
                self._copies.setdefault(c.digest, []).append((claimer, c, now))
                continue
            out.append((claimer, _make(Answer, c.seq, None)))
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
                out.append((who, _make(Answer, c.seq, (first.url, first.fetched_at))))
        return out

    def expired(self, now: float) -> Routed:
        """Copies that waited ``hold`` seconds: the first of each hash takes the record over (rule 2)."""
        out: Routed = []
        for d in [d for d, waiting in self._copies.items() if now - waiting[0][2] >= self._hold]:
            who, c, _ = self._copies[d].pop(0)
            if not self._copies[d]:
                del self._copies[d]
            self._first[d] = _First(c.url, c.fetched_at, who, now)
            out.append((who, _make(Answer, c.seq, None)))
        return out

    def waiting(self) -> int:
        """Copies waiting for their original to be durable."""
        return sum(map(len, self._copies.values()))

    def unflushed(self) -> int:
        """First pages recorded whose flush is not reported yet (rule 7): not kept (rule 8), so not handed
        over with their slices. A pass over the book: for tests and tools, not the crawl's path."""
        return sum(1 for first in self._first.values() if not first.durable)

    def __len__(self) -> int:
        return len(self._first)


@dataclass(slots=True)
class _Waiting:
    claim: Claim
    owner: str
    since: float


@dataclass(slots=True)
class Outcome:
    """What to do with one held page: store it in full (``original`` None; ``marked`` when no answer
    decided it, rule 5) or as a copy of ``original``. Not frozen: one is made a page and read once by the
    runner, and a frozen dataclass sets each field through ``object.__setattr__`` (benchmarks/README.md
    "Claim cost: the books' records")."""

    seq: int
    original: tuple[str, float] | None
    marked: bool = False


W = TypeVar("W", "_Waiting", "_NearWaiting")
B = TypeVar("B", "ClaimBook", "NearBook")


class _HeldPages(Generic[W, B]):
    """What the exact and the near claim queues keep alike: the claimer's pages held for answers, by seq
    in the order they came (rules 5 and 11 give up the oldest first), the owners whose batches go again
    later (rule 5), and the counters. ``owner_of(slice)`` is the Ring's owner of a content slice;
    ``book`` answers the claims this member owns."""

    def __init__(self, self_id: str, owner_of: Callable[[int], str], book: B, *, wait: float) -> None:
        self.self_id = self_id
        self._owner_of = owner_of
        self._book: B = book
        self._wait = wait
        self._waiting: OrderedDict[int, W] = OrderedDict()
        self._unsent: dict[int, None] = {}
        """The seqs of the held pages with a claim not yet sent (rule 5): a tick's batches read these, not
        every held page."""
        self._retry_at: dict[str, float] = {}
        self._seq = 0
        self.sent = 0
        """Claims sent to other members (near claims: one per page and owner)."""
        self.unanswered = 0
        """Pages decided without an owner's answer (rules 5 and 11; an exact queue's overflow: rule 4)."""
        self.stray = 0
        """Answers that named no waiting page, or (near claims) came from a member not asked (rule 6)."""

    def pending(self) -> int:
        """Pages held, sent or not."""
        return len(self._waiting)

    def _retry_later(self, owner: str, now: float) -> None:
        """A batch did not reach ``owner``: nothing goes to it before :data:`RETRY_AFTER` (rule 5)."""
        self._retry_at[owner] = now + RETRY_AFTER

    def _overdue(self, now: float) -> list[int]:
        """The seqs of the held pages that waited ``wait`` seconds (rules 5 and 11)."""
        return overdue(self._waiting, attrgetter("since"), now, self._wait)

    def _unsent_held(self) -> Iterator[tuple[int, W]]:
        """The held pages with a claim not yet sent, in the order they came (rule 5: seqs grow with it; a
        claim not delivered is unsent again, behind later ones in :attr:`_unsent`); a page no longer
        held leaves the index here."""
        for seq in sorted(self._unsent):
            w = self._waiting.get(seq)
            if w is None:
                del self._unsent[seq]
            else:
                yield seq, w


K = TypeVar("K")
V = TypeVar("V")


def overdue(held: Mapping[K, V], since: Callable[[V], float], now: float, wait: float) -> list[K]:
    """The keys of ``held`` whose time (``since`` of their value) is ``wait`` seconds or more before
    ``now``. ``held`` is in the order its items came, the oldest first (held pages, settling bases,
    deposits), so the scan stops at the first still in time, not at the end of a long queue each tick."""
    out = []
    for key, value in held.items():
        if now - since(value) < wait:
            break
        out.append(key)
    return out


class ClaimQueue(_HeldPages[_Waiting, ClaimBook]):
    """The claimer's pages waiting for their exact claims' answers (rules 4-6)."""

    def __init__(self, self_id: str, owner_of: Callable[[int], str], book: ClaimBook, *, capacity: int,
                 wait: float) -> None:
        super().__init__(self_id, owner_of, book, wait=wait)
        self._capacity = capacity
        self._stored: dict[str, list[bytes]] = {}
        """Owner -> hashes stored in full on its "first" since the last flush (rule 7)."""

    def add(self, digest: bytes, url: str, fetched_at: float, now: float) -> tuple[int, list[Outcome]]:
        """Hold a page: its seq, and what is decided now (its own answer when this member owns the hash,
        rule 4; the oldest page, stored in full, when the queue was full)."""
        self._seq += 1
        claim = _make(Claim, self._seq, digest, url, fetched_at)
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
        self._waiting[claim.seq] = _Waiting(claim, owner, now)
        if owner != self.self_id:
            self._unsent[claim.seq] = None
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

    def batches(self, now: float) -> dict[str, list[Claim]]:
        """Every claim not yet sent, by owner, but for owners to retry later (rule 5); they count as sent
        from now."""
        out: dict[str, list[Claim]] = {}
        for seq, w in self._unsent_held():
            if self._retry_at.get(w.owner, 0.0) <= now:
                del self._unsent[seq]
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
        self._retry_later(owner, now)
        for c in claims:
            if c.seq in self._waiting:
                self._unsent[c.seq] = None

    def refused(self, claims: Iterable[Claim]) -> list[Outcome]:
        """The held pages of a batch the owner refused: stored in full, marked (rule 5)."""
        return self._give_up(c.seq for c in claims)

    def expired(self, now: float) -> list[Outcome]:
        """The held pages that waited ``wait`` seconds (rule 5)."""
        return self._give_up(self._overdue(now))

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


# --- near-duplicate claims (rules 9-12) -------------------------------------------------------------

_kernel = native.load("polecat.cluster._claims")
_native_band_slices: Callable[[int, int], tuple[int, ...]] | None = (
    None if _kernel is None else _kernel.band_slices
)
_native_band_keys: Callable[[int], tuple[bytes, ...]] | None = None if _kernel is None else _kernel.band_keys


def band_slice(key: bytes) -> int:
    """Rule 8: the slice of a band key (hashed: band values are not spread like content hashes)."""
    # A key of nearindex.py's layout (3 bytes, its band number first) has a place in the table.
    i = int.from_bytes(key, "big") if len(key) == 3 else len(_BAND_SLICES)
    if i < len(_BAND_SLICES) and (got := _BAND_SLICES[i]) != _UNKNOWN:
        return got
    got = int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") % SLICES
    if i < len(_BAND_SLICES):
        _BAND_SLICES[i] = got
    return got


_UNKNOWN = 0xFFFF
_BAND_SLICES = array("H", [_UNKNOWN]) * (0 if _native_band_slices is not None else BANDS << 16)
""":func:`band_slice` of each band key (band number, 16-bit value) once computed: a BLAKE2b a key was the
first cost of claims.py in a crawl (4 a page at its claimer, 4 a base made durable at each owner,
benchmarks/README.md "Issue 35: claim items a page"); the 2**18 keys fill 512 KiB. Empty with the native
kernel, which :func:`_slices` asks instead (a crawl meets most keys once a process: the table seldom
paid)."""


def band_owners(index: int, owner_of: Callable[[int], str]) -> tuple[str, ...]:
    """The distinct owners of fingerprint index ``index``'s band keys (rule 9), in band order."""
    return tuple(dict.fromkeys(map(owner_of, _slices(index))))


@lru_cache(maxsize=4096)
def _keys(index: int) -> tuple[bytes, ...]:
    """:func:`band_keys`, remembered for the pages in flight: a page's keys are asked for its owners
    (rule 9), its claim's scan and its base (rule 10). The native kernel makes the four in one call: an
    owner meets most fingerprints once, so the cache seldom spares them (benchmarks/README.md "Claim
    cost: the near book's scans and band keys in C")."""
    if _native_band_keys is not None:
        return _native_band_keys(index)
    return tuple(band_keys(index))


@lru_cache(maxsize=4096)
def _slices(index: int) -> tuple[int, ...]:
    """The band slices of :func:`_keys`, remembered alike: a page's are asked for its owners (rule 9) and
    again when its base is kept (rule 13), each a hash of a key. The native kernel computes the four in
    one call: in a crawl nearly every key is met for the first time in each process, so the table of
    :func:`band_slice` rarely spares the BLAKE2b (benchmarks/README.md "Claim cost: band slices and the
    near book's scan in C")."""
    if _native_band_slices is not None:
        return _native_band_slices(index, SLICES)
    return tuple(map(band_slice, _keys(index)))


@dataclass(frozen=True, slots=True)
class NearClaim:
    """One page's near claim: its body's hash, URL, fetch time and fingerprint (``index``, ``verify``)."""

    seq: int
    digest: bytes
    url: str
    fetched_at: float
    index: int
    verify: bytes


@dataclass(frozen=True, slots=True)
class Original:
    """The page a near copy resembles: its body's hash, URL, fetch time, the member whose store holds
    the body (``holder``) and how close it is (``rank``: sketch bins, index bits)."""

    digest: bytes
    url: str
    fetched_at: float
    holder: str
    rank: tuple[int, int]


@dataclass(frozen=True, slots=True)
class NearAnswer:
    """An owner's answer to near claim ``seq``: ``original`` None for "none"."""

    seq: int
    original: Original | None


NearRouted = list[tuple[str, NearAnswer]]
"""Near answers with the member each goes to."""

R = TypeVar("R")


def _init(cls: type[R], *values: Any) -> R:
    """A record made by its ``__init__``: :data:`_make` without the codec's kernel."""
    return cls(*values)


_wire = native.load("polecat.cluster._claimwire")
if _wire is not None:
    _wire.bind_records(Claim, Answer, NearClaim, NearAnswer, Original, FetchRecord)
_make = _init if _wire is None else _wire.make
"""The records the books answer with, made as the codec makes the decoded ones (_claimwire.c rule 4,
every field given in order): a frozen dataclass's ``__init__`` sets each field through
``object.__setattr__`` (benchmarks/README.md "Claim cost: the books' records")."""


class _Base:
    """A near claim recorded as a base (rule 10): a plain slotted class, its derived fields set in its
    ``__init__`` (a dataclass's ``__post_init__`` is one more call a base, and its default factory
    another)."""

    __slots__ = ("claim", "claimer", "durable", "keys", "order", "rows")

    def __init__(self, claim: NearClaim, claimer: str, durable: bool = False) -> None:
        self.claim = claim
        self.claimer = claimer
        self.durable = durable
        self.rows: set[int] = set()
        """The band slices it is kept under (rule 13)."""
        self.keys: tuple[bytes, ...] = _keys(claim.index)
        """Its claim's band keys, computed once: every claim of its bands scans it (rule 10)."""
        self.order: tuple[float, str] = (claim.fetched_at, claim.url)
        """Its claim's fetch order (rule 10, :func:`_order`), compared by every scan."""


BAND_BASES = 64
"""Most bases one band key holds (rule 10), the oldest dropped first."""
NEAR_MARK = b"n"
"""After the band slice's prefix, the mark of a near base's row (rule 13)."""


def near_key(band: int, claimer: str, digest: bytes) -> bytes:
    """Rule 13: the key of a base's row under band slice ``band``."""
    return slice_prefix(band) + NEAR_MARK + digest + claimer.encode()


def _band_slices(index: int) -> set[int]:
    return set(_slices(index))


def _order(c: NearClaim) -> tuple[float, str]:
    return c.fetched_at, c.url


_Match = tuple[_Base, tuple[int, int]]
"""A base and its rank against a claim (sketch bins, index bits)."""


def _better(best: _Match | None, base: _Base, c: NearClaim, bits: int) -> _Match | None:
    """``base`` instead of ``best`` when it passes the sketch test and is closer, then earlier (rule 10)."""
    rank = (verify_distance(c.verify, base.claim.verify), bits)
    if rank[0] <= VERIFY_MAX_DISTANCE and (best is None or (rank, base.order) < (best[1], best[0].order)):
        return base, rank
    return best


def _band_mates(bands: Mapping[bytes, list[_Base]], keys: tuple[bytes, ...]) -> Iterator[_Base]:
    """The bases listed under ``keys`` in ``bands``, each once, in key then list order: a base in several
    of these bands passes or fails the same tests in each, so once is enough."""
    seen: set[int] = set()
    for key in keys:
        for base in bands.get(key, ()):
            if id(base) not in seen:
                seen.add(id(base))
                yield base


def _scan(bands: Mapping[bytes, list[_Base]], keys: tuple[bytes, ...], c: NearClaim,
          settling: Container[tuple[str, bytes]], max_distance: int) -> tuple[_Match | None, _Match | None]:
    """:meth:`NearBook._closest` over the bases of ``bands`` under ``keys``: the specification of the
    native kernel's ``closest`` (polecat/cluster/_claims.c), which gives the same."""
    best: _Match | None = None
    order = _order(c)
    later: list[tuple[_Base, int]] = []
    for base in _band_mates(bands, keys):
        o = base.claim
        if o.url == c.url or base.order == order:
            continue
        bits = (o.index ^ c.index).bit_count()
        if bits > max_distance:
            continue
        if base.order > order:
            if (base.claimer, o.digest) not in settling:
                later.append((base, bits))
            continue
        best = _better(best, base, c, bits)
    if best is not None:
        return best, None
    for base, bits in later:
        best = _better(best, base, c, bits)
    return None, best


def _unsettled(bands: Mapping[bytes, list[_Base]], keys: tuple[bytes, ...],
               settling: Container[tuple[str, bytes]], c: NearClaim,
               max_distance: int) -> list[tuple[tuple[str, bytes], NearClaim]]:
    """The settling bases (key and claim) near ``c`` and fetched after it (rule 10), among the bases
    listed under ``c``'s band keys ``keys`` (each once, in key then list order): the specification of the
    native kernel's ``unsettled_in_bands`` (polecat/cluster/_claims.c), which gives the same. Only a base
    that shares a band is a candidate, as in :func:`_scan` and one process's index (rule 9), so the pass
    reads a claim's few band-mates, not every base settling (19-20 of them a claim at a 20 ms settle, and
    more the longer the settle; benchmarks/README.md "Issue 35: the settling pass by band, and claim cost
    measured in pairs"). The index distance first: it rules out nearly every base."""
    order = _order(c)
    out = []
    for base in _band_mates(bands, keys):
        s = base.claim
        if ((s.index ^ c.index).bit_count() <= max_distance and _order(s) > order and s.url != c.url
                and verify_distance(s.verify, c.verify) <= VERIFY_MAX_DISTANCE
                and (base.claimer, s.digest) in settling):
            out.append(((base.claimer, s.digest), s))
    return out


_native_unsettled: Callable[[dict[bytes, list[_Base]], tuple[bytes, ...], dict[tuple[str, bytes],
                                                                                tuple[NearClaim, float]],
                             NearClaim, int, int, int],
                            list[tuple[tuple[str, bytes], NearClaim]]] | None = (
    None if _kernel is None else _kernel.unsettled_in_bands
)
_native_closest: Callable[[dict[bytes, list[_Base]], tuple[bytes, ...], NearClaim,
                           dict[tuple[str, bytes], tuple[NearClaim, float]], int, int, int],
                          tuple[_Match | None, _Match | None]] | None = (
    None if _kernel is None else _kernel.closest
)


class NearBook:
    """The owner's bases of its band keys and the earlier copies waiting on them (rules 10 and 14)."""

    def __init__(self, capacity: int, hold: float, max_distance: int, settle: float = 0.0,
                 keep: Callable[[int], bool] | None = None) -> None:
        self._capacity = capacity
        self._keep = keep
        """The band slices whose bases are kept (rule 13): this member's; None keeps none."""
        self._writes: list[Write] = []
        self._late: NearRouted = []
        """Answers of bases a load dropped (its bounds), and those owed other members by a decision of
        this member's own claim (rule 16), given with the next settled ones."""
        self.unreadable = 0
        """Kept rows that did not decode (rule 13): skipped, logged by the runner."""
        self._hold = hold
        self._settle = settle
        self.alone = False
        """No other member in the member list: no settle (rule 15)."""
        self._settling: dict[tuple[str, bytes], tuple[NearClaim, float]] = {}
        """Bases recorded but not yet answered "none" (rule 10), with their arrival."""
        self._max_distance = max_distance
        self._bands: dict[bytes, list[_Base]] = {}
        self._bases: OrderedDict[tuple[str, bytes], _Base] = OrderedDict()
        self._copies: dict[tuple[str, bytes], list[tuple[str, NearClaim, float]]] = {}
        self.copies = 0
        """Claims answered as near copies."""

    def decide(self, claimer: str, claims: Iterable[NearClaim], now: float) -> NearRouted:
        """Answer ``claimer``'s near claims in order (rule 10); an earlier copy of a later base not yet
        durable waits (rule 14)."""
        out: NearRouted = []
        for c in claims:
            self._decide(claimer, c, now, out)
        return out

    def _decide(self, claimer: str, c: NearClaim, now: float, out: NearRouted) -> None:
        same = self._bases.get((claimer, c.digest))
        if same is not None and same.claim.url == c.url:  # a claim sent again: "none" again (as rule 2)
            out.append((claimer, _make(NearAnswer, c.seq, None)))
            return
        # The same body from the same claimer is a copy of that base, whichever was fetched first.
        found, later = ((same, (0, 0)), None) if same is not None else self._closest(c)
        if later is not None and not later[0].durable:  # it may be stored in full: wait for it (rule 14)
            self._copies.setdefault((later[0].claimer, later[0].claim.digest), []).append((claimer, c, now))
        elif later is not None:  # stored in full: this earlier fetch is its copy (rule 14)
            self.copies += 1
            out.append((claimer, _make(NearAnswer, c.seq, _original(*later))))
        elif found is None:
            self._record(claimer, c, out)
            if self._settle > 0 and not self.alone:
                self._settling[(claimer, c.digest)] = (c, now)
                self._unsettle(c, now, out)
            else:
                out.append((claimer, _make(NearAnswer, c.seq, None)))
        else:  # answered at once: its deposit is what waits for the base (rule 12)
            self.copies += 1
            out.append((claimer, _make(NearAnswer, c.seq, _original(*found))))

    def _unsettle(self, c: NearClaim, now: float, out: NearRouted) -> None:
        """Settling bases fetched after ``c`` and near it become its copies (rule 10)."""
        if not self._settling:
            return
        # Those that match first (the tests read only the two claims), then each while still settling.
        keys = _keys(c.index)
        if _native_unsettled is not None:
            matches = _native_unsettled(self._bands, keys, self._settling, c, self._max_distance,
                                        VERIFY_MAX_DISTANCE, VERIFY_BYTES)
        else:
            matches = _unsettled(self._bands, keys, self._settling, c, self._max_distance)
        if len(matches) > 1:  # decided in the order they arrived, as a pass over ``_settling`` made them
            arrival = {key: i for i, key in enumerate(self._settling)}
            matches.sort(key=lambda m: arrival[m[0]])
        for key, s in matches:
            if key in self._settling:
                del self._settling[key]
                self._redecide(key, now, out)
                self._decide(key[0], s, now, out)

    def own(self, claimer: str, c: NearClaim, now: float,
            stale: Iterable[tuple[str, bytes]] = ()) -> list[NearAnswer]:
        """Decide ``claimer``'s own claim ``c`` at once: the answers to ``claimer``; those owed to other
        members go with the next :meth:`settled` (rule 16). ``stale``: the (claimer, hash) of bases that
        were not stored in full (refused deposits), withdrawn first (rule 17)."""
        out: NearRouted = []
        for key in stale:
            self._redecide(key, now, out)
        self._decide(claimer, c, now, out)
        self._late.extend(r for r in out if r[0] != claimer)
        return [a for who, a in out if who == claimer]

    def settle_due(self) -> float | None:
        """When the first settling base is due its "none" (rule 10), 0.0 when answers are owed now (rule
        16); None when none settles."""
        if self._late:
            return 0.0
        for _, since in self._settling.values():  # in arrival order: the first is the oldest
            return since + self._settle
        return None

    def settled(self, now: float) -> NearRouted:
        """The "none" answers of the bases that settled (rule 10)."""
        out, self._late = self._late, []
        for key in overdue(self._settling, itemgetter(1), now, self._settle):  # in arrival order (settle_due)
            c, _ = self._settling.pop(key)
            out.append((key[0], _make(NearAnswer, c.seq, None)))
        return out

    def _closest(self, c: NearClaim) -> tuple[_Match | None, _Match | None]:
        """The closest base near ``c`` fetched before it, and (only when there is none) the closest
        fetched after it and answered "none" already (rule 14); one scan of ``c``'s bands for both."""
        if _native_closest is not None:
            return _native_closest(self._bands, _keys(c.index), c, self._settling, self._max_distance,
                                   VERIFY_MAX_DISTANCE, VERIFY_BYTES)
        return _scan(self._bands, _keys(c.index), c, self._settling, self._max_distance)

    def _record(self, claimer: str, c: NearClaim, out: NearRouted) -> None:
        self._add(_Base(c, claimer), out)

    def _add(self, base: _Base, out: NearRouted) -> None:
        """Index ``base`` under its band keys within the bounds of rule 10 (copies waiting on a base
        dropped for them are decided at expiry)."""
        self._bases[(base.claimer, base.claim.digest)] = base
        for key in base.keys:
            band = self._bands.setdefault(key, [])
            band.append(base)
            if len(band) > BAND_BASES:
                self._drop((band[0].claimer, band[0].claim.digest), out)
        if len(self._bases) > self._capacity:
            self._drop(next(iter(self._bases)), out)

    def take_writes(self) -> list[Write]:
        """The writes that keep the book (rule 13) since the last call, in order."""
        out, self._writes = self._writes, []
        return out

    def load(self, records: Iterable[tuple[bytes, bytes]]) -> int:
        """Rule 13: add the kept bases among ``records`` (``claims`` table rows), oldest fetch first; a
        base here already gains the row's band slice. Returns how many bases were added; a row that does
        not decode is skipped and counted (:attr:`unreadable`)."""
        got: dict[tuple[str, bytes], _Base] = {}
        for key, value in records:
            key = bytes(key)
            if len(key) <= EXACT_KEY_LEN or key[PREFIX_LEN:PREFIX_LEN + 1] != NEAR_MARK:
                continue
            digest, claimer = key[PREFIX_LEN + 1:PREFIX_LEN + 33], key[PREFIX_LEN + 33:]
            try:
                url, fetched_at, index, verify = msgpack.unpackb(value)
                c = NearClaim(0, digest, str(url), float(fetched_at), int(index), bytes(verify))
                who = claimer.decode()
            except (ValueError, TypeError, UnicodeDecodeError, msgpack.UnpackException):
                self.unreadable += 1
                continue
            band = int.from_bytes(key[:PREFIX_LEN], "big")
            base = self._bases.get((who, digest)) or got.setdefault((who, digest),
                                                                    _Base(c, who, durable=True))
            base.rows.add(band)
        for base in sorted(got.values(), key=lambda b: b.order):
            self._add(base, self._late)
        return len(got)

    def forget(self, slices: Iterable[int]) -> int:
        """Band ``slices`` were handed over (their rows leave with them, rule 13): a base kept under no
        other band slice is forgotten; returns how many."""
        gone = frozenset(slices)
        doomed = []
        for key, base in self._bases.items():
            if base.rows & gone:
                base.rows -= gone
                if not base.rows:
                    doomed.append(key)
        for key in doomed:
            self._drop(key, [])
        return len(doomed)

    def _drop(self, key: tuple[str, bytes], out: NearRouted) -> None:
        base = self._bases.pop(key, None)
        if base is None:
            return
        self._writes.extend(Delete("claims", near_key(s, base.claimer, base.claim.digest)) for s in base.rows)
        settling = self._settling.pop(key, None)
        if settling is not None:  # its claimer still waits: "none" now (it is no base here any more)
            out.append((key[0], _make(NearAnswer, settling[0].seq, None)))
        for band in base.keys:
            bases = self._bands[band]
            bases.remove(base)
            if not bases:
                del self._bands[band]

    def durable(self, claimer: str, digests: Iterable[bytes]) -> NearRouted:
        """``claimer`` stored these bases in full and flushed them (rule 7): their copies are answered."""
        out: NearRouted = []
        for d in digests:
            base = self._bases.get((claimer, d))
            if base is None:
                continue
            if not base.durable and self._keep is not None:
                c = base.claim
                base.rows = {s for s in _band_slices(c.index) if self._keep(s)}
                value = bytes(msgpack.packb([c.url, c.fetched_at, c.index, c.verify]))
                self._writes.extend(Put("claims", near_key(s, claimer, d), value) for s in base.rows)
            base.durable = True
            for who, c, _ in self._copies.pop((claimer, d), ()):
                self.copies += 1
                out.append((who, _make(NearAnswer, c.seq, _original(base, self._rank(base, c)))))
        return out

    def _rank(self, base: _Base, c: NearClaim) -> tuple[int, int]:
        return verify_distance(c.verify, base.claim.verify), (base.claim.index ^ c.index).bit_count()

    def withdrawn(self, claimer: str, digests: Iterable[bytes], now: float) -> NearRouted:
        """``claimer`` did not store these bases in full: dropped, their copies decided again (rule 10)."""
        out: NearRouted = []
        for d in digests:
            self._redecide((claimer, d), now, out)
        return out

    def expired(self, now: float) -> NearRouted:
        """Copies that waited ``hold`` seconds: their base is dropped, they are decided again (rule 10)."""
        out: NearRouted = []
        for key in [k for k, waiting in self._copies.items() if now - waiting[0][2] >= self._hold]:
            self._redecide(key, now, out)
        return out

    def _redecide(self, key: tuple[str, bytes], now: float, out: NearRouted) -> None:
        self._drop(key, out)
        for who, c, _ in self._copies.pop(key, ()):
            self._decide(who, c, now, out)

    def waiting(self) -> int:
        """Claims not answered yet: earlier copies waiting for their later base to be durable (rule 14),
        bases settling."""
        return sum(map(len, self._copies.values())) + len(self._settling)

    def __len__(self) -> int:
        return len(self._bases)


def _original(base: _Base, rank: tuple[int, int]) -> Original:
    o = base.claim
    return _make(Original, o.digest, o.url, o.fetched_at, base.claimer, rank)


@dataclass(slots=True)
class _NearWaiting:
    claim: NearClaim
    unsent: set[str]
    unanswered: set[str]
    owners: tuple[str, ...]
    since: float
    best: Original | None = None
    none: set[str] = field(default_factory=set)
    """Owners that answered "none": they recorded the page as a base."""
    refused: bool = False
    stale: frozenset[tuple[str, bytes]] = frozenset()
    """The (holder, hash) of the bases of the page's refused deposits, not taken as answers (rule 17)."""


@dataclass(slots=True)
class NearOutcome:
    """A held page's near claim decided (rule 11): a copy of ``original``, or (None) stored in full;
    ``owners`` (those that recorded it as a base, or may have) learn whether it was stored in full.
    ``marked``: an owner did not answer in time (stored in full, the page is marked as rule 5 marks
    it). Not frozen, as :class:`Outcome`."""

    seq: int
    original: Original | None
    owners: tuple[str, ...]
    marked: bool = False
    exact: bool = False
    """An owner refused the claim (a release without near claims): the page's exact claim decides."""


class NearQueue(_HeldPages[_NearWaiting, NearBook]):
    """The claimer's pages waiting for their near claims' answers (rule 11); its book answers the band
    keys this member owns."""

    def __init__(self, self_id: str, owner_of: Callable[[int], str], book: NearBook, *, wait: float) -> None:
        super().__init__(self_id, owner_of, book, wait=wait)
        self._stale: dict[int, None] = {}
        """The seqs of the held pages whose answers naming a refused base are not taken yet (rule 17)."""

    @property
    def book(self) -> NearBook:
        """This member's book (rule 10)."""
        return self._book

    def add(self, digest: bytes, url: str, fetched_at: float, fp: Fingerprint, now: float,
            refused: Iterable[Original] = ()) -> tuple[int, list[NearOutcome]]:
        """Hold a page: its seq, and its outcome when this member's own book decided every band at once.
        ``refused``: the originals of the page's deposits that their holders refused (rule 17)."""
        self._seq += 1
        claim = _make(NearClaim, self._seq, digest, url, fetched_at, fp.index, fp.verify)
        owners = band_owners(fp.index, self._owner_of)
        stale = frozenset((o.holder, o.digest) for o in refused) if refused else frozenset()
        w = self._waiting[claim.seq] = _NearWaiting(claim, {o for o in owners if o != self.self_id},
                                                    set(owners), owners, now, stale=stale)
        if w.unsent:
            self._unsent[claim.seq] = None
        if stale:
            self._stale[claim.seq] = None
        if self.self_id not in owners:
            return claim.seq, []
        return claim.seq, self.answered(self.self_id, self._book.own(self.self_id, claim, now, stale))

    def batches(self, now: float) -> dict[str, list[NearClaim]]:
        """Every near claim not yet sent, by owner, but for owners to retry later (rule 5)."""
        out: dict[str, list[NearClaim]] = {}
        for seq in list(self._stale):
            w = self._waiting.get(seq)
            if w is None or now - w.since >= self._wait / 2:  # its answers are taken (rule 17)
                if w is not None:
                    w.stale = frozenset()
                del self._stale[seq]
        for seq, w in self._unsent_held():
            for owner in [o for o in w.unsent if self._retry_at.get(o, 0.0) <= now]:
                w.unsent.discard(owner)
                out.setdefault(owner, []).append(w.claim)
                self.sent += 1
            if not w.unsent:
                del self._unsent[seq]
        return out

    def answered(self, owner: str, answers: Iterable[NearAnswer]) -> list[NearOutcome]:
        """The held pages these answers of ``owner`` decide (rule 11)."""
        out = []
        for a in answers:
            w = self._waiting.get(a.seq)
            if w is None or owner not in w.unanswered:
                self.stray += 1
                continue
            o = a.original
            if o is not None and (o.holder, o.digest) in w.stale:  # asked again (rule 17)
                w.unsent.add(owner)
                self._unsent[a.seq] = None
                continue
            if o is None:
                w.none.add(owner)
            elif w.best is None or _preferred(o, w.claim) < _preferred(w.best, w.claim):
                w.best = o
            out.extend(self._answered_by(a.seq, w, owner))
        return out

    def _answered_by(self, seq: int, w: _NearWaiting, owner: str) -> list[NearOutcome]:
        w.unanswered.discard(owner)
        w.unsent.discard(owner)
        if w.unanswered:
            return []
        del self._waiting[seq]
        return [NearOutcome(seq, w.best, _recorders(w), exact=w.refused)]

    def undelivered(self, owner: str, claims: Iterable[NearClaim], now: float) -> None:
        """A batch did not reach ``owner``: sent again after :data:`RETRY_AFTER` (rule 5)."""
        self._retry_later(owner, now)
        for c in claims:
            w = self._waiting.get(c.seq)
            if w is not None and owner in w.unanswered:
                w.unsent.add(owner)
                self._unsent[c.seq] = None

    def refused(self, owner: str, claims: Iterable[NearClaim]) -> list[NearOutcome]:
        """``owner`` refused a batch: its answers count as "none" (rule 11)."""
        out = []
        for c in claims:
            w = self._waiting.get(c.seq)
            if w is not None and owner in w.unanswered:
                w.refused = True
                out.extend(self._answered_by(c.seq, w, owner))
        return out

    def expired(self, now: float) -> list[NearOutcome]:
        """The held pages that waited ``wait`` seconds, decided by the answers they have (rule 11)."""
        out = []
        for seq in self._overdue(now):
            w = self._waiting.pop(seq)
            self.unanswered += 1
            out.append(NearOutcome(seq, w.best, _recorders(w), marked=True))
        return out

    def drain(self) -> list[int]:
        """Every held page's seq, given up: the member stops (its pages are stored in full, marked)."""
        seqs = list(self._waiting)
        self._waiting.clear()
        return seqs


def _preferred(o: Original, c: NearClaim) -> tuple[bool, tuple[int, int], float, str]:
    """Rule 11's order of a page's matches: a later fetch first (only a page stored in full is such a
    match, rule 14), then the closest, then the earliest."""
    return (o.fetched_at, o.url) <= _order(c), o.rank, o.fetched_at, o.url


def _recorders(w: _NearWaiting) -> tuple[str, ...]:
    """The owners that recorded the page as a base, or may have (no answer yet)."""
    return tuple(o for o in w.owners if o in w.none or o in w.unanswered)


def exact_copy(record: FetchRecord, url: str, fetched_at: float, *own: tuple[str, str],
               content_hash: bytes | None = None) -> FetchRecord:
    """The revisit of a copy of the page ``url`` fetched at ``fetched_at``, an answer's original: the
    store that does not hold the original writes its date from :data:`REFERS_DATE_HEADER`. ``own`` and
    ``content_hash``: :func:`near_copy`'s header and hash. ``dataclasses.replace(record, ...)``, made as
    :data:`_make` makes the books' records (a frozen record's ``replace`` sets every field through
    ``object.__setattr__``)."""
    return _make(FetchRecord, record.url, record.fetched_at, record.status,
                 (*record.headers, (REFERS_DATE_HEADER, repr(fetched_at)), *own),
                 record.content_hash if content_hash is None else content_hash, record.size, record.truncated,
                 url, "revisit")


def near_copy(record: FetchRecord, original: Original) -> FetchRecord:
    """Rule 11: the record one process writes for a near copy of ``original``, from the record of the
    page as fetched (its ``content_hash`` its own). An exact copy is the revisit an exact claim writes."""
    if original.digest == record.content_hash:
        return exact_copy(record, original.url, original.fetched_at)
    return exact_copy(record, original.url, original.fetched_at,
                      (OWN_HASH_HEADER, record.content_hash.hex()), content_hash=original.digest)
