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
:class:`~polecat.parse.robots_match.RuleMatcher`, about 1 us a URL where ``Protego.can_fetch`` takes
2-8 us; tests/test_robots_rules.py checks the two agree (a differential hypothesis test).

Where the result differs from Google's conformance cases (tests/test_robots_conformance.py lists them):
percent-encoding is normalized on both sides before comparison, as RFC 9309 2.2.2 asks (Google compares
bytes as written and leaves encoding to the caller); the caller's own user agent is reduced to its
product token (``Foo Bar`` -> ``foo``) where Google refuses to match an agent with a space; lines are not
truncated at Google's 16 KiB line limit.

Which rules apply to a host now (the per-host state machine) is the frontier's: polecat/frontier/robots.py.
"""

from __future__ import annotations

import functools
import re

from protego import Protego

from polecat.parse.robots_match import RuleMatcher, url_path

__all__ = ["RobotsRules", "product_token"]

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
