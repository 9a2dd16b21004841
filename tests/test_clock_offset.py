"""The monotonic -> wall conversion behind politeness anchors (polecat/clock.py ``wall_offset``)."""

from __future__ import annotations

from polecat.clock import to_wall
from polecat.fetch.http import Response
from polecat.node.pipeline import attempt_of
from polecat.testing.fakes import FakeClock

WALL, MONO = 1_000_000.0, 100.0
TRUE_OFFSET = WALL - MONO


def _response(first_byte: float) -> Response:
    return Response("http://a.test/", 200, (), b"", False, "text/html", None, None, None, None,
                    first_byte - 0.01, first_byte, first_byte + 0.01, 0)


def test_a_pause_between_the_two_clock_readings_never_makes_the_anchor_early() -> None:
    # Each reading comes 5 ms after the one before, as when the process is preempted (or loses the GIL)
    # between them: read wall then monotonic, the offset came out 5 ms small, the next request to the host
    # left 5 ms early and the server saw it 45 ms after the previous one at rate 20 (bench_workers in CI).
    clock = FakeClock(WALL, MONO, tick=0.005)
    attempt = attempt_of(_response(90.0), clock)
    assert attempt.headers_at is not None and attempt.headers_at >= 90.0 + TRUE_OFFSET
    assert attempt.ended >= 90.01 + TRUE_OFFSET
    assert to_wall(FakeClock(WALL, MONO, tick=0.005), 90.0) >= 90.0 + TRUE_OFFSET


def test_without_a_pause_the_conversion_is_exact() -> None:
    attempt = attempt_of(_response(90.0), FakeClock(WALL, MONO))
    assert attempt.headers_at == 90.0 + TRUE_OFFSET and attempt.started == 89.99 + TRUE_OFFSET
