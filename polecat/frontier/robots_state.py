"""robots.txt answers kept with the frontier: their record format and their restore on open.

Rules:

1. Only usable answers are kept (``is_answer``: 2xx rules, 3xx/4xx "no restrictions"); an unreachable
   robots.txt is not persisted, so a restart asks again (fail closed until then).
2. A record is ``status (u16) | fetched_at (wall seconds, f64) | body`` (the body only for 2xx, cut at
   ``robots.max_bytes``), under ``robots_key(origin)``: the origin's slice first, so it moves with it.
3. A restored answer applies until ``fetched_at`` + the cache lifetime, like a fresh one (RobotsPolicy
   rule 6): a restart or an adopted slice asks no host again while its answer is fresh.
"""

from __future__ import annotations

import struct

from polecat.frontier.keys import origin_of_robots_key
from polecat.frontier.robots import RobotsPolicy, is_answer

_REC = struct.Struct(">Hd")


def encode_robots(status: int, fetched_at: float, body: bytes, max_bytes: int) -> bytes | None:
    """The record of a robots.txt answer, or None when it is not kept (rule 1)."""
    if not is_answer(status):
        return None
    return _REC.pack(status, fetched_at) + (body[:max_bytes] if status < 300 else b"")


def decode_robots(raw: bytes | memoryview) -> tuple[int, float, bytes]:
    """``(status, fetched_at, body)`` of a stored answer."""
    status, fetched_at = _REC.unpack_from(raw)
    return status, fetched_at, bytes(raw[_REC.size :])


def restore_robots(policy: RobotsPolicy, key: bytes, raw: bytes | memoryview) -> None:
    """Reinstate one stored answer in ``policy`` (rule 3)."""
    status, fetched_at, body = decode_robots(raw)
    policy.restore(origin_of_robots_key(key), status, body, fetched_at)
