"""robots.txt answers kept with the frontier: their record format, their restore, and
:class:`RobotsAnswers`, the frontier's part that feeds each robots.txt outcome to the policy and keeps it.

Rules:

1. Only usable answers are kept (``is_answer``: 2xx rules, 3xx/4xx "no restrictions"); an unreachable
   robots.txt is not persisted, so a restart asks again (fail closed until then).
2. A record is ``status (u16) | fetched_at (wall seconds, f64) | body`` (the body only for 2xx, cut at
   ``robots.max_bytes``), under ``robots_key(origin)``: the origin's slice first, so it moves with it.
3. A restored answer applies until ``fetched_at`` + the cache lifetime, like a fresh one (RobotsPolicy
   rule 6): a restart or an adopted slice asks no host again while its answer is fresh.
4. Answers are restored when the policy first asks for their host (RobotsPolicy rule 8), not as the
   frontier opens: an open reads no robots.txt answer, and memory holds the policy's bound of them.
"""

from __future__ import annotations

import struct

from polecat.config import RobotsConfig
from polecat.frontier.keys import origin_of_robots_key, robots_key
from polecat.frontier.records import RobotsOutcome
from polecat.frontier.robots import RobotsPolicy, is_answer
from polecat.frontier.tables import FrontierTables
from polecat.writes import Put, Write

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


class RobotsAnswers:
    """The robots.txt answers of a frontier: restored into the policy on open, recorded as they come."""

    def __init__(self, db: FrontierTables, policy: RobotsPolicy, cfg: RobotsConfig) -> None:
        self._db = db
        self._policy = policy
        self._cfg = cfg
        policy.set_loader(self.answer)  # rule 4

    def record(self, origin: str, got: RobotsOutcome | None, now: float) -> list[Write]:
        """Feed a robots.txt outcome to the policy and keep a usable answer (rules 1-2): a restart or an
        adopting frontier applies it."""
        if got is None:
            return []
        if got.error is not None:
            self._policy.record_failure(origin, now, got.error)
            return []
        self._policy.record_response(origin, got.status, got.body, now, retry_after=got.retry_after)
        rec = encode_robots(got.status, now, got.body, self._cfg.max_bytes)
        return [] if rec is None else [Put("robots", robots_key(origin), rec)]

    def answer(self, origin: str) -> tuple[int, float, bytes] | None:
        """The stored robots.txt answer of ``origin``: status, fetch time, body; None if none."""
        raw = self._db.get("robots", robots_key(origin))
        return decode_robots(raw) if raw is not None else None
