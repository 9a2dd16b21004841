"""CPU of content claim decisions alone (issue 35; polecat/cluster/claims.py), no sockets, no store.

    python -m benchmarks.bench_claim_decisions --pages 20000 --members 3 --runs 3

``--pages`` pages, in groups of 4 near copies of one 400-word text (one word changed, as
tests/test_near_claims.py's model test makes them), are fetched by random members of ``--members``
(a Ring), 1 ms apart in fetch order; each member's :class:`NearQueue` claims them, every frame is
delivered in order, a page stored in full is reported durable to its band owners, a copy withdrawn;
a page with no near match is stored in full, claimed by its hash (:class:`ClaimQueue`) only where a band
owner did not answer (claims rule 11). Fingerprints and hashes
are computed before the clock starts: the figure (µs per page, process CPU) is the claims' own work.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import time
from collections import deque

from polecat.cluster import claims
from polecat.cluster.ring import Ring
from polecat.dedup.minhash import Fingerprint, fingerprint
from polecat.store.base import content_hash

T0 = 1_790_000_000.0
WORDS = [f"w{i}" for i in range(3000)]
COPIES = 4

Page = tuple[str, bytes, str, float, Fingerprint]


def pages(n: int, members: list[str], seed: int = 1) -> list[Page]:
    """``n`` pages (member, hash, URL, fetch time, fingerprint) in fetch order, ``COPIES`` per text."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        words = random.Random(i // COPIES).choices(WORDS, k=400)
        if i % COPIES:
            words[(i * 7) % 400] = f"edited{i}"
        body = " ".join(words)
        out.append((rnd.choice(members), content_hash(body.encode()), f"http://h{i % COPIES}/{i // COPIES}",
                    T0 + i / 1000, fingerprint(body)))
    return out


def run(work: list[Page], members: list[str], settle: float = 0.02) -> tuple[float, dict[str, int]]:
    """Claim every page of ``work`` (near bases settling ``settle`` seconds); the process CPU seconds and
    the outcome counts."""
    ring = Ring(tuple(members))
    near = {m: claims.NearQueue(m, ring.owner, claims.NearBook(100_000, 60.0, 4, settle=settle), wait=60.0)
            for m in members}
    exact = {m: claims.ClaimQueue(m, ring.owner, claims.ClaimBook(100_000, 60.0), capacity=100_000, wait=60.0)
             for m in members}
    digest_of: dict[tuple[str, int], bytes] = {}
    page_of: dict[tuple[str, int], Page] = {}
    mail: deque[tuple[str, str, str, object]] = deque()
    counts = {"near copies": 0, "exact copies": 0, "stored in full": 0}

    def near_out(m: str, outs: list[claims.NearOutcome]) -> None:
        for o in outs:
            p = page_of.pop((m, o.seq))
            if o.original is not None:
                counts["near copies"] += 1
                mail.extend((owner, m, "withdrawn", p[1]) for owner in o.owners)
                continue
            if o.marked or o.exact:  # a band owner did not answer: the hash's owner decides (claims rule 11)
                seq, decided = exact[m].add(p[1], p[2], p[3], now)
                digest_of[(m, seq)] = p[1]
                exact_out(m, decided)
            else:
                counts["stored in full"] += 1
            mail.extend((owner, m, "durable", p[1]) for owner in o.owners)

    def exact_out(m: str, outs: list[claims.Outcome]) -> None:
        for o in outs:
            digest_of.pop((m, o.seq))
            counts["stored in full" if o.original is None else "exact copies"] += 1
        for owner, digests in exact[m].stored_first().items():
            mail.append((owner, m, "exact durable", digests))

    def deliver(now: float) -> None:
        for m in members:
            mail.extend((who, m, "near answer", a) for who, a in near[m].book.settled(now))
            mail.extend((owner, m, "near claims", cs) for owner, cs in near[m].batches(now).items())
            mail.extend((owner, m, "claims", cs) for owner, cs in exact[m].batches(now).items())
        while mail:
            to, sender, kind, item = mail.popleft()
            if kind == "near claims":
                assert isinstance(item, list)
                mail.extend((who, to, "near answer", a) for who, a in near[to].book.decide(sender, item, now))
            elif kind == "near answer":
                assert isinstance(item, claims.NearAnswer)
                near_out(to, near[to].answered(sender, [item]))
            elif kind == "claims":
                assert isinstance(item, list)
                mail.extend((who, to, "answer", a) for who, a in exact[to].decide(sender, item, now))
            elif kind == "answer":
                assert isinstance(item, claims.Answer)
                exact_out(to, exact[to].answered([item]))
            elif kind == "exact durable":
                assert isinstance(item, list)
                mail.extend((who, to, "answer", a) for who, a in exact[to].durable(sender, item))
            else:
                assert isinstance(item, bytes)
                book = near[to].book
                routed = book.durable(sender, [item]) if kind == "durable" else \
                    book.withdrawn(sender, [item], now)
                mail.extend((who, to, "near answer", a) for who, a in routed)

    start = time.process_time()
    now = 0.0
    for i, (m, digest, url, t, fp) in enumerate(work):
        now = i / 1000
        seq, outs = near[m].add(digest, url, t, fp, now)
        page_of[(m, seq)] = (m, digest, url, t, fp)
        near_out(m, outs)
        if i % 16 == 15:
            deliver(now)
    for _ in range(100):
        now += 0.01
        deliver(now)
    spent = time.process_time() - start
    assert not page_of and not digest_of, "pages left undecided"
    return spent, counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_claim_decisions",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--settle", type=float, default=0.02,
                    help="seconds a near base settles (claims rule 10): more settle at once the longer it is")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top 20 (of one more run)")
    args = ap.parse_args(argv)
    members = [f"m{i}" for i in range(args.members)]
    work = pages(args.pages, members)
    for _ in range(args.runs):
        spent, counts = run(work, members, args.settle)
        print(f"{args.pages} pages, {args.members} members, settle {args.settle} s: "
              f"{spent / args.pages * 1e6:.1f} µs/page {counts}")
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(run, work, members, args.settle)
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
