"""Fetch one robots.txt and feed the outcome to a RobotsPolicy: the policy and the fetcher together,
for tests. (The node does not use this: a robots lease's outcome travels in its Completion, and the
frontier records it.)"""

from __future__ import annotations

import time
from collections.abc import Callable

from polecat.errors import FetchError
from polecat.fetch.http import Fetcher, RedirectPacer, Response
from polecat.frontier.robots import RobotsDecision, RobotsPolicy


async def refresh_robots(
    fetcher: Fetcher,
    policy: RobotsPolicy,
    key: str,
    origin: str,
    *,
    clock: Callable[[], float] = time.monotonic,
    pacer: RedirectPacer | None = None,
) -> tuple[Response | FetchError, RobotsDecision]:
    """GET ``origin + "/robots.txt"`` (following up to 5 redirects, each paced by ``pacer``), record the
    outcome under the policy key ``key``, and return the outcome with the decision that applies now.
    Never raises a FetchError: a failure is an outcome (RFC 9309: unreachable, fail closed)."""
    outcome: Response | FetchError
    try:
        outcome = await fetcher.fetch_robots(origin.rstrip("/") + "/robots.txt", pacer=pacer)
    except FetchError as exc:
        outcome = exc
        now = clock()
        policy.record_failure(key, now, exc)
    else:
        now = clock()
        policy.record_response(key, outcome.status, outcome.body, now, retry_after=outcome.retry_after)
    return outcome, policy.lookup(key, now)
