"""How a request's end becomes a :class:`~polecat.frontier.records.Completion`: retry, fail, park or
strike. The node reports what happened (a response, or the :class:`~polecat.errors.FetchError` with its
``kind``, ``retryable`` and ``host_wide``); these rules decide what it means for the URL and the host.

Rules (this module owns them; what a strike or a quarantine then does is polecat/frontier/politeness.py's):

1. A page request that got no response: a retryable error (DNS, connect, timeout, protocol) is outcome
   ``retry`` and the attempt counts as failed (quarantine with backoff, a strike); any other is
   ``failed`` for that URL. An error every request to the host would repeat in this run (``host_wide``:
   the SSRF guard refuses its address) also parks the host at once, its queue kept for a later run.
2. A robots.txt request that got no response is a strike, whatever the error (the attempt is
   unusable): unread, the robots.txt keeps the host closed, and without a strike an error retrying
   cannot mend (TLS to a plain-HTTP port) would retry the robots.txt of a bounded run for ever. When the
   failure was on a redirect hop to another host, the leased host's own last attempt stands (marked
   unusable) and the failure is only the robots outcome's.
3. A robots.txt that answered is unusable when its status is no answer (429, 5xx: polecat/frontier/robots.py
   ``is_answer``): a strike, as rule 2.
4. A robots.txt answered 2xx whose rules are in force names the sitemaps to read (:func:`sitemaps_named`);
   which of them are queued is the refresh settings' call (polecat/node/pipeline.py ``add_sitemaps``).
5. The error a completion keeps (rule 2's, for polecat/frontier/robots.py to read its kind) keeps no
   traceback, nor do the errors it chains: a traceback holds every frame from the lease's task down to
   the raise, and the task's own frame holds the completion, so each failed robots.txt was a cycle of
   ~13 objects (frames, tracebacks, the task, its coroutines and timers) that only the garbage collector
   freed. Seeds of hosts that do not resolve made ~42,000 such objects for every young pass, one pass
   every ~3 s of 30-72 ms (benchmarks/README.md "Issue 39: the loop in the 1M-host breadth crawl").
"""

from __future__ import annotations

import dataclasses

from polecat.errors import FetchError
from polecat.frontier.politeness import Attempt
from polecat.frontier.records import Completion, Lease, Outcome, RobotsOutcome, origin_of
from polecat.frontier.robots import Ready, RobotsPolicy, is_answer

_CHAIN_MOST = 16
"""Chained errors rule 5 looks at, at most."""


def page_failed(started: float, ended: float, exc: FetchError) -> Completion:
    """Rule 1."""
    attempt = Attempt(started, ended, None, failed=exc.retryable)
    outcome: Outcome = "retry" if exc.retryable else "failed"
    detail = f"{exc.kind}: {exc}"
    return Completion(attempt, outcome, exc.kind, detail=detail, park=detail if exc.host_wide else "")


def without_frames(exc: FetchError) -> FetchError:
    """``exc`` with the tracebacks of it and of the errors it chains dropped (rule 5); its messages, kind
    and chain stay."""
    at: BaseException | None = exc
    for _ in range(_CHAIN_MOST):  # a chain is acyclic when raised; one built by hand need not be
        if at is None:
            break
        at.__traceback__ = None
        at = at.__cause__ or at.__context__
    return exc


def robots_failed(started: float, ended: float, exc: FetchError, hop_from: Attempt | None) -> Completion:
    """Rules 2 and 5. ``hop_from``: the leased host's last attempt when the failure was on another host."""
    failed = RobotsOutcome(error=without_frames(exc))
    if hop_from is not None:
        return Completion(dataclasses.replace(hop_from, unusable=True), "fetched", f"robots:{exc.kind}",
                          detail=f"robots.txt: {exc.kind}: {exc}", robots=failed)
    failure = page_failed(started, ended, exc)
    return dataclasses.replace(failure, attempt=dataclasses.replace(failure.attempt, unusable=True),
                               robots=failed)


def robots_answered(attempt: Attempt, status: int, body: bytes, retry_after: float | None,
                    ip: str | None) -> Completion:
    """Rule 3."""
    return Completion(dataclasses.replace(attempt, unusable=not is_answer(status)), "fetched", str(status),
                      ip=ip, detail=f"robots.txt answered {status}",
                      robots=RobotsOutcome(status, body, retry_after))


def sitemaps_named(robots: RobotsPolicy, lease: Lease, completion: Completion,
                   now: float) -> tuple[str, tuple[str, ...]] | None:
    """Rule 4: after ``completion`` of a robots lease was recorded, the origin and the sitemaps its
    robots.txt names, or None when it gave no rules in force."""
    got = completion.robots
    if lease.kind != "robots" or got is None or got.status // 100 != 2:
        return None
    origin = origin_of(lease.url)
    decision = robots.lookup(origin, now)
    return (origin, decision.rules.sitemaps) if isinstance(decision, Ready) else None
