"""Spider traps: URLs and pages that would let one host cost unbounded fetches, and their budgets.

Rules (this module owns them; the frontier asks before it queues a discovered URL, the pipeline reports
soft-404 pages):

1. Repeated segments: a path in which one segment occurs more than :data:`MAX_SEGMENT_REPEATS` times
   (``/a/b/a/b/a/b/``) is refused (``trap:repeated_path``), and so is a path of more than
   :data:`MAX_SEGMENTS` segments (``trap:deep_path``). A host's loop of relative links thus ends after
   at most ``2 x`` its distinct segments.
2. Shapes: a URL's shape is its path and query with every run of digits written ``0`` and every token
   of :data:`TOKEN_CHARS` or more letters and digits that holds a digit (a session id, a hash) written
   ``~``. Per host, at most ``traps.max_urls_per_shape`` discovered URLs of one shape are queued in a
   run; past it they are refused (``trap:shape``). An infinite calendar (``/2026/12/`` -> ``/2027/01/``),
   ``?page=N+1`` and session ids in paths or queries (every new id is the same shape) each end within
   that many fetches per shape. A page's own links may overshoot by the links of that page.
3. Soft-404: a host that answers 200 for URLs that cannot exist is detected the way archival crawlers
   do: once :data:`SOFT404_SUSPECT_AFTER` of its pages came back as duplicates, the host is probed once
   per run with a URL that cannot exist (:func:`probe_url`). If the probe answers 2xx, its fingerprint
   is the host's "not found" page; pages of the host within the near-duplicate distance of it are
   recorded as ``soft_404``, their links are not followed and their bodies not stored.
4. Every refusal and soft-404 is counted per host (:class:`TrapCounts`), kept with the frontier and
   shown by ``polecat status``.
5. Rule 2's counters are kept for at most :data:`MAX_TRACKED_SHAPES` (host, shape) pairs, the least
   recently used forgotten first (an eighth of them at once, so a count costs O(1) amortized), each
   keyed by the pair's 64-bit hash (an int, not the pair's tuple and strings): ~7.5 MB at the bound,
   ~120 B a pair kept, against 223 B a pair kept for the run before. A count and a refusal are uses:
   a trap keeps its counter while its pages still link to the shape, as a pair is forgotten only after
   :data:`MAX_TRACKED_SHAPES` x 7/8 other pairs were used since its last use; a pair forgotten starts
   again from 0, so a shape no page linked to for that long may queue its budget once more. Issue 39:
   the bound before (past 200,000 pairs, forget those counted once) bound nothing in a breadth crawl,
   where every host queues several URLs of one shape (``/leaf0`` .. ``/leaf4``): 19 MB for the 85,396
   pairs of 42,876 hosts met in a 300,000-page breadth crawl, up to ~45 MB (200,000 pairs) in a
   million-page one (benchmarks/README.md "Issue 39: what grows with the hosts met"); and once full of
   such pairs it dropped each new host's pair at its first count (no new host's shapes were bounded any
   more), each count a pass over them all. Two of the pairs kept share a hash with a chance of ~1 in
   10^10: then they share a counter, and at worst a URL of one is refused ``trap:shape`` early.

Memory: rule 5 bounds the shape counters. Rule 3's hosts (suspected, probed, with a signature) are kept
for the last :data:`MAX_SOFT404_HOSTS` of each kind, the oldest forgotten first, and a probe's URL until
its answer: a breadth crawl probes nearly every host it meets (their pages are copies of each other),
and kept for the run those were ~300 B a host met (a million-page crawl of 143,000 hosts). A host
forgotten may be probed once more.
"""

from __future__ import annotations

import json
import re
import secrets
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from typing import TypeVar

from polecat.dedup.minhash import VERIFY_MAX_DISTANCE, Fingerprint, hamming, verify_distance
from polecat.frontier.records import origin_of

MAX_SEGMENT_REPEATS = 2
MAX_SEGMENTS = 32
MAX_SOFT404_HOSTS = 65_536
"""Hosts kept per kind by rule 3 (module docstring: memory)."""
TOKEN_CHARS = 16
MAX_TRACKED_SHAPES = 65_536
"""(host, shape) counters rule 5 keeps."""
SOFT404_SUSPECT_AFTER = 3
PROBE_MARK = "/polecat-probe-"
"""Path prefix of soft-404 probe URLs (a path no site serves)."""

_TOKEN = re.compile(rf"[0-9A-Za-z]{{{TOKEN_CHARS},}}")
_DIGITS = re.compile(r"[0-9]+")


def url_trap(url: str) -> str | None:
    """Rule 1 for a canonical URL: the refusal reason, or None."""
    start = url.find("/", url.find("//") + 2)
    if start < 0:
        return None
    end = url.find("?", start)
    path = url[start:] if end < 0 else url[start:end]
    if path.count("/") <= MAX_SEGMENT_REPEATS:  # the common case: too few segments to repeat
        return None
    segments = [s for s in path.split("/") if s]
    if len(segments) > MAX_SEGMENTS:
        return "trap:deep_path"
    if len(set(segments)) < len(segments) and Counter(segments).most_common(1)[0][1] > MAX_SEGMENT_REPEATS:
        return "trap:repeated_path"
    return None


def shape(url: str) -> str:
    """Rule 2: the URL's path and query with numbers and id-like tokens folded."""
    start = url.find("/", url.find("//") + 2)
    rest = url[start:] if start >= 0 else "/"

    def fold(m: re.Match[str]) -> str:
        token = m.group(0)
        return "~" if any(c.isdigit() for c in token) else token

    return _DIGITS.sub("0", _TOKEN.sub(fold, rest))


class ShapeBudget:
    """Rule 2: per-host counts of queued URLs by shape."""

    def __init__(self, max_per_shape: int) -> None:
        self.max_per_shape = max_per_shape
        self._counts: dict[int, int] = {}
        """URLs queued by (host, shape) pair, keyed by the pair's hash, least recently counted first
        (rule 5)."""
        self._asked: dict[str, str] = {}
        """Shapes of the URLs :meth:`refuses` judged, for :meth:`count` (a page's batch: a few hundred)."""

    def refuses(self, host: str, url: str) -> bool:
        """Whether ``host`` has queued its budget of URLs shaped like ``url`` in this run."""
        if len(self._asked) > 16_384:
            self._asked.clear()
        s = self._asked[url] = shape(url)
        key = hash((host, s))
        counts = self._counts
        if counts.get(key, 0) < self.max_per_shape:
            return False
        counts[key] = counts.pop(key)  # rule 5: a trap still linked to stays recent
        return True

    def count(self, host: str, url: str) -> None:
        """``url`` of ``host`` was queued."""
        s = self._asked.pop(url, None)
        key = hash((host, shape(url) if s is None else s))
        counts = self._counts
        counts[key] = counts.pop(key, 0) + 1  # rule 5: moved to the recent end
        if len(counts) > MAX_TRACKED_SHAPES:
            for old in list(islice(counts, len(counts) - MAX_TRACKED_SHAPES * 7 // 8)):
                del counts[old]


def probe_url(url: str) -> str:
    """Rule 3: a URL of ``url``'s origin that cannot exist (fresh each call, so each run probes anew)."""
    return f"{origin_of(url)}{PROBE_MARK}{secrets.token_hex(8)}.html"


def is_probe(url: str) -> bool:
    """Whether ``url`` has the form of a probe (for reading logs: the pipeline trusts only the probes
    it issued, :attr:`Soft404.issued`, so a page cannot pass a link of this form off as one)."""
    return PROBE_MARK in url


@dataclass(slots=True)
class TrapCounts:
    """Rule 4: per host, how often each trap rule acted (persisted as one JSON object per host)."""

    by_host: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, host: str, reason: str) -> None:
        self.by_host.setdefault(host, Counter())[reason] += 1

    def encode(self, host: str) -> bytes:
        return json.dumps(dict(self.by_host.get(host, {})), separators=(",", ":")).encode()

    def load(self, host: str, raw: bytes) -> None:
        self.by_host[host] = Counter(json.loads(raw))


@dataclass(slots=True)
class Soft404:
    """Rule 3 for one run: which hosts are suspected, probed, and their "not found" fingerprints, each
    kept for the last :data:`MAX_SOFT404_HOSTS` hosts (module docstring: memory)."""

    suspects: dict[str, int] = field(default_factory=dict)
    probed: dict[str, None] = field(default_factory=dict)
    issued: dict[str, None] = field(default_factory=dict)
    """Probe URLs issued in this run and not yet answered (at most one per probed host)."""
    signatures: dict[str, Fingerprint] = field(default_factory=dict)
    """Host -> the fingerprint of the page its probe was answered with (2xx)."""

    def matches(self, host: str, fp: Fingerprint, distance: int) -> bool:
        """Whether a page of ``host`` with fingerprint ``fp`` is the host's "not found" page."""
        sig = self.signatures.get(host)
        return (sig is not None and hamming(sig.index, fp.index) <= distance
                and verify_distance(sig.verify, fp.verify) <= VERIFY_MAX_DISTANCE)

    def duplicate_seen(self, host: str, url: str) -> str | None:
        """A page ``url`` of ``host`` was a duplicate; the probe URL to queue when the host should be
        probed now, else None."""
        if host in self.probed:
            return None
        seen = self.suspects.pop(host, 0) + 1  # popped and put back: the last suspected is the newest
        if seen < SOFT404_SUSPECT_AFTER:
            _keep(self.suspects, host, seen)
            return None
        _keep(self.probed, host, None)
        probe = probe_url(url)
        _keep(self.issued, probe, None)
        return probe

    def answered(self, probe: str, host: str, signature: Fingerprint | None) -> None:
        """The probe ``probe`` (of :attr:`issued`) of ``host`` was answered: a 2xx page with
        ``signature``, or not (None)."""
        self.issued.pop(probe, None)
        if signature is not None:
            _keep(self.signatures, host, signature)


V = TypeVar("V")


def _keep(kept: dict[str, V], key: str, value: V) -> None:
    """``kept[key] = value``, the oldest key forgotten past :data:`MAX_SOFT404_HOSTS`."""
    kept[key] = value
    if len(kept) > MAX_SOFT404_HOSTS:
        del kept[next(iter(kept))]
