"""Signing what machines send each other: HMAC-SHA256 with the cluster's shared secret.

The batch codec (:mod:`polecat.cluster.batch`) has the signature slot; these build its ``sign`` and
``verify`` callables. Verification compares in constant time, so a forger learns nothing from timing.

Rules:

1. A body's signature covers the body, so it can be checked only once the body is read. What may be read
   is decided first, from the request's head: the sender puts :data:`AUTH_HEADER`, the HMAC of the
   route, the body's length and the time, in it, and a receiver reads no body whose head does not prove
   the secret, is older or newer than :data:`MAX_SKEW`, or names another route or length. A stranger can
   make a node read a head, never a body.
2. The head's proof does not replace the body's signature: both are checked.
"""

from __future__ import annotations

import hashlib
import hmac

from polecat.cluster.batch import Signer, Verifier

AUTH_HEADER = "X-Polecat-Auth"
"""``<unix seconds>.<body length>.<hex HMAC of "<route> <length> <seconds>">`` (rule 1)."""
MAX_SKEW = 300.0
"""Seconds a request head's proof stays good, either way (the machines' clocks differ a little)."""


def hmac_signer(secret: str) -> Signer:
    """Signs with HMAC-SHA256 keyed by ``secret``."""
    key = secret.encode()
    return lambda data: hmac.new(key, data, hashlib.sha256).digest()


def hmac_verifier(secret: str) -> Verifier:
    """True when the signature is ``secret``'s HMAC-SHA256 of the data."""
    sign = hmac_signer(secret)
    return lambda data, sig: hmac.compare_digest(sign(data), sig)


def request_proof(sign: Signer, route: str, length: int, now: float) -> str:
    """The :data:`AUTH_HEADER` value for a ``length``-byte body sent to ``route`` at ``now`` (rule 1)."""
    seconds = int(now)
    return f"{seconds}.{length}.{sign(f'{route} {length} {seconds}'.encode()).hex()}"


def check_request_proof(verify: Verifier, route: str, length: int, value: str, now: float) -> str | None:
    """Why a request head's :data:`AUTH_HEADER` ``value`` does not let its ``length``-byte body to
    ``route`` be read at ``now``, or None when it does (rule 1)."""
    seconds, _, rest = value.strip().partition(".")
    declared, _, sig = rest.partition(".")
    if not (seconds.isdigit() and declared.isdigit() and sig) or len(seconds) > 12 or len(declared) > 15:
        return f"{AUTH_HEADER} is missing or malformed"
    if int(declared) != length:
        return f"{AUTH_HEADER} is for {declared} bytes, the body has {length}"
    if abs(now - int(seconds)) > MAX_SKEW:
        return f"{AUTH_HEADER} is more than {MAX_SKEW:g} s away from this node's clock"
    try:
        raw = bytes.fromhex(sig)
    except ValueError:
        return f"{AUTH_HEADER} is missing or malformed"
    if not verify(f"{route} {length} {seconds}".encode(), raw):
        return f"{AUTH_HEADER} does not verify"
    return None
