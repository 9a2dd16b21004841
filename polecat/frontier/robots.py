"""Which robots.txt rules apply to a host now: the per-host state machine (sans-IO). Feed it outcomes, ask
it what applies; the rules themselves (parsing, matching) are polecat/parse/robots.py's.

Rules of RobotsPolicy (RFC 9309 2.3.1 and 2.4; one place, read top to bottom):

1. A host never seen has no rules: lookup says Fetch() and no page may be fetched before robots.txt.
2. 2xx: the first cfg.max_bytes of the body (at least 500 KiB, config-checked) are parsed; a line cut
   by the cap is dropped. State "ok".
3. 3xx reaching the policy means the HTTP layer gave up after 5 redirects (Fetcher.fetch_robots
   follows them itself, also cross-host): RFC 9309 2.3.1.2 lets us treat that as unavailable -> rule 4.
4. 4xx other than 429 (404, 410, 401, 403...): allow all. State "unavailable".
5. 429, 5xx, other statuses, and every network failure (DNS, connect, timeout, TLS): complete disallow
   (Closed(until)) and a retry at `until`, backing off from cfg.retry_base doubling to cfg.retry_cap,
   with jitter (x0.75..1.0) so hosts that failed together do not retry together; a Retry-After longer
   than the backoff wins (capped at cfg.retry_cap). At `until` lookup says Fetch(). State "unreachable".
6. Rules from 2xx/4xx serve for cfg.cache_ttl (<= 24 h). After that lookup says Ready(refresh_due=True):
   the cached copy keeps applying while the refresh is pending, and only then. A refresh that ends in
   rule 5 closes the host like a first failure, cached copy or not.
7. After cfg.max_unreachable_age of uninterrupted unreachability, a cached copy (if the host ever had
   one) applies again (RFC 9309 2.3.1.4), with refresh_due at each retry time. Without one the host
   stays closed.
8. Memory: the policy holds the state of at most :data:`MAX_HOSTS` hosts, the least recently asked
   dropped first. A usable answer dropped (or never read since the open) is read back through the
   loader (:meth:`RobotsPolicy.set_loader`: the frontier's stored answers) the first time the host is
   asked again; an unreachable one dropped is asked again at once (the host's own backoff, politeness
   rule 5, still spaces its requests). A breadth crawl of a million hosts thus holds the rules of the
   hosts in rotation, not of every host it ever asked.
9. The answers :meth:`RobotsPolicy.lookup` gives (``Ready``, fresh and due for a refresh) are made once
   for each rules object and shared by every host that has it: identical small files share one rules
   object (polecat/parse/robots.py interns them), so a million hosts of the same robots.txt hold no
   answer of their own, only their ``_Host``. Two answers a host were objects the garbage collector's
   young pass traversed (~6,700 of its ~98,000 in a 1M-host breadth crawl: benchmarks/README.md "Issue
   39: the loop in the 1M-host breadth crawl"). At most :data:`SHARED_ANSWERS` rules objects are kept.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from polecat.config import RobotsConfig
from polecat.parse.robots import RobotsRules, product_token

__all__ = ["MAX_HOSTS", "SHARED_ANSWERS", "Closed", "Fetch", "Ready", "RobotsDecision", "RobotsPolicy",
           "RobotsStats", "is_answer"]

MAX_HOSTS = 65_536
"""Hosts whose robots.txt state is held in memory at most (rule 8): the working set's 50,000 and room."""
SHARED_ANSWERS = 4096
"""Rules objects whose answers are kept to be shared (rule 9): as many as parse/robots.py interns."""

Loader = Callable[[str], "tuple[int, float, bytes] | None"]
"""A host's stored answer: ``(status, fetched_at, body)``, None when none is kept (rule 8)."""

def is_answer(status: int) -> bool:
    """Whether a robots.txt status is an answer the crawl may act on (2xx rules, 3xx/4xx "no
    restrictions"), as opposed to unreachable (429, 5xx: fail closed and retry)."""
    return 200 <= status < 500 and status != 429


@dataclass(frozen=True, slots=True)
class Ready:
    """Use ``rules``. ``refresh_due``: schedule a robots.txt refresh as this host's next request."""

    rules: RobotsRules
    refresh_due: bool


@dataclass(frozen=True, slots=True)
class Fetch:
    """No usable rules: fetch robots.txt before any page of this host."""


@dataclass(frozen=True, slots=True)
class Closed:
    """robots.txt is unreachable: fetch nothing from this host before ``until``, then retry robots.txt."""

    until: float


RobotsDecision = Ready | Fetch | Closed

_FETCH = Fetch()


@dataclass(frozen=True, slots=True)
class RobotsStats:
    fetches: int
    """robots.txt outcomes recorded (responses and failures)."""
    ok: int
    unavailable: int
    """4xx (and redirect chains that did not end)."""
    unreachable: int
    """429, 5xx and network failures."""
    failure_rate: float
    """unreachable / fetches (0.0 before any fetch)."""
    errors: tuple[tuple[str, int], ...]
    """Network failures by FetchError kind, e.g. ``(("dns", 3), ("timeout", 1))``."""
    too_complex: int = 0
    """2xx answers whose rules cannot be matched within the per-URL bound (robots_match): everything
    on those hosts is disallowed."""
    over_bound: int = 0
    """URLs disallowed because matching them against their host's rules would have passed the bound."""


@dataclass(slots=True)
class _Host:
    state: str
    rules: RobotsRules | None = None
    """The last rules obtained from a 2xx/4xx; kept through failures for rule 7."""
    fresh: Ready | None = None
    stale: Ready | None = None
    fetched_at: float = 0.0
    failures: int = 0
    unreachable_since: float = 0.0
    retry_at: float = 0.0


class RobotsPolicy:
    """Per-host robots.txt state machine (sans-IO; see the rules above). Feed it outcomes, ask it what
    applies now."""

    def __init__(self, cfg: RobotsConfig, user_agent: str, *, rng: random.Random | None = None) -> None:
        self._cfg = cfg
        self._agent = product_token(user_agent)
        self._rng = rng or random.Random()
        self._hosts: OrderedDict[str, _Host] = OrderedDict()
        """Least recently asked first (rule 8)."""
        self._load: Loader | None = None
        self._ok = self._unavailable = self._unreachable = self._too_complex = 0
        self._indexed: dict[str, RobotsRules] = {}
        """Hosts whose rules in use are indexed: the only ones whose URL checks can pass the bound."""
        self._errors: dict[str, int] = {}
        self._answers: dict[RobotsRules, tuple[Ready, Ready]] = {}
        """The fresh and the stale answer of each rules object (rule 9), by identity."""

    def set_loader(self, load: Loader) -> None:
        """Where answers not in memory are read back from (rule 8)."""
        self._load = load

    def lookup(self, host: str, now: float) -> RobotsDecision:
        """What applies to ``host`` at ``now``."""
        h = self._hosts.get(host)
        if h is None:
            stored = self._load(host) if self._load is not None else None
            if stored is None:
                return _FETCH
            status, fetched_at, body = stored
            self.restore(host, status, body, fetched_at)
            h = self._hosts.get(host)
            if h is None:
                return _FETCH
        else:
            self._hosts.move_to_end(host)
        if h.failures == 0:
            assert h.fresh is not None and h.stale is not None
            return h.fresh if now - h.fetched_at < self._cfg.cache_ttl else h.stale
        if h.rules is not None and now - h.unreachable_since >= self._cfg.max_unreachable_age:
            assert h.fresh is not None and h.stale is not None
            return h.stale if now >= h.retry_at else h.fresh
        return Closed(h.retry_at) if now < h.retry_at else _FETCH

    def record_response(
        self, host: str, status: int, body: bytes, now: float, *, retry_after: float | None = None
    ) -> None:
        """Record the final response to a robots.txt fetch (after redirects)."""
        if 200 <= status < 300:
            self._ok += 1
            rules = self._parse(body)
            self._too_complex += rules.too_complex
            self._usable(host, "ok", rules, now)
        elif is_answer(status):
            self._unavailable += 1
            self._usable(host, "unavailable", RobotsRules.allow_all(), now)
        else:
            self._fail(host, now, retry_after)

    def restore(self, host: str, status: int, body: bytes, fetched_at: float) -> None:
        """Reinstate a robots.txt answer an earlier run recorded (2xx or 4xx; not counted as a fetch):
        it applies until ``fetched_at`` + the cache lifetime, like a fresh one."""
        if 200 <= status < 300:
            self._usable(host, "ok", self._parse(body), fetched_at)
        elif is_answer(status):
            self._usable(host, "unavailable", RobotsRules.allow_all(), fetched_at)

    def record_failure(self, host: str, now: float, exc: BaseException) -> None:
        """Record a robots.txt fetch that produced no response (DNS, connect, timeout, TLS...)."""
        kind = str(getattr(exc, "kind", type(exc).__name__))
        self._errors[kind] = self._errors.get(kind, 0) + 1
        self._fail(host, now, None)

    def host_state(self, host: str) -> str:
        """``"ok"``, ``"unavailable"``, ``"unreachable"`` or ``"unknown"`` (never fetched)."""
        h = self._hosts.get(host)
        return h.state if h is not None else "unknown"

    def stats(self) -> RobotsStats:
        fetches = self._ok + self._unavailable + self._unreachable
        return RobotsStats(
            fetches=fetches,
            ok=self._ok,
            unavailable=self._unavailable,
            unreachable=self._unreachable,
            failure_rate=self._unreachable / fetches if fetches else 0.0,
            errors=tuple(sorted(self._errors.items())),
            too_complex=self._too_complex,
            over_bound=sum(r.exhausted for r in {id(r): r for r in self._indexed.values()}.values()),
        )

    def _parse(self, body: bytes) -> RobotsRules:
        cap = self._cfg.max_bytes
        if len(body) > cap:
            body = body[:cap]
            cut = body.rfind(b"\n")
            body = body[: cut + 1] if cut >= 0 else b""
        return RobotsRules.parse(body.decode("utf-8", errors="replace"), self._agent)

    def _usable(self, host: str, state: str, rules: RobotsRules, now: float) -> None:
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = _Host(state)
            self._bound()
        h.state = state
        h.rules = rules
        if rules.indexed:
            self._indexed[host] = rules
        else:
            self._indexed.pop(host, None)
        answers = self._answers.get(rules)
        if answers is None:
            if len(self._answers) >= SHARED_ANSWERS:  # rule 9: those of rules no longer interned go
                self._answers.clear()
            answers = self._answers[rules] = (Ready(rules, False), Ready(rules, True))
        h.fresh, h.stale = answers
        h.fetched_at = now
        h.failures = 0

    def _fail(self, host: str, now: float, retry_after: float | None) -> None:
        self._unreachable += 1
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = _Host("unreachable")
            self._bound()
        if h.failures == 0:
            h.unreachable_since = now
        h.state = "unreachable"
        h.failures += 1
        cfg = self._cfg
        delay = min(cfg.retry_cap, cfg.retry_base * 2.0 ** min(h.failures - 1, 60))
        delay *= 1.0 - 0.25 * self._rng.random()
        if retry_after is not None:
            delay = max(delay, min(retry_after, cfg.retry_cap))
        h.retry_at = now + delay

    def _bound(self) -> None:
        """Drop the least recently asked hosts past :data:`MAX_HOSTS` (rule 8)."""
        hosts = self._hosts
        while len(hosts) > MAX_HOSTS:
            dropped, _ = hosts.popitem(last=False)
            self._indexed.pop(dropped, None)
