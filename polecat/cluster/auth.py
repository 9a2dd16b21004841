"""Signing what machines send each other: HMAC-SHA256 with the cluster's shared secret.

The batch codec (:mod:`polecat.cluster.batch`) has the signature slot; these build its ``sign`` and
``verify`` callables. Verification compares in constant time, so a forger learns nothing from timing.

Rules:

1. A body's signature covers the body, so it can be checked only once the body is read. What may be read
   is decided first, from the request's head: the sender puts :data:`AUTH_HEADER` in it, the HMAC of
   the route, the receiver, the body's length, the time and a nonce (:func:`request_proof`), and a
   receiver reads no body whose head does not prove the secret, is older or newer than
   :data:`MAX_SKEW`, or names another route, receiver or length. A stranger can make a node read a head,
   never a body.
2. The head's proof does not replace the body's signature: both are checked.
3. Replays. The receiver a proof names is the address the sender reaches it at (the one its signed
   member record gives, :mod:`polecat.cluster.member_records`; ``""`` for a node outside a cluster), so
   a head captured on its way to one node does not verify at another. Each proof carries a fresh
   128-bit random nonce, and a receiver accepts each nonce once (:class:`ReplayGuard`): it remembers the
   nonces of the proofs it accepted for :data:`MAX_SKEW` (the time check refuses them after that), at
   most :data:`REPLAY_MEMORY` of them; when full it forgets the oldest and refuses every proof no newer
   than those (a bounded memory never lets a replay back in; a sender whose proof is refused that way
   sends again with a new one). Only a proof whose HMAC verifies is remembered, so a stranger cannot
   fill the memory. A replay is answered 401, logged and counted.
4. Acknowledgements prove the secret too: a receiver that accepts a batch or a bundle answers with
   :data:`ACK_HEADER`, the HMAC of the route and the request's nonce, and a sender counts a delivery
   only with a valid one. Something that is not a member cannot make a sender drop URLs from its
   outbox or release slices by answering 200.
5. A head of the previous release's form (``<seconds>.<length>.<HMAC>``: no receiver, no nonce) is
   refused with 401 saying so, so a node of that release is told what is missing, not crashed.
"""

from __future__ import annotations

import heapq
import hmac
import secrets
from dataclasses import dataclass

from polecat.cluster.batch import Signer, Verifier

AUTH_HEADER = "X-Polecat-Auth"
"""``2.<unix seconds>.<nonce>.<body length>.<hex HMAC>`` (rules 1, 3; :func:`request_proof`)."""
ACK_HEADER = "X-Polecat-Ack"
"""On a receiver's 200: the hex HMAC of the route and the request's nonce (rule 4)."""
MAX_SKEW = 300.0
"""Seconds a request head's proof stays good, either way (the machines' clocks differ a little)."""
REPLAY_MEMORY = 100_000
"""Nonces a receiver remembers at most (rule 3): 22 MB when full (benchmarks/bench_auth.py), enough for
330 proofs a second held for :data:`MAX_SKEW`."""
_VERSION = "2"
_HEX = frozenset("0123456789abcdef")


def hmac_signer(secret: str) -> Signer:
    """Signs with HMAC-SHA256 keyed by ``secret``."""
    key = secret.encode()
    return lambda data: hmac.digest(key, data, "sha256")  # one C call (hmac.new's object is Python)


def hmac_verifier(secret: str) -> Verifier:
    """True when the signature is ``secret``'s HMAC-SHA256 of the data."""
    sign = hmac_signer(secret)
    return lambda data, sig: hmac.compare_digest(sign(data), sig)


def _proof_text(route: str, receiver: str, length: int, seconds: int, nonce: str) -> bytes:
    return f"polecat-auth/{_VERSION} {route} {receiver} {length} {seconds} {nonce}".encode()


def request_proof(sign: Signer, route: str, receiver: str, length: int, now: float) -> str:
    """The :data:`AUTH_HEADER` value for a ``length``-byte body sent to ``route`` at ``receiver`` at
    ``now``, with a fresh nonce (rules 1, 3)."""
    seconds = int(now)
    nonce = secrets.token_hex(16)
    mac = sign(_proof_text(route, receiver, length, seconds, nonce)).hex()
    return f"{_VERSION}.{seconds}.{nonce}.{length}.{mac}"


@dataclass(frozen=True, slots=True)
class Proof:
    """The parts of an :data:`AUTH_HEADER` value."""

    seconds: int
    nonce: str
    length: int
    mac: bytes


def parse_proof(value: str) -> Proof | str:
    """The :class:`Proof` in ``value``, or why it is none (rules 1, 5)."""
    parts = value.strip().split(".")
    if len(parts) == 3 and parts[0].isdigit():
        return (f"{AUTH_HEADER} is of the previous release's form, without a receiver and a nonce: upgrade "
                "the sending node (every node of a cluster runs the same release)")
    if len(parts) != 5 or parts[0] != _VERSION:
        return f"{AUTH_HEADER} is missing or malformed"
    _, seconds, nonce, length, mac = parts
    if not (seconds.isdigit() and length.isdigit()) or len(seconds) > 12 or len(length) > 15 or not (
            len(nonce) == 32 and set(nonce) <= _HEX):
        return f"{AUTH_HEADER} is missing or malformed"
    try:
        raw = bytes.fromhex(mac)
    except ValueError:
        return f"{AUTH_HEADER} is missing or malformed"
    return Proof(int(seconds), nonce, int(length), raw)


class ReplayGuard:
    """The nonces a receiver accepted, bounded (rule 3). Sans-IO: ``now`` comes in."""

    def __init__(self, capacity: int = REPLAY_MEMORY) -> None:
        self._capacity = capacity
        self._seen: set[str] = set()
        self._order: list[tuple[int, str]] = []
        self.floor = -1
        """Proofs of this second or older are refused: the memory forgot nonces of it (rule 3)."""
        self.refused = 0

    def admit(self, nonce: str, seconds: int, now: float) -> str | None:
        """Remember ``nonce`` of a proof made at ``seconds``; why not, if it is refused."""
        while self._order and self._order[0][0] < now - MAX_SKEW:  # the time check refuses these anyway
            self._seen.discard(heapq.heappop(self._order)[1])
        if seconds <= self.floor:
            self.refused += 1
            return (f"{AUTH_HEADER} is older than this node's memory of nonces reaches (too many requests in "
                    f"{MAX_SKEW:g} s): send it again")
        if nonce in self._seen:
            self.refused += 1
            return f"{AUTH_HEADER} is a replay: its nonce was accepted already"
        self._seen.add(nonce)
        heapq.heappush(self._order, (seconds, nonce))
        while len(self._seen) > self._capacity:
            oldest, forgotten = heapq.heappop(self._order)
            self._seen.discard(forgotten)
            self.floor = max(self.floor, oldest)
        return None


class RequestAuth:
    """A receiver's check of request heads and its acknowledgements (rules 1, 3, 4, 5). ``receiver``:
    this node's name in proofs (rule 3); ``sign``: to acknowledge (none: no :data:`ACK_HEADER`)."""

    def __init__(self, verify: Verifier, receiver: str, *, sign: Signer | None = None,
                 capacity: int = REPLAY_MEMORY) -> None:
        self._verify = verify
        self._sign = sign
        self.receiver = receiver
        self.guard = ReplayGuard(capacity)

    @property
    def replays(self) -> int:
        """Proofs refused as replays so far (rule 3)."""
        return self.guard.refused

    def check(self, route: str, length: int, value: str, now: float) -> str | None:
        """Why a request head's :data:`AUTH_HEADER` ``value`` does not let its ``length``-byte body to
        ``route`` be read at ``now``, or None when it does (and its nonce is spent)."""
        proof = parse_proof(value)
        if isinstance(proof, str):
            return proof
        if proof.length != length:
            return f"{AUTH_HEADER} is for {proof.length} bytes, the body has {length}"
        if abs(now - proof.seconds) > MAX_SKEW:
            return f"{AUTH_HEADER} is more than {MAX_SKEW:g} s away from this node's clock"
        if not self._verify(_proof_text(route, self.receiver, length, proof.seconds, proof.nonce), proof.mac):
            return f"{AUTH_HEADER} does not verify (another secret, route or receiver than {self.receiver!r})"
        return self.guard.admit(proof.nonce, proof.seconds, now)

    def ack(self, route: str, value: str) -> dict[str, str]:
        """The headers acknowledging the request whose proof was ``value`` (rule 4)."""
        proof = parse_proof(value)
        if self._sign is None or isinstance(proof, str):
            return {}
        return {ACK_HEADER: self._sign(_ack_text(route, proof.nonce)).hex()}


def _ack_text(route: str, nonce: str) -> bytes:
    return f"polecat-ack/{_VERSION} {route} {nonce}".encode()


def ack_proves(verify: Verifier, route: str, proof: str, ack: str | None) -> bool:
    """Whether ``ack`` (a receiver's :data:`ACK_HEADER`) acknowledges the request sent with ``proof``
    (rule 4)."""
    parsed = parse_proof(proof)
    if ack is None or isinstance(parsed, str):
        return False
    try:
        raw = bytes.fromhex(ack.strip())
    except ValueError:
        return False
    return verify(_ack_text(route, parsed.nonce), raw)
