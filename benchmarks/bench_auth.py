"""What replay-proof request heads cost a cluster node (polecat/cluster/auth.py rules 1, 3, 4).

    python -m benchmarks.bench_auth [--proofs 100000] [--rounds 3]

Per request: making a proof (the sender), checking it and remembering its nonce (the receiver), and the
acknowledgement both ways; the best of ``--rounds`` rounds of ``--proofs`` each, in CPU µs a request.
Then the memory of a full :class:`ReplayGuard` (``REPLAY_MEMORY`` nonces, measured with tracemalloc)
and what a replay costs to refuse.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from polecat.cluster.auth import (
    REPLAY_MEMORY,
    ReplayGuard,
    RequestAuth,
    ack_proves,
    hmac_signer,
    hmac_verifier,
    request_proof,
)

SECRET = "the secret of the benchmark cluster"
ME = "http://10.0.0.2:8470"
NOW = 1_800_000_000.0


def _round(n: int) -> tuple[float, float, float]:
    """CPU µs a request: (make a proof, check it, ack made and checked)."""
    sign, verify = hmac_signer(SECRET), hmac_verifier(SECRET)
    auth = RequestAuth(verify, ME, sign=sign, capacity=n + 1)
    t0 = time.process_time()
    proofs = [request_proof(sign, "/handoff", ME, 50_000, NOW) for _ in range(n)]
    t1 = time.process_time()
    for p in proofs:
        assert auth.check("/handoff", 50_000, p, NOW) is None
    t2 = time.process_time()
    for p in proofs:
        ack = auth.ack("/handoff", p)["X-Polecat-Ack"]
        assert ack_proves(verify, "/handoff", p, ack)
    t3 = time.process_time()
    return tuple(1e6 * d / n for d in (t1 - t0, t2 - t1, t3 - t2))  # type: ignore[return-value]


def _full_guard_bytes() -> int:
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    guard = ReplayGuard()
    for i in range(REPLAY_MEMORY):
        guard.admit(f"{i:032x}", int(NOW), NOW)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    return sum(s.size_diff for s in after.compare_to(before, "filename"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--proofs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    best = min((_round(args.proofs) for _ in range(args.rounds)), key=sum)
    print(f"per request, µs of CPU: make proof {best[0]:.1f}, check + remember nonce {best[1]:.1f}, "
          f"ack make + check {best[2]:.1f}")
    auth = RequestAuth(hmac_verifier(SECRET), ME)
    proof = request_proof(hmac_signer(SECRET), "/handoff", ME, 10, NOW)
    auth.check("/handoff", 10, proof, NOW)
    t0 = time.process_time()
    for _ in range(args.proofs):
        auth.check("/handoff", 10, proof, NOW)
    print(f"refusing a replay: {1e6 * (time.process_time() - t0) / args.proofs:.1f} µs of CPU")
    print(f"a full replay memory ({REPLAY_MEMORY:,} nonces): {_full_guard_bytes() / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
