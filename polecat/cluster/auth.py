"""Signing hand-off batches between machines: HMAC-SHA256 with the cluster's shared secret.

The batch codec (:mod:`polecat.cluster.batch`) has the signature slot; these build its ``sign`` and
``verify`` callables. Verification compares in constant time, so a forger learns nothing from timing.
"""

from __future__ import annotations

import hashlib
import hmac

from polecat.cluster.batch import Signer, Verifier


def hmac_signer(secret: str) -> Signer:
    """Signs with HMAC-SHA256 keyed by ``secret``."""
    key = secret.encode()
    return lambda data: hmac.new(key, data, hashlib.sha256).digest()


def hmac_verifier(secret: str) -> Verifier:
    """True when the signature is ``secret``'s HMAC-SHA256 of the data."""
    sign = hmac_signer(secret)
    return lambda data, sig: hmac.compare_digest(sign(data), sig)
