"""Content claims: which fetch of a body, anywhere in the crawl, is stored in full (sans-IO).

A member that fetched a body its own store does not hold *claims* the body's content hash from the
hash's owner; the owner answers "first" (store it in full) or "copy of URL fetched at T" (store a
revisit). Decisions are plain objects; :mod:`polecat.cluster.claimlink` moves them.

Rules (this module owns them):

1. A content hash belongs to a *content slice* (:func:`content_slice`: its first four bytes modulo
   ``SLICES``), owned by the member the Ring gives that slice, as URL slices are: every member agrees on
   the owner from the member list alone.
2. The owner's :class:`ClaimBook` answers in arrival order: the first claim of a hash is "first" and
   recorded; every later claim of it from another URL is a copy of the recorded one. A claim of the
   recorded URL itself (a claim sent again, a refetch) is "first" again, so a repeat never turns the
   stored page into a revisit of itself.
3. The book keeps at most ``capacity`` hashes, dropping the oldest: a copy of a dropped hash is stored in
   full again (a missed collapse, never a lost page). It lives for the run (a restarted owner stores
   later copies in full once).
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

Known gap: the owner answers "copy" as soon as the first claim is recorded, not once the first page is
durable in its claimer's store. If that claimer dies before its next store flush, it fetches the page
again after its restart and its claim (same URL) is "first" again, so the copy's revisit resolves, but
only if the page still has the same bytes; a page that changed in between leaves the copy a revisit of
a body no store holds. Answering only durable claims (the claimer reporting its flushes) closes it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from polecat.frontier.slices import SLICES

UNANSWERED = "unanswered"
"""The mark of a page stored in full because its claim had no answer (rule 5)."""
RETRY_AFTER = 0.05
"""Seconds before a batch that could not be delivered goes again (rule 5)."""


def content_slice(digest: bytes) -> int:
    """Rule 1."""
    return int.from_bytes(digest[:4], "big") % SLICES


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


class ClaimBook:
    """The owner's record of the first claim of each hash (rules 2 and 3)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._first: OrderedDict[bytes, tuple[str, float]] = OrderedDict()
        self.copies = 0
        """Claims answered as copies."""

    def decide(self, claims: Iterable[Claim]) -> list[Answer]:
        """Answer ``claims`` in order (rule 2)."""
        answers = []
        for c in claims:
            first = self._first.get(c.digest)
            if first is None:
                self._first[c.digest] = (c.url, c.fetched_at)
                if len(self._first) > self._capacity:
                    self._first.popitem(last=False)
            elif first[0] != c.url:
                self.copies += 1
                answers.append(Answer(c.seq, first))
                continue
            answers.append(Answer(c.seq, None))
        return answers

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
        if owner == self.self_id:
            answer = self._book.decide([claim])[0]
            return claim.seq, [Outcome(claim.seq, answer.original)]
        out = []
        if len(self._waiting) >= self._capacity:
            seq, _ = self._waiting.popitem(last=False)
            self.unanswered += 1
            out.append(Outcome(seq, None, marked=True))
        self._waiting[claim.seq] = _Waiting(claim, owner, now)
        return claim.seq, out

    def decide(self, claims: Iterable[Claim]) -> list[Answer]:
        """Answer other members' claims of the hashes this member owns (rule 2)."""
        return self._book.decide(claims)

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
            if self._waiting.pop(a.seq, None) is None:
                self.stray += 1
                continue
            out.append(Outcome(a.seq, a.original))
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
