"""Replay-proof messages (cluster/auth.py rules 3-5), sans-IO: a proof names its receiver and a nonce,
is accepted once, within a bounded memory; acknowledgements prove the secret back."""

from __future__ import annotations

from polecat.cluster.auth import (
    MAX_SKEW,
    ReplayGuard,
    RequestAuth,
    ack_proves,
    hmac_signer,
    hmac_verifier,
    request_proof,
)

SECRET = "the secret of the replay tests"
ME = "http://10.0.0.2:8470"
SIGN, VERIFY = hmac_signer(SECRET), hmac_verifier(SECRET)
NOW = 1_800_000_000.0


def test_a_proof_is_good_once_and_only_at_its_receiver() -> None:
    auth = RequestAuth(VERIFY, ME)
    proof = request_proof(SIGN, "/handoff", ME, 10, NOW)
    assert auth.check("/handoff", 10, proof, NOW) is None
    assert "replay" in (auth.check("/handoff", 10, proof, NOW + 1) or "")
    assert auth.replays == 1
    other = RequestAuth(VERIFY, "http://10.0.0.3:8470")
    captured = request_proof(SIGN, "/handoff", ME, 10, NOW)
    assert "does not verify" in (other.check("/handoff", 10, captured, NOW) or "")
    assert not other.guard._seen  # a proof that does not verify is not remembered: strangers cannot fill it


def test_a_proof_of_the_previous_release_is_refused_naming_what_is_missing() -> None:
    old = f"{int(NOW)}.10.{SIGN(f'/handoff 10 {int(NOW)}'.encode()).hex()}"
    why = RequestAuth(VERIFY, ME).check("/handoff", 10, old, NOW) or ""
    assert "previous release" in why and "receiver" in why and "nonce" in why


def test_the_memory_of_nonces_is_bounded_and_never_readmits_a_replay() -> None:
    guard = ReplayGuard(capacity=3)
    nonces = [f"{i:032x}" for i in range(5)]
    for i, nonce in enumerate(nonces[:4]):
        assert guard.admit(nonce, int(NOW) + i, NOW + 4) is None
    assert guard.floor == int(NOW)  # the oldest was forgotten: its second is closed
    assert "older than" in (guard.admit(nonces[0], int(NOW), NOW + 4) or "")  # its replay
    assert "older than" in (guard.admit(nonces[4], int(NOW), NOW + 4) or "")  # a late one: sent again
    assert "replay" in (guard.admit(nonces[3], int(NOW) + 3, NOW + 4) or "")
    assert guard.refused == 3
    assert guard.admit(nonces[4], int(NOW) + 4, NOW + 4) is None
    # Past the skew, the time check refuses old proofs: the memory lets them go.
    assert guard.admit("f" * 32, int(NOW + 2 * MAX_SKEW), NOW + 2 * MAX_SKEW) is None
    assert len(guard._seen) == 1


def test_an_acknowledgement_proves_the_secret_for_that_request() -> None:
    auth = RequestAuth(VERIFY, ME, sign=SIGN)
    proof = request_proof(SIGN, "/internal/adopt", ME, 10, NOW)
    (ack,) = auth.ack("/internal/adopt", proof).values()
    assert ack_proves(VERIFY, "/internal/adopt", proof, ack)
    another = request_proof(SIGN, "/internal/adopt", ME, 10, NOW)
    assert not ack_proves(VERIFY, "/internal/adopt", another, ack)  # bound to the request's nonce
    assert not ack_proves(VERIFY, "/handoff", proof, ack)
    assert not ack_proves(VERIFY, "/internal/adopt", proof, None)
    assert not ack_proves(VERIFY, "/internal/adopt", proof, "zz")
    wrong = "not the secret, but long"
    stranger = RequestAuth(hmac_verifier(wrong), ME, sign=hmac_signer(wrong))
    (forged,) = stranger.ack("/internal/adopt", proof).values()
    assert not ack_proves(VERIFY, "/internal/adopt", proof, forged)
