"""How a run ended and what a script should make of it: the exit codes and the one-line cause.

Rules:

1. A run *fetched something* when at least one page request got an HTTP response (any status). A run
   that had nothing to do (a finished crawl resumed, seeds already seen) fetched nothing but failed at
   nothing: that is success too.
2. Otherwise, when it tried (hosts given up or parked, seeds refused, pages attempted or skipped by
   robots.txt), it *fetched nothing*: :func:`nothing_fetched_cause` says why in one line, naming the
   first host or seed and the fix where there is one (``--allow-private`` for loopback, ``--dns-server``
   for names that do not resolve).
3. Exit codes of ``polecat crawl`` (README "Exit codes"): :data:`EXIT_OK` when it fetched something or
   had nothing to do; :data:`EXIT_NOTHING_FETCHED` under rule 2; :data:`EXIT_USAGE` for a bad command
   line or configuration (nothing was started); :data:`EXIT_FAILED` when the crawl stopped on an error
   (disk full...); :data:`EXIT_INTERRUPTED` after Ctrl-C or SIGTERM, whatever was fetched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOTHING_FETCHED = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""Any command whose output reader went away (128 + SIGPIPE, as C tools report it)."""

QUEUE_EMPTY = "queue empty"
MAX_PAGES = "max pages reached"
STOPPED = "stopped"
GAVE_UP = "every host left was given up"
FAILED = "error"


def idle_end(*, budget_full: bool, queued: int) -> str:
    """Why a run whose frontier has nothing to lease ended: its page budget is spent (what is left waits
    for a later run), every host still holding URLs was given up, or nothing is queued."""
    if budget_full:
        return MAX_PAGES
    return GAVE_UP if queued else QUEUE_EMPTY

_REFUSED_ADDRESS = re.compile(r"(\S+) is an? (loopback|private|link-local|reserved) address")

_PROXY_FIX = "the proxy failed it, not the host: check --proxy (fetch.proxy) and that the proxy is up"
_EXACT_FIXES: tuple[tuple[str, str], ...] = (
    ("WRONG_VERSION_NUMBER", "the port does not speak TLS (a plain-HTTP server?): try an http:// URL"),
    ("connect: proxy ", _PROXY_FIX),
    ("timeout: proxy ", _PROXY_FIX),
)
"""Causes a reason names exactly, checked before the kinds."""
_FIXES: tuple[tuple[str, str], ...] = (
    ("dns:", "the name does not resolve: check the URL, or name a resolver with --dns-server"),
    ("connect:", "the connection failed: check the host and port, and that the server is up"),
    ("timeout:", "the server did not answer in time: check that it is up, or raise fetch timeouts"),
    ("tls:", "the TLS certificate was refused: fix the certificate or set fetch.ca_bundle"),
    ("robots.txt answered", "its robots.txt refuses crawlers for now (RFC 9309 fail closed): try later"),
    ("robots.txt:", "its robots.txt could not be fetched: try later"),
)


def fix_for(reason: str) -> str:
    """The fix for a host's give-up or park reason, or ``""`` when there is none to suggest."""
    if _REFUSED_ADDRESS.search(reason):  # the reason already names the address and its kind
        return "add --allow-private (dns.allow_private) to crawl local or intranet hosts"
    for marker, fix in _EXACT_FIXES:
        if marker in reason:
            return fix
    # The kind comes first ("tls: URL: connect: ..."): the earliest marker names it.
    found = [(reason.find(marker), fix) for marker, fix in _FIXES if marker in reason]
    return min(found)[1] if found else ""


def explained(reason: str) -> str:
    """A give-up or park reason followed by its fix, where there is one."""
    fix = fix_for(reason)
    return f"{reason}; {fix}" if fix else reason


def nothing_fetched_cause(*, answered: int, attempted: int, parked: Sequence[tuple[str, str]],
                          seeds_refused: Sequence[tuple[str, str]],
                          done: Sequence[tuple[str, int]], seeds_refused_total: int = 0,
                          parked_total: int = 0) -> str:
    """One line saying why a run fetched nothing (rule 2), or ``""`` when it fetched something or had
    nothing to do (rule 1). ``seeds_refused`` names the first refused seeds, ``seeds_refused_total``
    counts them all (at least as many as named); ``parked`` names parked hosts (those in memory,
    polecat/frontier/host_table.py rule 11), ``parked_total`` counts them all."""
    if answered:
        return ""
    more = ""
    given_up = max(parked_total, len(parked))
    if parked:
        host, reason = parked[0]
        if given_up > 1:
            more = f" (and {given_up - 1} more hosts)"
        return f"nothing could be fetched: {host}{more}: {explained(reason)}"
    if given_up:
        return f"nothing could be fetched: {given_up} hosts were given up"
    if seeds_refused:
        url, why = seeds_refused[0]
        total = max(seeds_refused_total, len(seeds_refused))
        if total > 1:
            more = f" (and {total - 1} more seeds)"
        fix = "; remove the --block pattern" if why == "blocked" else ""
        return f"nothing could be fetched: seed {url} was refused ({why}){more}{fix}"
    robots = dict(done).get("skipped:robots", 0)
    if robots:
        return f"nothing could be fetched: robots.txt disallows all {robots} queued URLs"
    if attempted:
        return f"nothing could be fetched: none of {attempted} requests got an answer"
    return ""
