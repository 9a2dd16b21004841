"""Near-duplicate claims across the members of a crawl (issue 35; polecat/cluster/claims.py rules 9-12):
band keys claimed from their owners, answered in arrival order among earlier fetches, a near copy
deposited in the store that holds its original; and a ``--workers 2`` crawl of a web of near mirrors
that stores each near copy as one process does, every page replayed."""

from __future__ import annotations

import asyncio
import hashlib
import random
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polecat.cluster.batch import HandoffError, unframe
from polecat.cluster.claimlink import CLAIM_HEADER, ContentClaims
from polecat.cluster.claims import (
    BAND_BASES,
    RETRY_AFTER,
    UNANSWERED,
    Answer,
    Claim,
    ClaimBook,
    NearAnswer,
    NearBook,
    NearClaim,
    NearOutcome,
    NearQueue,
    Original,
    band_owners,
    band_slice,
    content_slice,
    near_copy,
)
from polecat.cluster.claimwire import MAGIC, VERSION, ClaimFrame, decode, encode_claims, encode_near
from polecat.cluster.layout import collection_dirs
from polecat.cluster.receiver import Reply
from polecat.cluster.ring import Ring
from polecat.config import StoreConfig
from polecat.dedup.minhash import VERIFY_MAX_DISTANCE, Fingerprint, fingerprint, verify_distance
from polecat.dedup.nearindex import band_keys
from polecat.frontier.slices import SLICES
from polecat.store.base import OWN_HASH_HEADER, FetchRecord, content_hash
from polecat.store.segstore import SegmentStore
from polecat.testing.cluster import LoopbackTransport
from polecat.testing.fakes import MemoryPageStore
from polecat.testing.pywb import get, pywb_serving, stamp_now
from polecat.testing.sitegen import SiteSpec
from polecat.writes import Delete, Put
from tests.conftest import TestWebFactory
from tests.pywb_helpers import NEEDS_PYWB, pywb_bin
from tests.replay_helpers import replay
from tests.test_content_claims import Unread
from tests.test_crawl_restart import crawl_cmd

T0 = 1_790_000_000.0
WORDS = [f"w{i}" for i in range(3000)]


def text(seed: int, edit: int = 0) -> str:
    """A 400-word page; ``edit`` > 0 changes one word of it (a near copy of ``text(seed)``)."""
    words = random.Random(seed).choices(WORDS, k=400)
    if edit:
        words[edit % 400] = f"edited{edit}"
    return " ".join(words)


def near(a: str, b: str) -> bool:
    """One process's test of two pages (polecat/dedup/nearindex.py), at the books' distance of 4 bits."""
    fa, fb = fingerprint(a), fingerprint(b)
    shared = set(band_keys(fa.index)) & set(band_keys(fb.index))
    return (fa.index ^ fb.index).bit_count() <= 4 and bool(shared) \
        and verify_distance(fa.verify, fb.verify) <= VERIFY_MAX_DISTANCE


def claim(seq: int, page: str, url: str, t: float) -> NearClaim:
    fp = fingerprint(page)
    return NearClaim(seq, content_hash(page.encode()), url, t, fp.index, fp.verify)


# --- the policy (sans-IO) -----------------------------------------------------------------------------

def test_band_keys_are_spread_over_the_slices_like_content_hashes() -> None:
    slices = Counter(band_slice(bytes((b, v >> 8, v & 0xFF))) for b in range(4) for v in range(0, 65536, 7))
    assert len(slices) == SLICES and max(slices.values()) < 3 * len(slices.keys()) and all(
        0 <= s < SLICES for s in slices)
    fp = fingerprint(text(1))
    owners = band_owners(fp.index, Ring(("a", "b", "c")).owner)
    assert set(owners) <= {"a", "b", "c"} and len(owners) == len(set(owners))
    assert {Ring(("a", "b", "c")).owner(band_slice(k)) for k in band_keys(fp.index)} == set(owners)


@given(st.one_of(st.binary(min_size=3, max_size=3), st.binary(max_size=40)))
def test_a_band_slice_is_its_key_s_hash_asked_once_or_again(key: bytes) -> None:
    # Where near bases are kept (claims rule 13): the table that remembers it must not change it.
    want = int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big") % SLICES
    assert band_slice(key) == want and band_slice(key) == want


def test_a_near_or_exact_copy_is_answered_at_once_and_names_its_holder() -> None:
    book = NearBook(capacity=100, hold=0.5, max_distance=4)
    base, copy = claim(1, text(1), "http://a/x", T0), claim(2, text(1, 7), "http://b/x", T0 + 1)
    exact, other = claim(3, text(1), "http://c/x", T0 + 2), claim(4, text(2), "http://d/y", T0 + 3)
    assert book.decide("w0", [base], T0) == [("w0", _none(1))]
    # Not durable yet: their deposits wait for the base, at its holder (claims rule 12), not the answers.
    answers = book.decide("w1", [copy, exact, other], T0)
    assert [(who, a.seq, a.original.holder if a.original else None) for who, a in answers] == [
        ("w1", 2, "w0"), ("w1", 3, "w0"), ("w1", 4, None)] and book.waiting() == 0 and book.copies == 2
    o = answers[0][1].original
    assert o is not None and (o.digest, o.url, o.fetched_at) == (base.digest, base.url, T0)
    assert o.rank[0] <= 80 and o.rank[1] <= 4
    assert book.durable("w0", [base.digest]) == []  # nothing waited on it


def test_an_earlier_fetch_waits_for_a_later_base_and_a_refetch_is_not_its_own_copy() -> None:
    book = NearBook(capacity=100, hold=0.5, max_distance=4)
    later, earlier = claim(1, text(1, 3), "http://b/x", T0 + 5), claim(2, text(1), "http://a/x", T0)
    assert book.decide("w1", [later], T0) == [("w1", _none(1))]
    # Arrived after the later page's "none": it may be stored in full, so it is waited for (claims rule 14).
    assert book.decide("w0", [earlier], T0) == [] and book.waiting() == 1
    assert book.durable("w0", [later.digest]) == []  # only the base's own claimer reports it
    (who, answer), = book.durable("w1", [later.digest])
    assert who == "w0" and answer.seq == 2 and answer.original is not None
    assert answer.original.url == "http://b/x" and answer.original.holder == "w1"
    again = claim(3, text(1, 5), "http://b/x", T0 + 9)  # its URL fetched again, a word changed
    assert book.decide("w1", [again], T0) == [("w1", _none(3))]  # the only base near it is its own URL


def test_a_base_settles_before_its_none_and_an_earlier_copy_arriving_meanwhile_takes_its_place() -> None:
    book = NearBook(capacity=100, hold=0.5, max_distance=4, settle=0.05)
    later, earlier = claim(1, text(1, 3), "http://b/x", T0 + 0.01), claim(2, text(1), "http://a/x", T0)
    assert book.decide("w1", [later], T0) == []  # decided at once by its own member's book: settling
    # Fetched first, arriving while it settles: the later page is its copy now, answered at once.
    (who, answer), = book.decide("w0", [earlier], T0 + 0.02)
    assert who == "w1" and answer.seq == 1 and answer.original == Original(
        earlier.digest, earlier.url, T0, "w0", answer.original.rank if answer.original else (0, 0))
    assert book.settled(T0 + 0.05) == [] and book.settled(T0 + 0.08) == [("w0", _none(2))]
    assert len(book) == 1 and book.waiting() == 0


def test_an_owner_alone_answers_none_at_once_and_a_joiner_s_earlier_copy_meets_the_base_as_later() -> None:
    book = NearBook(capacity=100, hold=0.5, max_distance=4, settle=0.05)
    book.alone = True  # claims rule 15: no other member's claim can arrive within a settle
    later, earlier = claim(1, text(1, 3), "http://b/x", T0 + 0.01), claim(2, text(1), "http://a/x", T0)
    assert book.decide("w0", [later], T0) == [("w0", _none(1))] and book.settle_due() is None
    # A member joined meanwhile and claims an earlier near copy: rule 14, it waits for that base.
    book.alone = False
    assert book.decide("w1", [earlier], T0 + 0.01) == []
    (who, answer), = book.durable("w0", [later.digest])
    assert who == "w1" and answer.seq == 2 and answer.original is not None
    assert answer.original.url == "http://b/x"


def test_a_withdrawn_or_silent_base_hands_its_copies_on() -> None:
    book = NearBook(capacity=100, hold=0.5, max_distance=4)
    base, copy = claim(1, text(1), "http://a/x", T0 + 2), claim(2, text(1, 7), "http://b/x", T0 + 1)
    book.decide("w0", [base], T0)
    assert book.decide("w1", [copy], T0) == []  # fetched before the base: waits for it (claims rule 14)
    # The base was an exact copy of a page elsewhere (not stored in full): the copy becomes a base.
    assert book.withdrawn("w0", [base.digest], T0 + 0.1) == [("w1", _none(2))]
    assert len(book) == 1 and book.waiting() == 0
    third = claim(3, text(1, 11), "http://c/x", T0)
    assert book.decide("w2", [third], T0 + 0.2) == []  # fetched before the copy, now the base: waits
    assert book.expired(T0 + 0.5) == []
    assert book.expired(T0 + 0.7) == [("w2", _none(3))]  # its claimer never reported it: dropped
    assert len(book) == 1


def test_a_full_book_forgets_its_oldest_base() -> None:
    book = NearBook(capacity=2, hold=0.5, max_distance=4)
    for i in range(3):
        book.decide("w0", [claim(i + 1, text(i), f"http://a/{i}", T0 + i)], T0)
        book.durable("w0", [content_hash(text(i).encode())])
    assert len(book) == 2
    (_, forgotten), = book.decide("w1", [claim(9, text(0, 5), "http://b/0", T0 + 9)], T0)
    (_, kept), = book.decide("w1", [claim(10, text(2, 5), "http://b/2", T0 + 9)], T0)
    assert forgotten.original is None and kept.original is not None


def test_a_durable_base_is_kept_under_its_owned_band_slices_and_a_new_book_answers_its_copies() -> None:
    """Claims rule 13: rows under the band slices the member owns, loaded by a new book (a restart, or an
    adopter of those slices); a released band slice forgets the bases kept under no other."""
    base, copy = claim(1, text(1), "http://a/x", T0), claim(2, text(1, 7), "http://b/x", T0 + 1)
    bands = sorted({band_slice(k) for k in band_keys(base.index)})
    mine = set(bands[:2])
    book = NearBook(capacity=100, hold=0.5, max_distance=4, keep=mine.__contains__)
    book.decide("w0", [base], T0)
    assert book.take_writes() == []  # not durable yet: not kept
    book.durable("w0", [base.digest])
    rows = {w.key: w.value for w in book.take_writes() if isinstance(w, Put)}
    assert {int.from_bytes(k[:2], "big") for k in rows} == mine and len(rows) == len(mine)
    assert ClaimBook(capacity=10, hold=0.5).load(rows.items()) == 0  # not an exact record
    new = NearBook(capacity=100, hold=0.5, max_distance=4, keep=mine.__contains__)
    assert new.load([(b"\x00\x01n" + b"x" * 40, b"junk"), *rows.items()]) == 1 and new.unreadable == 1
    (who, answer), = new.decide("w1", [copy], T0 + 5)  # durable: answered at once, naming its holder
    assert who == "w1" and answer.original is not None and answer.original.holder == "w0"
    assert new.forget([bands[0]]) == 0 and new.forget([bands[1]]) == 1 and len(new) == 0
    assert new.take_writes() == []  # the rows left with their slices


def test_a_crowded_band_drops_its_oldest_base_and_its_rows() -> None:
    book = NearBook(capacity=10_000, hold=0.5, max_distance=0, keep=lambda band: True)
    index = fingerprint(text(1)).index
    for i in range(BAND_BASES + 1):  # the same band keys, sketches far apart: no base is near another
        c = NearClaim(i + 1, content_hash(b"%d" % i), f"http://a/{i}", T0 + i,
                      index ^ (1 << 63) if i else index, fingerprint(text(100 + i)).verify)
        book.decide("w0", [c], T0 + i)
        book.durable("w0", [c.digest])
    deleted = {w.key for w in book.take_writes() if isinstance(w, Delete)}
    assert len(book) == BAND_BASES and deleted
    assert all(k.endswith(content_hash(b"0") + b"w0") for k in deleted)


def _none(seq: int) -> NearAnswer:
    return NearAnswer(seq, None)


def test_the_queue_waits_for_every_owner_and_takes_the_closest_answer() -> None:
    fp = fingerprint(text(1, 5))
    ring = Ring(("w0", "w1", "w2"))
    mine = band_owners(fp.index, ring.owner)
    q = NearQueue("me", ring.owner, NearBook(10, 0.5, 4), wait=1.0)
    seq, decided = q.add(content_hash(b"x"), "http://a/x", T0, fp, T0)
    assert decided == [] and q.pending() == 1
    batches = q.batches(T0)
    assert set(batches) == set(mine) and all(len(b) == 1 for b in batches.values())
    assert q.batches(T0) == {}  # sent once
    far = Original(b"f" * 32, "http://far/", T0 - 5, "w1", (40, 3))
    close = Original(b"c" * 32, "http://close/", T0 - 1, "w2", (10, 1))
    answers = [NearAnswer(seq, far), NearAnswer(seq, close), NearAnswer(seq, None)]
    out: list[NearOutcome] = []
    for owner, answer in zip(mine, answers, strict=False):
        assert out == []
        out = q.answered(owner, [answer])
    assert q.answered(mine[0], [NearAnswer(seq, None)]) == [] and q.stray == 1  # answered already
    (outcome,) = out
    best = min((a.original for a in answers[:len(mine)] if a.original is not None), key=lambda o: o.rank,
               default=None)
    assert outcome.original == best and not outcome.marked
    assert outcome.owners == tuple(o for o, a in zip(mine, answers, strict=False) if a.original is None)


def test_an_owner_that_refuses_counts_none_and_a_silent_one_is_waited_for_at_most_wait() -> None:
    ring = Ring(("w0", "w1", "w2", "w3"))
    fp = next(f for f in map(fingerprint, map(text, range(50))) if len(band_owners(f.index, ring.owner)) > 1)
    owners = band_owners(fp.index, ring.owner)
    q = NearQueue("me", ring.owner, NearBook(10, 0.5, 4), wait=1.0)
    seq, _ = q.add(content_hash(b"x"), "http://a/x", T0, fp, T0)
    batches = q.batches(T0)
    q.undelivered(owners[0], batches[owners[0]], T0)
    assert q.batches(T0) == {} and set(q.batches(T0 + 0.1)) == {owners[0]}  # sent again after RETRY_AFTER
    assert q.refused(owners[0], batches[owners[0]]) == []
    assert q.expired(T0 + 0.9) == []
    (outcome,) = q.expired(T0 + 1.0)
    assert outcome == NearOutcome(seq, None, owners[1:], marked=True) and q.unanswered == 1


def test_the_claimers_own_bands_are_decided_without_a_message() -> None:
    fp = fingerprint(text(3))
    q = NearQueue("solo", Ring(("solo",)).owner, NearBook(10, 0.5, 4), wait=1.0)
    seq, decided = q.add(content_hash(b"x"), "http://a/x", T0, fp, T0)
    assert decided == [NearOutcome(seq, None, ("solo",))] and q.batches(T0) == {} and q.pending() == 0


def test_an_answer_the_own_book_owes_another_member_goes_to_it_with_the_settled_ones() -> None:
    """Claims rule 16: this member's claim of an earlier page makes another member's settling base its copy;
    that answer goes to that member, never to this member's page of the same seq."""
    ring = Ring(("m0", "m1"))
    seed = next(s for s in range(200) if band_owners(fingerprint(text(s)).index, ring.owner) == ("m0",)
                and "m0" in band_owners(fingerprint(text(s, 3)).index, ring.owner))
    q0, q1 = (NearQueue(m, ring.owner, NearBook(10, 60.0, 4, settle=0.02), wait=60.0) for m in ("m0", "m1"))
    later, earlier = text(seed, 3), text(seed)
    s_seq, _ = q1.add(content_hash(later.encode()), "http://b/x", T0 + 5, fingerprint(later), T0)
    assert q0.book.decide("m1", q1.batches(T0)["m0"], T0) == []  # a base, settling
    c_seq, decided = q0.add(content_hash(earlier.encode()), "http://a/x", T0, fingerprint(earlier), T0)
    assert c_seq == s_seq and decided == [] and q0.book.settle_due() == 0.0
    ((to, owed),) = q0.book.settled(T0)
    assert to == "m1" and owed.seq == s_seq and owed.original is not None and owed.original.url == "http://a/x"
    ((to, mine),) = q0.book.settled(T0 + 0.1)
    assert to == "m0" and q0.answered("m0", [mine]) == [NearOutcome(c_seq, None, ("m0",))]


def test_a_page_claimed_again_after_a_refused_deposit_takes_no_refused_base_but_past_half_its_wait() -> None:
    """Claims rule 17: the claimer's own book withdraws the refused base before deciding; another owner's
    answer naming it (that owner has not had the withdrawal yet) is asked again, taken past half the wait."""
    ring = Ring(("m0", "m1"))
    seed = next(s for s in range(200) if len(band_owners(fingerprint(text(s, 3)).index, ring.owner)) == 2)
    base = claim(1, text(seed), "http://a/x", T0)
    q = NearQueue("m0", ring.owner, NearBook(10, 60.0, 4), wait=1.0)
    assert q.book.decide("m1", [base], T0) == [("m1", _none(1))]
    refused = Original(base.digest, base.url, base.fetched_at, "m1", (0, 0))
    page = text(seed, 3)
    seq, decided = q.add(content_hash(page.encode()), "http://b/x", T0 + 1, fingerprint(page), T0, (refused,))
    (batch,) = q.batches(T0).values()
    assert decided == [] and q.answered("m1", [NearAnswer(seq, refused)]) == []
    assert q.batches(T0 + 0.1) == {"m1": batch} and q.answered("m1", [NearAnswer(seq, refused)]) == []
    assert q.batches(T0 + 0.5) == {"m1": batch}  # half the wait: the next answer is taken
    # The own book answered "none": the page is its base, the refused one gone from it.
    assert q.answered("m1", [NearAnswer(seq, refused)]) == [NearOutcome(seq, refused, ("m0",))]


def test_a_tick_s_near_batches_read_only_the_pages_not_sent_and_keep_the_order_they_came() -> None:
    """Claims rule 5 for near claims: a tick's batches come from the held pages with a claim not sent to
    some owner; a claim not delivered goes again ahead of later pages' claims."""
    ring = Ring(("m0", "m1"))
    q = NearQueue("me", ring.owner, NearBook(10, 0.5, 4), wait=1.0)
    pages = [text(s) for s in range(3)]
    seqs = [q.add(content_hash(p.encode()), f"http://a/{i}", T0, fingerprint(p), T0)[0]
            for i, p in enumerate(pages[:2])]
    sent = q.batches(T0)
    owner = next(o for o, claims in sent.items() if claims[0].seq == seqs[0])
    q.undelivered(owner, sent[owner][:1], T0)
    seqs.append(q.add(content_hash(pages[2].encode()), "http://a/2", T0, fingerprint(pages[2]), T0)[0])
    q._waiting[seqs[1]] = Unread()  # type: ignore[assignment]
    again = q.batches(T0 + RETRY_AFTER)
    assert again[owner][0].seq == seqs[0]
    assert {c.seq for claims in again.values() for c in claims} == {seqs[0], seqs[2]}
    q._waiting[seqs[0]] = q._waiting[seqs[2]] = Unread()  # type: ignore[assignment]
    assert q.batches(T0 + 2 * RETRY_AFTER) == {}


def test_a_near_copy_is_the_record_one_process_writes() -> None:
    body = b"<p>mine</p>"
    rec = FetchRecord.for_body("http://b/x", body, fetched_at=T0, headers=(("Content-Type", "text/html"),))
    orig = Original(b"o" * 32, "http://a/x", T0 - 1, "w0", (3, 1))
    copy = near_copy(rec, orig)
    assert copy.kind == "revisit" and copy.content_hash == orig.digest and copy.duplicate_of == orig.url
    assert copy.own_hash == rec.content_hash and (OWN_HASH_HEADER, rec.content_hash.hex()) in copy.headers
    exact = near_copy(rec, Original(rec.content_hash, "http://a/x", T0 - 1, "w0", (0, 0)))
    assert exact.kind == "revisit" and OWN_HASH_HEADER not in dict(exact.headers)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(2, 4), st.integers(2, 5), st.integers(1, 3),
       st.sampled_from([50, 1]), st.integers(0, 199))
def test_of_near_copies_claimed_at_once_by_any_members_exactly_one_is_stored_in_full(
        seed: int, n: int, k: int, sources: int, spread: int, first: int) -> None:
    """Claims rules 12, 14, 16 and 17: ``k`` near copies of each of ``sources`` pages (``text(first)``
    on), fetched by random members close together (within 20 ms) or apart (within 1 s), claimed with
    deposits (as every member's book answers), every frame delivered in a random order and after a random
    delay, often past the settle window: each page ends decided once, stored in full or a copy of a page
    of its source stored in full (never of another copy), and nothing is left waiting; of one source's
    copies, exactly one is stored in full, as in one process (each pair of them is near by its test). A
    copy's deposit waits for its original's fate; refused (the original became a copy itself), the page
    is claimed again without the refused originals (a refusal against one of them would store it in full:
    counted). So for "delta" and "drop" alike, a "drop" deposit being the revisit alone (rule 12)."""
    rnd = random.Random(seed)
    members = [f"m{i}" for i in range(n)]
    ring = Ring(tuple(members))
    queues = {m: NearQueue(m, ring.owner, NearBook(1000, 60.0, 4, settle=0.02), wait=60.0) for m in members}
    pages = [(rnd.choice(members), text(first + src, edit), f"http://h{j}/{src}", T0 + rnd.random() / spread)
             for src in range(sources) for j, edit in enumerate(rnd.sample([0, 3, 8, 13, 21, 34], k))]
    k *= sources
    assert all(near(a[1], b[1]) for a, b in combinations(pages, 2) if a[2][-1] == b[2][-1])  # one stored
    seq_of: dict[tuple[str, int], int] = {}
    fate: dict[int, int | None] = {}  # page -> its original's page, None: stored in full
    deposits: dict[int, tuple[int, Original]] = {}  # page -> the page its deposit waits on, as answered
    refused: dict[int, tuple[Original, ...]] = {}  # page -> the originals of its refused deposits
    mail: list[tuple[str, str, str, object]] = []  # (to, from, kind, item)
    clock = [0.0]

    def claim(j: int) -> None:
        member, page, url, t = pages[j]
        seq, outs = queues[member].add(content_hash(page.encode()), url, t, fingerprint(page), clock[0],
                                       refused.get(j, ()))
        seq_of[(member, seq)] = j
        outcome(member, outs)

    def outcome(member: str, outs: list[NearOutcome]) -> None:
        for o in outs:
            j = seq_of.pop((member, o.seq))
            if o.original is None:
                fate[j] = None
                mail.extend((owner, member, "durable", j) for owner in o.owners)
            else:
                deposits[j] = (next(i for i, p in enumerate(pages) if p[2] == o.original.url), o.original)
                mail.extend((owner, member, "withdrawn", j) for owner in o.owners)
        # A deposit is answered once its base's fate is known (which may answer another's).
        while ready := [j for j, (original, _) in deposits.items() if original in fate]:
            j = ready[0]
            original, answered = deposits.pop(j)
            if fate[original] is None:
                fate[j] = original
            elif answered not in refused.get(j, ()):
                refused[j] = (*refused.get(j, ()), answered)
                claim(j)
            else:
                fate[j] = None  # refused against a base refused before: stored in full by its claimer

    def route(owner: str, routed: list[tuple[str, NearAnswer]]) -> None:
        mail.extend((who, owner, "answer", answer) for who, answer in routed)

    for j in rnd.sample(range(k), k):
        claim(j)
    while (mail or any(q.pending() or q.book.waiting() for q in queues.values())) and clock[0] < 60:
        clock[0] += rnd.choice([0.0, 0.001, 0.01, 0.03])
        for m, q in queues.items():
            route(m, q.book.settled(clock[0]))
            mail.extend((owner, m, "claims", claims) for owner, claims in q.batches(clock[0]).items())
        if not mail:
            continue
        to, sender, kind, item = mail.pop(rnd.randrange(len(mail)))
        q = queues[to]
        if kind == "claims":
            route(to, q.book.decide(sender, item, clock[0]))  # type: ignore[arg-type]
        elif kind == "answer":
            outcome(to, q.answered(sender, [item]))  # type: ignore[list-item]
        else:
            digest = content_hash(pages[item][1].encode())  # type: ignore[index]
            route(to, q.book.durable(sender, [digest]) if kind == "durable" else
                  q.book.withdrawn(sender, [digest], clock[0]))
    assert set(fate) == set(range(k)) and not deposits
    full = sorted(pages[j][2][-1] for j, original in fate.items() if original is None)
    assert set(full) == {str(src) for src in range(sources)}, fate
    assert len(full) == sources, fate
    assert all(original is None or (fate[original] is None and pages[original][2][-1] == pages[j][2][-1])
               for j, original in fate.items())
    assert all(q.pending() == 0 and q.book.waiting() == 0 for q in queues.values())


def test_frames_of_near_claims_round_trip_and_old_kinds_are_unchanged() -> None:
    c = claim(5, text(1), "http://a/x", T0)
    answers = (NearAnswer(1, None), NearAnswer(2, Original(b"d" * 32, "http://a/", T0, "w0", (12, 2))))
    rec = near_copy(FetchRecord.for_body("http://b/", b"body", fetched_at=T0), Original(
        b"o" * 32, "http://a/", T0, "w0", (1, 1)))
    sent = ClaimFrame("w1", near=(c,), near_answers=answers, withdrawn=(b"d" * 32,),
                      deposits=((3, rec, b"body"),), deposited=((3, True), (4, False)))
    assert decode(encode_near(sent)) == sent  # every section for one peer in one frame
    assert decode(encode_near(ClaimFrame("w1", near=(c,)))) == ClaimFrame("w1", near=(c,))
    for bad in (encode_near(sent)[:-3], encode_near(ClaimFrame("w1", near=(replace(c, verify=b"short"),)))):
        with pytest.raises(HandoffError):
            decode(bad)
    # The exact sections ride in the same frame; a frame of the first five sections alone reads as before.
    exact = replace(sent, claims=(Claim(7, b"e" * 32, "http://c/", T0),), answers=(Answer(8, None), Answer(
        9, ("http://a/", T0))), durable=(b"f" * 32,))
    assert decode(encode_near(exact)) == exact
    assert len(msgpack.unpackb(unframe(encode_near(sent), MAGIC, VERSION, "claim frame", None))[2]) == 5
    # 0.3.0's kinds are still version 1 frames, read as before; their sender is one that sends them apart.
    old = encode_claims("w1", [])
    assert old[4:6] == encode_near(ClaimFrame("w1"))[4:6] and decode(old).claims == ()
    assert decode(old).separate and not decode(encode_near(exact)).separate


# --- the runner, members in one process -----------------------------------------------------------

def _member(self_id: str, members: tuple[str, ...], transport: LoopbackTransport, store: MemoryPageStore, *,
            wait: float = 2.0, near: str = "delta") -> ContentClaims:
    claims = ContentClaims(self_id, Ring(members).owner, transport, {m: f"mem:{m}" for m in members},
                           capacity=100, wait=wait, book_capacity=1000, near=near)
    claims.bind(store)
    transport.receivers[f"mem:{self_id}"] = claims
    return claims


def _page(url: str, page: str, t: float) -> tuple[FetchRecord, bytes, Fingerprint]:
    body = f"<html><body><p>{page}</p></body></html>".encode()
    return (FetchRecord.for_body(url, body, fetched_at=t, headers=(("Content-Type", "text/html"),)), body,
            fingerprint(page))


async def _commits(members: list[ContentClaims]) -> None:
    while True:  # each member's store flushes, as its node's commits make them
        await asyncio.sleep(0.05)
        for m in members:
            m.after_flush(m.before_flush())


async def _stop(tasks: list[asyncio.Task[None]], members: list[ContentClaims]) -> None:
    for task in tasks:
        task.cancel()
    for m in members:
        await m.close()


@asynccontextmanager
async def _running(
        members: tuple[str, ...]) -> AsyncIterator[tuple[list[MemoryPageStore], list[ContentClaims]]]:
    """Members on one loopback transport, each with its store, running and flushing until the block ends."""
    transport = LoopbackTransport()
    stores = [MemoryPageStore() for _ in members]
    claims = [_member(m, members, transport, s) for m, s in zip(members, stores, strict=True)]
    tasks = [asyncio.create_task(_commits(claims)), *(asyncio.create_task(m.run()) for m in claims)]
    try:
        yield stores, claims
    finally:
        await _stop(tasks, claims)


def test_a_member_alone_stores_its_pages_as_it_claims_them_and_one_with_a_peer_waits_the_settle() -> None:
    async def go() -> tuple[bool, bool, MemoryPageStore]:
        transport, store = LoopbackTransport(), MemoryPageStore()
        alone = _member("w0", ("w0",), transport, store)
        paired = _member("w1", ("w1", "w2"), transport, MemoryPageStore())
        # claims rule 15: no settle, no frame, no turn of the runner for a lone member's own claims
        first = alone.claim(*_page("http://a.test/1", text(1), T0))
        copy = alone.claim(*_page("http://b.test/1", text(1, 4), T0 + 1))
        settling = paired.claim(*_page("http://c.test/1", text(2), T0))
        done = first.done() and copy.done(), settling.done()
        await _stop([], [alone, paired])
        return *done, store

    lone, paired, store = asyncio.run(go())
    assert lone and not paired
    assert [r.kind for r in store.log] == ["response", "revisit"]


def test_near_copies_fetched_by_two_members_are_deposited_where_their_originals_are() -> None:
    members = ("w0", "w1")

    async def go() -> tuple[MemoryPageStore, MemoryPageStore, list[ContentClaims]]:
        async with _running(members) as (stores, claims):
            # w0 fetches the originals, w1 a near copy of each (some exact) once their claims are on their
            # way (two pages claimed in the same instant at two members may both be stored in full: claims
            # rule 10)
            held = [claims[0].claim(*_page(f"http://a.test/{i}", text(i), T0 + i)) for i in range(20)]
            await asyncio.sleep(0.01)
            for i in range(20):
                held.append(claims[1].claim(*_page(f"http://b.test/{i}", text(i, 4 * (i >= 5)),
                                                   T0 + i + 0.5)))
            async with asyncio.timeout(20):
                await asyncio.gather(*held)
        return stores[0], stores[1], claims

    a, b, claims = asyncio.run(go())
    assert sum(m.stats().near_copies for m in claims) == 20
    assert all(m.stats().unanswered == 0 and m.stats().deposits_refused == 0 for m in claims)
    assert len(a.bodies) == 20 and not b.bodies and not b.log  # the copies live beside their originals
    revisits = [r for r in a.log if r.kind == "revisit"]
    assert len(revisits) == 20
    for r in revisits:
        assert r.url.startswith("http://b.test/") and r.duplicate_of == r.url.replace("b.test", "a.test")
        exact = int(r.url.rsplit("/", 1)[1]) < 5  # a revisit alone, as one process writes an exact copy
        assert (r.own_hash == r.content_hash) == exact and r.content_hash in a.bodies


def test_with_drop_an_earlier_near_copy_claimed_after_the_later_settled_is_its_revisit() -> None:
    """Claims rules 12 and 14 with ``near_duplicates = "drop"``: a near copy fetched earlier but claimed
    after the later one settled "none" and was stored in full (further apart than the settle) is not
    stored in full too: it is deposited, its revisit alone, where the later one is, once that is durable
    (before, with "drop" both were stored in full)."""
    members = ("w0", "w1")

    async def go() -> tuple[MemoryPageStore, MemoryPageStore, list[ContentClaims]]:
        transport = LoopbackTransport()
        stores = MemoryPageStore(), MemoryPageStore()
        claims = [_member(m, members, transport, s, near="drop")
                  for m, s in zip(members, stores, strict=True)]
        runs = [asyncio.create_task(m.run()) for m in claims]
        committing = asyncio.create_task(_commits(claims))
        async with asyncio.timeout(20):
            await asyncio.gather(*(claims[1].claim(*_page(f"http://b.test/{i}", text(i, 4), T0 + 1))
                                   for i in range(5)))
            await asyncio.sleep(0.2)  # their bases durable at every owner (the rule 7 report)
            await asyncio.gather(*(claims[0].claim(*_page(f"http://a.test/{i}", text(i), T0))
                                   for i in range(5)))
        await _stop([committing, *runs], claims)
        return *stores, claims

    a, b, claims = asyncio.run(go())
    assert all(m.stats().unanswered == 0 and m.stats().deposits_refused == 0 for m in claims)
    assert len(b.bodies) == 5 and not a.bodies and not a.log  # one of each pair in full, by w1
    revisits = [r for r in b.log if r.kind == "revisit"]
    assert sorted(r.url for r in revisits) == [f"http://a.test/{i}" for i in range(5)]
    for r in revisits:  # a revisit of the later fetch, its own body dropped
        assert r.duplicate_of == r.url.replace("a.test", "b.test") and r.content_hash in b.bodies
        assert r.own_hash != r.content_hash and r.own_hash not in b.bodies


def test_a_near_copy_of_a_page_still_held_here_is_stored_against_it_once_that_one_is() -> None:
    async def go() -> tuple[MemoryPageStore, ContentClaims]:
        transport = LoopbackTransport()
        store = MemoryPageStore()
        solo = _member("w0", ("w0",), transport, store)
        run = asyncio.create_task(solo.run())
        async with asyncio.timeout(10):  # the copy is answered while its base still settles
            await asyncio.gather(solo.claim(*_page("http://a.test/1", text(1), T0)),
                                 solo.claim(*_page("http://b.test/1", text(1, 4), T0 + 1)))
        await _stop([run], [solo])
        return store, solo

    store, solo = asyncio.run(go())
    assert [(r.url, r.kind) for r in store.log] == [("http://a.test/1", "response"),
                                                    ("http://b.test/1", "revisit")]
    assert store.log[1].own_hash != store.log[1].content_hash and solo.stats().near_copies == 1


def test_a_members_own_deposit_given_up_is_not_stored_again_when_its_base_is() -> None:
    """Claims rule 12: a near copy parked on a base this member still holds (as ``_apply_near`` parks it),
    unacknowledged within ``wait``, is stored in full, marked; when its base is stored after that, the copy
    is not stored again (two records of one fetch in one store: seen in a 4-worker crawl)."""

    async def go() -> tuple[MemoryPageStore, ContentClaims]:
        store = MemoryPageStore()
        me = _member("w0", ("w0",), LoopbackTransport(), store, wait=0.3)
        base, base_body, _ = _page("http://a.test/1", text(1), T0)
        record, body, fp = _page("http://b.test/1", text(1, 4), T0 + 1)
        orig = Original(base.content_hash, base.url, base.fetched_at, "w0", (0, 0))
        stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        seq = me._new_deposit(record, body, stored, (fp, ()), orig)
        me._parked.setdefault(base.content_hash, []).append(("w0", seq, near_copy(record, orig), body))
        await asyncio.sleep(0.35)
        me._deposits_overdue(me._clock.wall())  # given up: stored in full, marked
        assert stored.done()
        store.put(base, base_body)  # then its base is stored
        me._unpark(base.content_hash)
        return store, me

    store, me = asyncio.run(go())
    assert [(r.url, r.kind, r.header(CLAIM_HEADER.lower())) for r in store.log] == [
        ("http://b.test/1", "response", UNANSWERED), ("http://a.test/1", "response", None)]
    assert me.queue.stray == 1


def test_two_pages_of_one_body_that_two_owners_answer_each_a_copy_of_the_other_are_stored_at_once() -> None:
    """Claims rule 18: one member's two fetches of one body, answered "none" and "copy of the other" by
    two band owners that took their claims in opposite orders, are not both parked until ``wait`` gives
    one up (stored in full, marked): the page whose answer closes the cycle goes on to its exact claim,
    stored in full, and the other is stored as its revisit at once (seen in a 4-worker crawl)."""
    members = ("w0", "w1", "w2")
    ring = Ring(members)
    seed = _twin_seed(ring)

    async def go() -> tuple[MemoryPageStore, ContentClaims, list[bool]]:
        store = MemoryPageStore()
        me = _member("w0", members, LoopbackTransport(), store, wait=60.0)
        a, a_body, fp = _page("http://a.test/1", text(seed), T0)
        b, b_body, _ = _page("http://b.test/1", text(seed), T0 + 1)
        held = [me.claim(a, a_body, fp), me.claim(b, b_body, fp)]
        seq_a, seq_b = sorted(me._near_held)

        def of(r: FetchRecord) -> Original:
            return Original(r.content_hash, r.url, r.fetched_at, "w0", (0, 0))

        me.answer(encode_near(ClaimFrame("w1", near_answers=(NearAnswer(seq_a, None),
                                                              NearAnswer(seq_b, of(a))))))
        me.answer(encode_near(ClaimFrame("w2", near_answers=(NearAnswer(seq_a, of(b)),
                                                              NearAnswer(seq_b, None)))))
        done = [f.done() for f in held]
        await me.close()
        return store, me, done

    store, me, done = asyncio.run(go())
    assert done == [True, True]  # no wait: neither waits for the other
    assert [(r.url, r.kind, r.duplicate_of, r.header(CLAIM_HEADER.lower())) for r in store.log] == [
        ("http://b.test/1", "response", None, None), ("http://a.test/1", "revisit", "http://b.test/1", None)]
    assert me.stats().unanswered == 0 and me.stats().near_copies == 1


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4).flatmap(lambda k: st.tuples(st.permutations(range(k)), st.permutations(range(k)))),
       st.booleans(), st.randoms(use_true_random=False))
def test_pages_of_one_body_that_band_owners_took_in_any_orders_are_all_stored_at_once(
        orders: tuple[list[int], list[int]], w2_first: bool, rnd: random.Random) -> None:
    """Claims rule 18 with the owners' real books: ``k`` pages of one body fetched by one member, their
    claims decided by each of two band owners in its own order (rule 10: the first a base, the others
    its copies), the two frames of answers delivered in either order, the answers of a frame in any: once
    both came, every page is stored, exactly one in full and the others as revisits, none marked and
    none waiting for ``wait`` (a cycle of copies is broken where it closes)."""
    members = ("w0", "w1", "w2")
    seed = _twin_seed(Ring(members))

    async def go() -> tuple[MemoryPageStore, ContentClaims, list[bool]]:
        store = MemoryPageStore()
        me = _member("w0", members, LoopbackTransport(), store, wait=60.0)
        held = [me.claim(*_page(f"http://h{i}.test/", text(seed), T0 + i)) for i in range(len(orders[0]))]
        assert me.near is not None
        sent = me.near.batches(T0)
        frames = []
        for owner, order in zip(("w1", "w2"), orders, strict=True):
            book = NearBook(capacity=100, hold=30.0, max_distance=4)
            answers = [a for i in order for _, a in book.decide("w0", [sent[owner][i]], T0)]
            rnd.shuffle(answers)
            frames.append(encode_near(ClaimFrame(owner, near_answers=tuple(answers))))
        for frame in reversed(frames) if w2_first else frames:
            me.answer(frame)
        done = [f.done() for f in held]
        await me.close()
        return store, me, done

    store, me, done = asyncio.run(go())
    assert all(done)
    assert sorted(r.kind for r in store.log) == ["response"] + ["revisit"] * (len(done) - 1)
    assert all(r.header(CLAIM_HEADER.lower()) is None for r in store.log) and me.stats().unanswered == 0


def _twin_seed(ring: Ring) -> int:
    """A text whose bands w1 and w2 own and whose hash w0 owns: an exact claim of it is decided at w0 at
    once (claims rule 4)."""
    return next(s for s in range(1000)
                if set(band_owners(fingerprint(text(s)).index, ring.owner)) == {"w1", "w2"}
                and ring.owner(content_slice(_page("http://a.test/1", text(s), T0)[0].content_hash)) == "w0")


def test_an_unreachable_band_owner_never_blocks_the_page_it_is_stored_in_full_and_marked() -> None:
    members = ("w0", "w1")
    ring = Ring(members)

    async def go() -> tuple[MemoryPageStore, ContentClaims]:
        transport = LoopbackTransport()
        store = MemoryPageStore()
        me = _member("w0", members, transport, store, wait=0.3)
        transport.down.add("mem:w1")  # w1 is dead
        run = asyncio.create_task(me.run())
        committing = asyncio.create_task(_commits([me]))
        pages = [_page(f"http://a.test/{i}", text(i), T0 + i) for i in range(40)]
        theirs = [p for p in pages if band_owners(p[2].index, ring.owner) == ("w1",)][:3]
        assert theirs
        async with asyncio.timeout(10):  # bounded by the claim waits, not by the owner
            await asyncio.gather(*(me.claim(*p) for p in theirs))
        await _stop([committing, run], [me])
        return store, me

    store, me = asyncio.run(go())
    # The near claim gave up: each page went on to its exact claim and was stored in full, marked.
    assert len(store.bodies) == len(store.log) == 3 and me.stats().unanswered >= 3
    assert all(r.kind == "response" and r.header(CLAIM_HEADER.lower()) == UNANSWERED for r in store.log)
    assert me.queue.sent + len(me.book) >= 3  # claimed by hash: sent to w1, or decided by w0's own book


def test_a_page_every_band_owner_answered_none_is_stored_in_full_without_an_exact_claim() -> None:
    """Claims rule 11: its exact copies, fetched later by any member, meet it at its band owners as near
    copies at distance 0 and are deposited beside it; no hash is claimed, by message or by a book."""
    members = ("w0", "w1")

    async def go() -> tuple[MemoryPageStore, MemoryPageStore, list[ContentClaims]]:
        async with _running(members) as (stores, claims), asyncio.timeout(20):
            await asyncio.gather(*(claims[0].claim(*_page(f"http://a.test/{i}", text(i), T0 + i))
                                   for i in range(10)))
            await asyncio.gather(*(claims[1].claim(*_page(f"http://b.test/{i}", text(i), T0 + 100 + i))
                                   for i in range(10)))
        return stores[0], stores[1], claims

    a, b, claims = asyncio.run(go())
    assert [(m.queue.sent, len(m.book)) for m in claims] == [(0, 0), (0, 0)]
    assert sum(len(m.near.book) for m in claims if m.near is not None) >= 10  # the originals are bases
    assert len(a.bodies) == 10 and not b.bodies and not b.log
    revisits = [r for r in a.log if r.kind == "revisit"]
    assert len(revisits) == 10 and all(r.own_hash == r.content_hash for r in revisits)
    assert all(m.stats().unanswered == 0 and m.stats().copies == m.stats().near_copies for m in claims)


def test_a_deposit_the_holder_cannot_store_is_stored_in_full_by_its_claimer() -> None:
    members = ("w0", "w1")

    async def go() -> tuple[MemoryPageStore, MemoryPageStore, ContentClaims]:
        transport = LoopbackTransport()
        stores = MemoryPageStore(), MemoryPageStore()
        claims = [_member(m, members, transport, s) for m, s in zip(members, stores, strict=True)]
        runs = [asyncio.create_task(m.run()) for m in claims]
        committing = asyncio.create_task(_commits(claims))
        first = claims[0].claim(*_page("http://a.test/1", text(1), T0))
        async with asyncio.timeout(10):
            await first
            await asyncio.sleep(0.2)  # reported durable
            stores[0].bodies.clear()  # the base went (a repair dropped it)
            await claims[1].claim(*_page("http://b.test/1", text(1, 4), T0 + 1))
        await _stop([committing, *runs], claims)
        return *stores, claims[1]

    _, b, claimer = asyncio.run(go())
    # Refused, claimed again once (claims rule 12: the same base answers), refused again: stored here.
    assert claimer.stats().deposits_refused == 2 and len(b.bodies) == 1
    assert [r.kind for r in b.log] == ["response"] and b.log[0].header(CLAIM_HEADER.lower()) is None


# --- a real crawl -------------------------------------------------------------------------------------

def _export(data: Path, out: Path) -> dict[str, bytes]:
    export = subprocess.run([sys.executable, "-m", "polecat", "store", "export", str(data), "--warc",
                             str(out)], capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    return {u: b for u, b in replay(out).items() if not u.endswith("/robots.txt")}


def _kept(data: Path) -> dict[str, str]:
    """Each page's URL -> how its one record keeps it: in full, in full because a claim of it had no
    answer in time (marked, claims rule 5), as a near copy (a revisit with its own body as a delta), as a
    revisit."""
    kept: dict[str, str] = {}
    for node in collection_dirs([data]):
        with SegmentStore.open(node / "store", StoreConfig(), read_only=True) as store:
            for r in store.records():
                if not r.url.endswith("/robots.txt"):
                    assert r.url not in kept, f"{r.url} stored twice"
                    if r.kind != "response":
                        kept[r.url] = "near" if r.own_hash != r.content_hash else "revisit"
                    else:
                        kept[r.url] = UNANSWERED if r.header(CLAIM_HEADER.lower()) == UNANSWERED else "full"
    return kept


def _kept_alike(one: dict[str, str], workers: dict[str, str]) -> None:
    """The workers kept the pages as one process did (so many in full, so many near copies: which page
    of a near pair is the copy turns on which was fetched first), but those stored in full, marked,
    because a claim had no answer in time: a loaded machine's missed collapse (claims rule 5), each one
    a page one process kept in full or as a near copy, at most a tenth of them."""
    assert one.keys() == workers.keys()
    alone, apart = Counter(one.values()), Counter(workers.values())
    assert alone[UNANSWERED] == 0  # one process claims nothing
    marked = apart.pop(UNANSWERED, 0)
    assert marked <= len(one) // 10, apart
    assert apart["revisit"] == alone["revisit"] and apart["full"] <= alone["full"], (alone, apart, marked)
    assert apart["full"] + apart["near"] + marked == alone["full"] + alone["near"], (alone, apart, marked)
    assert apart["near"] >= alone["near"] - marked, (alone, apart, marked)


@pytest.mark.slow
def test_two_workers_store_near_mirrors_as_one_process_does(test_web: TestWebFactory, tmp_path: Path) -> None:
    spec = SiteSpec(hosts=6, pages_per_host=20, seed=7, mirror_hosts=3, mirror_near_ratio=1.0)
    web = test_web(spec)
    figures = {}
    replayed = {}
    for name, extra in (("one", ()), ("two", ("--workers", "2"))):
        data = tmp_path / name
        run = subprocess.run(crawl_cmd(web, data, 100.0, *extra), capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        figures[name] = _kept(data)
        replayed[name] = _export(data, tmp_path / f"{name}.warc.gz")
    fetched = {r.url for r in web.log if r.status == 200 and not r.url.endswith("/robots.txt")}
    for name in ("one", "two"):
        assert set(replayed[name]) == fetched  # every page replayed with its own bytes
    assert replayed["one"] == replayed["two"]
    # The near mirrors are revisits with their own bytes as deltas, whichever worker fetched them.
    _kept_alike(figures["one"], figures["two"])
    assert Counter(figures["one"].values())["near"] >= 20


def test_with_drop_two_workers_keep_near_mirrors_as_one_process_does(test_web: TestWebFactory,
                                                                     tmp_path: Path) -> None:
    """``near_duplicates = "drop"`` (claims rule 12): a near mirror is a revisit of its original without its
    own body, as many as one process makes, each written where its original is (with its digest), and the
    export replays every page."""
    web = test_web(SiteSpec(hosts=6, pages_per_host=20, seed=7, mirror_hosts=3, mirror_near_ratio=1.0))
    cfg = tmp_path / "drop.toml"
    cfg.write_text('[dedup]\nnear_duplicates = "drop"\n')
    kept = {}
    for name, extra in (("one", ()), ("two", ("--workers", "2"))):
        data = tmp_path / name
        run = subprocess.run(crawl_cmd(web, data, 100.0, "--config", str(cfg), *extra), capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        kept[name] = _kept(data)
        fetched = {r.url for r in web.log if r.status == 200 and not r.url.endswith("/robots.txt")}
        assert set(_export(data, tmp_path / f"{name}.warc.gz")) == fetched  # revisits resolved, digests equal
        for node in collection_dirs([data]):
            with SegmentStore.open(node / "store", StoreConfig(), read_only=True) as store:
                near = [r for r in store.records() if r.own_hash != r.content_hash]
                assert all(store.has(r.content_hash) and not store.has(r.own_hash) for r in near)
    _kept_alike(kept["one"], kept["two"])
    assert Counter(kept["one"].values())["near"] >= 20


@NEEDS_PYWB
@pytest.mark.slow
def test_a_two_worker_crawl_of_near_mirrors_replays_in_pywb(test_web: TestWebFactory, tmp_path: Path) -> None:
    web = test_web(SiteSpec(hosts=4, pages_per_host=15, seed=8, mirror_hosts=2, mirror_near_ratio=1.0))
    data = tmp_path / "data"
    run = subprocess.run(crawl_cmd(web, data, 100.0, "--workers", "2"), capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert Counter(_kept(data).values())["near"] >= 10
    warc = tmp_path / "all.warc.gz"
    pages = _export(data, warc)
    with pywb_serving(pywb_bin(), warc, tmp_path / "pywb") as base:
        stamp = stamp_now()
        wrong = [u for u, body in pages.items() if get(f"{base}{stamp}id_/{u}") != body]
    assert wrong == [], f"{len(wrong)} of {len(pages)} pages replay other bytes: {wrong[:3]}"


def test_a_member_that_takes_no_near_claims_leaves_the_page_to_its_exact_claim() -> None:
    """A member of a release without near claims (here: one with them off) answers a near frame "bad":
    its peer counts that "none" and claims the exact hash, so an exact copy is still a revisit."""
    members = ("w0", "w1")
    ring = Ring(members)

    async def go() -> tuple[MemoryPageStore, MemoryPageStore, ContentClaims]:
        transport = LoopbackTransport()
        stores = MemoryPageStore(), MemoryPageStore()
        new = _member("w0", members, transport, stores[0])
        old = _member("w1", members, transport, stores[1], near="full")
        runs = [asyncio.create_task(m.run()) for m in (new, old)]
        committing = asyncio.create_task(_commits([new, old]))
        pages = [_page(f"http://a.test/{i}", text(i), T0 + i) for i in range(40)]
        page = next(p for p in pages if "w1" in band_owners(p[2].index, ring.owner))
        record, body, fp = page
        async with asyncio.timeout(10):
            await old.claim(record, body)  # the old member stored it first (it claims exact hashes only)
            await asyncio.sleep(0.2)
            await new.claim(replace(record, url="http://b.test/copy", fetched_at=T0 + 99), body, fp)
        await _stop([committing, *runs], [new, old])
        return *stores, new

    a, b, new = asyncio.run(go())
    assert len(b.bodies) == 1 and not a.bodies
    (copy,) = a.log
    assert copy.kind == "revisit" and copy.duplicate_of is not None and new.stats().copies == 1


class _OldRelease:
    """A member of 0.3.0 in front of ``member``: it takes claim frames of kinds 1-3 and refuses kind 4."""

    def __init__(self, member: ContentClaims) -> None:
        self.member = member
        self.refused = 0

    async def receive(self, data: bytes) -> Reply:
        if not decode(data).separate:
            self.refused += 1
            return Reply("bad", detail="claim frame of unknown kind 4")
        return await self.member.receive(data)


def test_exact_claims_ride_in_the_near_frame_and_a_peer_that_refuses_it_gets_them_as_kinds_1_to_3() -> None:
    """Claims, answers and durable reports go in each tick's kind 4 frame; a 0.3.0 peer refuses it, and
    they go again as kinds 1-3: every copy is still a revisit, no page unanswered."""
    members = ("w0", "w1")
    ring = Ring(members)

    async def go(old_peer: bool) -> tuple[MemoryPageStore, MemoryPageStore, ContentClaims, int]:
        transport = LoopbackTransport()
        stores = MemoryPageStore(), MemoryPageStore()
        new = _member("w0", members, transport, stores[0])
        peer = _member("w1", members, transport, stores[1], near="full" if old_peer else "delta")
        old = _OldRelease(peer)
        if old_peer:
            transport.receivers["mem:w1"] = old
        runs = [asyncio.create_task(m.run()) for m in (new, peer)]
        committing = asyncio.create_task(_commits([new, peer]))
        # Pages without a fingerprint (the near books' pages never reach the hash's owner: claims rule
        # 11) whose hash w1 owns: w0 claims each twice (two URLs), the second a copy of the first.
        pages = [p for p in (_page(f"http://a.test/{i}", text(i), T0 + i) for i in range(80))
                 if ring.owner(content_slice(p[0].content_hash)) == "w1"][:6]
        async with asyncio.timeout(20):
            await asyncio.gather(*(new.claim(r, b) for r, b, _ in pages))
            await asyncio.sleep(0.2)  # reported durable
            await asyncio.gather(*(new.claim(replace(r, url=r.url + "/copy", fetched_at=r.fetched_at + 99), b)
                                   for r, b, _ in pages))
        await _stop([committing, *runs], [new, peer])
        return *stores, new, old.refused

    a, b, new, refused = asyncio.run(go(old_peer=True))
    # The exact sections went again as kinds 1-3 once w1 refused a kind 4 frame: no page unanswered.
    assert refused >= 1 and new.stats().unanswered == 0 and len(a.bodies) == 6 and not b.bodies
    assert sum(r.kind == "revisit" for r in a.log) == 6 and new.stats().copies == 6
    a, b, new, refused = asyncio.run(go(old_peer=False))
    assert refused == 0 and new.stats().unanswered == 0 and new.stats().copies == 6 and len(a.bodies) == 6


def test_a_member_that_stops_stores_what_it_holds_and_what_comes_after_in_full_marked_at_once() -> None:
    members = ("w0", "w1")

    async def go() -> tuple[MemoryPageStore, list[bool]]:
        transport = LoopbackTransport()
        store = MemoryPageStore()
        me = _member("w0", members, transport, store)
        transport.down.add("mem:w1")  # its peer stopped listening: nothing would answer for `wait`
        held = [me.claim(*_page(f"http://a.test/{i}", text(i), T0 + i)) for i in range(4)]
        me.stopping()
        late = me.claim(*_page("http://a.test/late", text(9), T0 + 9))
        done = [f.done() for f in (*held, late)]
        await me.close()
        return store, done

    store, done = asyncio.run(go())
    assert all(done) and len(store.log) == 5
    assert all(r.kind == "response" and r.header(CLAIM_HEADER.lower()) == UNANSWERED for r in store.log)
