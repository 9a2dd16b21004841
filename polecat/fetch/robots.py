"""robots.txt rules for one crawler (RFC 9309): protego parses, a compiled matcher answers.

:class:`RobotsRules` answers "may this crawler fetch this URL" for one robots.txt and one user agent.
The wrapper normalizes the text before protego sees it, so that group selection follows RFC 9309 and
not protego's more generous habits:

- Lines that are not a known directive are dropped. RFC 9309 2.2 lets crawlers ignore unknown records;
  protego instead lets an unknown line end the current group, which splits ``User-agent: a`` /
  ``Foo: x`` / ``User-agent: b`` into two groups.
- Every ``User-agent`` value is reduced to its product token (the leading ``[A-Za-z_-]`` run, as
  Google does: ``User-agent: Foo Bar`` names ``foo``) and then rewritten to one of three values: our
  own token, ``*``, or a sentinel that never matches. Group selection is then an exact, case-insensitive
  product-token match (RFC 9309 2.2.1); protego's substring matching (``User-agent: pole`` would match
  ``polecat``) cannot fire.

protego parses the normalized text (Crawl-delay, Sitemap). The Allow/Disallow lines of the groups that
apply to us are collected in the same pass and compiled into a
:class:`~polecat.fetch.robots_match.RuleMatcher`, about 1 us a URL where ``Protego.can_fetch`` takes
2-8 us; tests/test_robots_rules.py checks the two agree (a differential hypothesis test).

Where the result differs from Google's conformance cases (tests/test_robots_conformance.py lists them):
percent-encoding is normalized on both sides before comparison, as RFC 9309 2.2.2 asks (Google compares
bytes as written and leaves encoding to the caller); the caller's own user agent is reduced to its
product token (``Foo Bar`` -> ``foo``) where Google refuses to match an agent with a space; lines are not
truncated at Google's 16 KiB line limit.

Then :class:`RobotsPolicy` holds, per host, which rules apply now (see its rules below).
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

from protego import Protego

from polecat.config import RobotsConfig
from polecat.fetch.robots_match import RuleMatcher, url_path

__all__ = [
    "Closed",
    "Fetch",
    "Ready",
    "RobotsDecision",
    "RobotsPolicy",
    "RobotsRules",
    "RobotsStats",
    "is_answer",
    "product_token",
]

# The directive names protego understands (including its tolerated misspellings). Any other line is
# dropped before parsing so it cannot end a group.
_USER_AGENT = frozenset({"user-agent", "useragent", "user agent"})
_DIRECTIVES = _USER_AGENT | frozenset({
    "allow", "disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw",
    "sitemap", "sitemaps", "site-map", "crawl-delay", "crawl delay",
    "request-rate", "request rate", "visit-time", "visit time", "host",
})
_TOKEN = re.compile(r"[A-Za-z_-]+")
_RULES = {
    "allow": True, "disallow": False, "dissallow": False, "dissalow": False, "disalow": False,
    "diasllow": False, "disallaw": False,
}
_SITE_WIDE = frozenset({"sitemap", "sitemaps", "site-map", "host"})
# Texts up to this size are interned: many hosts serve byte-identical small robots.txt files.
_INTERN_MAX_CHARS = 8192


def product_token(user_agent: str) -> str:
    """The lowercase product token of a user agent: ``polecat/0.1 (+https://x)`` -> ``polecat``."""
    m = _TOKEN.match(user_agent.strip())
    return m.group(0).lower() if m else user_agent.strip().lower()


def _split_directive(line: str) -> tuple[str, str] | None:
    """``(field, value)`` of a known directive line, or None. Accepts ``field: value`` and, as protego
    does, ``field value`` without a colon."""
    field, sep, value = line.partition(":")
    if sep:
        name = field.strip().lower()
        if name in _DIRECTIVES:
            return name, value.strip()
    words = line.split()
    for n in (1, 2):
        name = " ".join(words[:n]).lower()
        if name in _DIRECTIVES:
            return name, " ".join(words[n:])
    return None


def _normalize(text: str, token: str) -> tuple[str, list[tuple[bool, str]] | None]:
    """Rewrite robots.txt text for protego (see the module docstring), and collect the Allow/Disallow
    rules of the groups that apply to ``token`` (RFC 9309 2.2.1: all groups naming it, combined; else
    all ``*`` groups; None when no group applies, so nothing can be disallowed)."""
    other = f"{token}~other"  # longer than token, so never a substring of it
    out: list[str] = []
    groups: list[list[tuple[bool, str]]] = []
    ours: set[int] = set()
    star: set[int] = set()
    agents_open = False  # the previous record was a User-agent line: a new one joins the same group
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parsed = _split_directive(line)
        if parsed is None:
            continue
        field, value = parsed
        if field in _USER_AGENT:
            if not agents_open:
                groups.append([])
                agents_open = True
            m = _TOKEN.match(value)
            agent = m.group(0).lower() if m else ""
            if agent == token:
                value = token
                ours.add(len(groups) - 1)
            elif not agent and value.startswith("*"):
                value = "*"
                star.add(len(groups) - 1)
            else:
                value = other
            field = "user-agent"
        elif field not in _SITE_WIDE:  # Sitemap and Host belong to no group
            agents_open = False
            if field in _RULES:
                if groups and value:
                    groups[-1].append((_RULES[field], value))
                # protego reads only Crawl-delay and Sitemap here: one empty rule per run of rules keeps
                # the group boundaries it needs, without the cost of parsing each rule (128 ms for
                # 25,000 wildcard rules).
                if out and out[-1] == "disallow: ":
                    continue
                field, value = "disallow", ""
        out.append(f"{field}: {value}")
    chosen = ours or star
    rules = [rule for i in sorted(chosen) for rule in groups[i]] if chosen else None
    return "\n".join(out), rules


class RobotsRules:
    """The rules of one robots.txt for one user agent. Immutable once built; ``allowed`` is cheap."""

    __slots__ = ("_matcher", "_verdict", "crawl_delay", "sitemaps")

    crawl_delay: float | None
    """The Crawl-delay of our group, in seconds (no ceiling applied here), or None."""
    sitemaps: tuple[str, ...]
    """Sitemap URLs listed anywhere in the file, in order."""

    def __init__(self, text: str, user_agent: str) -> None:
        """Parse robots.txt ``text`` for ``user_agent`` (a full User-Agent string or a bare token)."""
        token = product_token(user_agent)
        normalized, rules = _normalize(text, token)
        parser = Protego.parse(normalized)
        self.sitemaps = tuple(parser.sitemaps)
        self.crawl_delay = parser.crawl_delay(token) if rules is not None else None
        # No rule applies to us: nothing can be disallowed, so skip matching on every query.
        self._matcher = RuleMatcher(rules) if rules else None
        self._verdict = True

    @classmethod
    def parse(cls, text: str, user_agent: str) -> RobotsRules:
        """Like the constructor, but small texts are interned: identical files share one object."""
        if len(text) <= _INTERN_MAX_CHARS:
            return _interned(text, product_token(user_agent))
        return cls(text, user_agent)

    @classmethod
    def allow_all(cls) -> RobotsRules:
        """Rules that allow everything (robots.txt unavailable: 4xx)."""
        return _ALLOW_ALL

    @classmethod
    def disallow_all(cls) -> RobotsRules:
        """Rules that allow nothing (robots.txt unreachable: 5xx, network failure)."""
        return _DISALLOW_ALL

    @classmethod
    def _fixed(cls, verdict: bool) -> RobotsRules:
        rules = cls.__new__(cls)
        rules._matcher = None
        rules._verdict = verdict
        rules.crawl_delay = None
        rules.sitemaps = ()
        return rules

    def allowed(self, url: str) -> bool:
        """May ``url`` (absolute, canonical) be fetched? For parsed rules ``/robots.txt`` itself is
        always allowed."""
        matcher = self._matcher
        if matcher is None:
            return self._verdict
        path = url_path(url)
        return path == "/robots.txt" or matcher.allowed_path(path)

    @property
    def too_complex(self) -> bool:
        """The rules are past the matching bound (see robots_match): every URL is disallowed."""
        return self._matcher is not None and self._matcher.too_complex

    @property
    def indexed(self) -> bool:
        """Enough wildcard rules to be indexed: URL checks past the bound can happen (``exhausted``)."""
        return self._matcher is not None and self._matcher.indexed

    @property
    def exhausted(self) -> int:
        """URLs these rules disallowed because matching them would have passed the bound."""
        return self._matcher.exhausted if self._matcher is not None else 0

    def __repr__(self) -> str:
        kind = "parsed" if self._matcher is not None else ("allow-all" if self._verdict else "disallow-all")
        return f"<RobotsRules {kind} crawl_delay={self.crawl_delay} sitemaps={len(self.sitemaps)}>"


_ALLOW_ALL = RobotsRules._fixed(True)
_DISALLOW_ALL = RobotsRules._fixed(False)


@functools.lru_cache(maxsize=4096)
def _interned(text: str, token: str) -> RobotsRules:
    return RobotsRules(text, token)


# --- per-host policy ---------------------------------------------------------------------------------
#
# Rules of RobotsPolicy (RFC 9309 2.3.1 and 2.4; one place, read top to bottom):
#
# 1. A host never seen has no rules: lookup says Fetch() and no page may be fetched before robots.txt.
# 2. 2xx: the first cfg.max_bytes of the body (at least 500 KiB, config-checked) are parsed; a line cut
#    by the cap is dropped. State "ok".
# 3. 3xx reaching the policy means the HTTP layer gave up after 5 redirects (Fetcher.fetch_robots
#    follows them itself, also cross-host): RFC 9309 2.3.1.2 lets us treat that as unavailable -> rule 4.
# 4. 4xx other than 429 (404, 410, 401, 403...): allow all. State "unavailable".
# 5. 429, 5xx, other statuses, and every network failure (DNS, connect, timeout, TLS): complete disallow
#    (Closed(until)) and a retry at `until`, backing off from cfg.retry_base doubling to cfg.retry_cap,
#    with jitter (x0.75..1.0) so hosts that failed together do not retry together; a Retry-After longer
#    than the backoff wins (capped at cfg.retry_cap). At `until` lookup says Fetch(). State "unreachable".
# 6. Rules from 2xx/4xx serve for cfg.cache_ttl (<= 24 h). After that lookup says Ready(refresh_due=True):
#    the cached copy keeps applying while the refresh is pending, and only then. A refresh that ends in
#    rule 5 closes the host like a first failure, cached copy or not.
# 7. After cfg.max_unreachable_age of uninterrupted unreachability, a cached copy (if the host ever had
#    one) applies again (RFC 9309 2.3.1.4), with refresh_due at each retry time. Without one the host
#    stays closed.


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
        self._hosts: dict[str, _Host] = {}
        self._ok = self._unavailable = self._unreachable = self._too_complex = 0
        self._indexed: dict[str, RobotsRules] = {}
        """Hosts whose rules in use are indexed: the only ones whose URL checks can pass the bound."""
        self._errors: dict[str, int] = {}

    def lookup(self, host: str, now: float) -> RobotsDecision:
        """What applies to ``host`` at ``now``."""
        h = self._hosts.get(host)
        if h is None:
            return _FETCH
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
        h.state = state
        h.rules = rules
        if rules.indexed:
            self._indexed[host] = rules
        else:
            self._indexed.pop(host, None)
        h.fresh = Ready(rules, False)
        h.stale = Ready(rules, True)
        h.fetched_at = now
        h.failures = 0

    def _fail(self, host: str, now: float, retry_after: float | None) -> None:
        self._unreachable += 1
        h = self._hosts.get(host)
        if h is None:
            h = self._hosts[host] = _Host("unreachable")
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
