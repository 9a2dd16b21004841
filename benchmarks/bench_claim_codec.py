"""CPU of the claim frame codec alone (issue 35; polecat/cluster/claimwire.py): encode and decode of
realistic frames, no sockets, no books.

    python -m benchmarks.bench_claim_codec [--frames 2000] [--items 11] [--runs 5]

Each kind of frame holds ``--items`` items (the 3-node crawl of benchmarks/README.md sends ~11 a frame)
of pages of the benchmark web (URLs ``http://10.0.x.y:8080/host-N/page-M.html``): near claims, near
answers (every other one "none"), exact claims and answers (kinds 1 and 2), and a tick's mixed frame
(every section of kind 4, deposits of 4 kB bodies among them). Frames are signed as a cluster's are
(HMAC). The figure is process CPU, the best of ``--runs``, in µs a frame and µs an item; the kernel
(polecat/cluster/_claims.c) is used when built, ``POLECAT_PURE_PYTHON=1`` runs the Python codec.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable
from functools import partial

from polecat.cluster import claimwire
from polecat.cluster.auth import hmac_signer, hmac_verifier
from polecat.cluster.claims import Answer, Claim, NearAnswer, NearClaim, Original
from polecat.cluster.claimwire import ClaimFrame
from polecat.dedup.minhash import VERIFY_BYTES
from polecat.store.base import FetchRecord

SECRET = "the secret of the benchmark cluster"
T0 = 1_790_000_000.0


def _url(i: int) -> str:
    return f"http://10.0.{i // 250 % 250}.{i % 250 + 1}:8080/host-{i % 200}/page-{i}.html"


def _digest(i: int) -> bytes:
    return hashlib.sha256(i.to_bytes(8, "big")).digest()


def _claim(i: int) -> Claim:
    return Claim(i, _digest(i), _url(i), T0 + i)


def _near(i: int) -> NearClaim:
    return NearClaim(100_000 + i, _digest(i), _url(i), T0 + i * 0.013, (i * 0x9E3779B97F4A7C15) % (1 << 64),
                     hashlib.shake_128(i.to_bytes(8, "big")).digest(VERIFY_BYTES))


def _near_answer(i: int) -> NearAnswer:
    return NearAnswer(100_000 + i, None if i % 2 else Original(_digest(i + 7), _url(i + 7), T0 + i, "m1/w2",
                                                               (i % 5, i % 9)))


def _deposit(i: int) -> tuple[int, FetchRecord, bytes | None]:
    record = FetchRecord(_url(i), T0 + i, 200, (("content-type", "text/html"), ("content-length", "4096")),
                         _digest(i + 3), 4096, False, _url(i + 3), "revisit")
    return 200_000 + i, record, bytes(4096)


def frames(items: int) -> dict[str, ClaimFrame]:
    """The benchmark's frames, by name."""
    n = items
    few = max(1, n // 4)
    return {
        "near claims": ClaimFrame("m0/w1", near=tuple(map(_near, range(n)))),
        "near answers": ClaimFrame("m0/w1", near_answers=tuple(map(_near_answer, range(n)))),
        "exact claims": ClaimFrame("m0/w1", claims=tuple(map(_claim, range(n))), separate=True),
        "exact answers": ClaimFrame("m0/w1", answers=tuple(Answer(i, None if i % 2 else (_url(i), T0 + i))
                                                           for i in range(n)), separate=True),
        "mixed": ClaimFrame("m0/w1", near=tuple(map(_near, range(few))),
                            near_answers=tuple(map(_near_answer, range(few))), withdrawn=(_digest(1),),
                            deposits=tuple(map(_deposit, range(2))), deposited=((5, True), (6, False)),
                            claims=tuple(map(_claim, range(few))),
                            answers=tuple(Answer(i, (_url(i), T0 + i)) for i in range(few)),
                            durable=tuple(map(_digest, range(few)))),
    }


def count(f: ClaimFrame) -> int:
    """The items of a frame (every section's)."""
    return (len(f.claims) + len(f.answers) + len(f.durable) + len(f.near) + len(f.near_answers)
            + len(f.withdrawn) + len(f.deposits) + len(f.deposited))


def encoder(f: ClaimFrame) -> Callable[[], bytes]:
    """The call that sends ``f`` as claimlink.py does: kinds 1 and 2 apart, anything else as kind 4."""
    sign = hmac_signer(SECRET)
    if f.separate and f.claims:
        return lambda: claimwire.encode_claims(f.sender, f.claims, sign)
    if f.separate:
        return lambda: claimwire.encode_answers(f.sender, f.answers, sign)
    return lambda: claimwire.encode_near(f, sign)


def best(call: Callable[[], object], frames: int, runs: int) -> float:
    """The least process CPU of ``runs`` rounds of ``frames`` calls, in µs a call."""
    spent = []
    for _ in range(runs):
        t0 = time.process_time()
        for _ in range(frames):
            call()
        spent.append(time.process_time() - t0)
    return min(spent) / frames * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_claim_codec",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--items", type=int, default=11)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    verify = hmac_verifier(SECRET)
    for name, f in frames(args.items).items():
        encode = encoder(f)
        data = encode()
        decoded = claimwire.decode(data, verify)
        assert decoded == f, name
        items = count(f)
        enc = best(encode, args.frames, args.runs)
        dec = best(partial(claimwire.decode, data, verify), args.frames, args.runs)
        print(f"{name:14} {items:3} items, {len(data):6} bytes: encode {enc:7.1f} µs/frame "
              f"({enc / items:5.2f} µs/item), decode {dec:7.1f} µs/frame ({dec / items:5.2f} µs/item)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
