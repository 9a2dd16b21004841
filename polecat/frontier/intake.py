"""Which URLs join the frontier's queues: seeds, discovered links, redirect targets, refetch requests.

Rules (the checks themselves live where they are owned: scope.py, traps.py, budgets.py, routing.py):
1. A URL is judged by the frontier that owns its slice (routing rule 1); :meth:`Intake.admit` hands the
   others back per owner, unmarked.
2. A URL of a blocked host is refused first; a discovered URL must then pass the scope, the trap rules
   (each one that acts is counted per host) and the crawl budgets; a seed only the URL length. Any URL
   is refused past its host's queue and page limits. Each refusal is counted by its reason.
3. An admissible URL is queued only if the seen-set says it is new, and its seen entry is written with
   its queue entry (one decision). A page's links are judged as one batch, each URL once.
4. The URLs of recent batches that reached the seen-set are remembered (:data:`RECENT_URLS`): a repeat
   counts as seen again without asking it.
5. A refetch request (polecat/frontier/refetch.py) queues its URL again without asking the seen-set.
   A request for a URL this frontier holds no record of and has not seen (its slice went to another
   member of a cluster since the page was stored, and the record with it) is kept, its ``ops`` row and
   all: while its slice is fenced it counts as a URL queued there (:meth:`Intake.pending_refetches`, a
   stray), so the cluster's next hand-over of that slice carries it to the owner, whose adoption queues
   the URL again (it holds the record); the release here then drops it. A request found by an open in a
   slice being released (the release deletes the slice's ``ops`` rows, and a repair that ran while the
   node was down wrote it after the slice's export) waits for the release to end and is then written
   again, kept so (at worst the owner fetches the URL twice; never no one).
6. A page's requisites are admitted as its links are (rules 1-4), with the scope and caps of
   polecat/frontier/requisites.py (its rules 2-5).
7. Seeds come in batches (:meth:`Intake.add_seeds`, a seeds file): one Bloom pass per batch, each host's
   record read once, and with it its seed mark (rule 9: a resume's seeds find it there and write
   nothing). Like a page's links, a batch is judged against the host limits as they were before it (it may
   overshoot them by itself). A seed counts towards no shape budget (traps rule 2 budgets discovered
   URLs), and the seed of a new host may be filed out of memory at once (polecat/frontier/host_table.py
   rule 10). A batch's keys are made list by list (slices, ``hosts`` keys, seen keys), and its rows of
   each table are one write (polecat/writes.py rule 5), so a seed of a new host costs no write object. No
   key is written twice with two values in it (the warm hosts' ``queue`` rows, one ``Put`` each, have seq
   numbers of their own).
8. A seeds batch of hosts all new to the table (neither in memory nor in ``hosts``: a fresh seeds file's
   batch) is decided a list at a time, not a seed at a time: its hosts looked up in one ``map``; with no
   block set, no URL too long and none twice, every seed accepted
   before the seen-set's pass without a look at each (rule 2 refuses none); and when the seen-set finds
   every URL new, each host has one seed and no slice is fenced, memory's room for new hosts is asked
   once (host_table.py rule 10): the first seeds, as many as it has room for, join memory, and the others
   are filed cold in one call. The decision is the one rule 7 makes seed by seed (the same answers and
   rows: tests/test_seed_batch.py); ``add_seeds`` went from 6.1 to 5.0 us a seed in the node
   (benchmarks/README.md "Issue 39: seed ingest in the node").
9. A seed's host is marked in its own record (``HostState.seed``, schema 6: polecat/frontier/db.py rule 18),
   not by a row of its own, which was a random write into ``ops`` a seed host (issue 39). The record that
   queues a seed takes the mark with it (:meth:`HostTable.enqueue` or the cold filing of host_table.py rule
   10); a host whose seed is not queued (refused, seen, or another member's: :meth:`Intake.add_scope_host`) is
   marked by :meth:`HostTable.mark_seed`, after the batch's queueing: its record, or, where it has none, a
   ``seedhost`` row of ``ops`` as before (host_table.py rule 26: no record a host this frontier does not
   crawl). The scope asks the record (in memory, else its row), then that row; ``domain`` mode reads the
   marked records and the rows at the open (:meth:`Intake.load_seed_hosts`).
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Container, Iterable, Sequence

from polecat.config import ScopeConfig
from polecat.dedup.seen import SeenSet
from polecat.frontier import refetch, requisites
from polecat.frontier.budgets import admit_reason
from polecat.frontier.host_table import HostTable
from polecat.frontier.keys import (
    SEED_HOST,
    host_of_row,
    host_row,
    host_rows,
    op_key,
    url_key,
    url_keys_at,
)
from polecat.frontier.politeness import HostState
from polecat.frontier.records import decode_host
from polecat.frontier.requisites import RequisiteCaps
from polecat.frontier.routing import Admission, Routing
from polecat.frontier.scope import ScopeFilter
from polecat.frontier.slices import slice_of, slice_prefixes
from polecat.frontier.traps import TrapCounts, url_trap
from polecat.hosts import host_key
from polecat.writes import Decided, Delete, Put, PutRows, Write

log = logging.getLogger(__name__)

RECENT_URLS = 131_072
"""Bound of the memo of URLs already in the seen-set (rule 4): sites link the same URLs (navigation,
footers) from every page, and a memo hit skips fingerprinting, the Bloom filter and the table (~10 MB)."""

ACCEPTED = "accepted"
SEEN = "seen"


class Intake:
    """Adds URLs to the queues (see the module docstring); owns the scope, routing, the seen-set's use
    and the per-host trap counts."""

    def __init__(self, table: HostTable, cfg: ScopeConfig, seen: SeenSet) -> None:
        self._table = table
        self._peek = table.peek
        self._blocked = table.blocked
        self._shapes = table.shapes
        self._db = table.db
        self._cfg = cfg
        self._seen = seen
        self._scope = ScopeFilter(cfg, _SeedHosts(table))
        self._routing: Routing | None = None
        """Who judges which discovered URL (rule 1); None: this frontier judges all."""
        self._recent: dict[str, None] = {}
        self.seen_again = 0
        """URLs found in the seen-set (or the memo) in this run."""
        self.rejected: Counter[str] = Counter()
        """URLs refused in this run, by reason (rule 2)."""
        self.traps = TrapCounts()
        """Per-host counts of trap rules that acted (polecat/frontier/traps.py), persisted in ``ops``."""
        self._traps_dirty: set[str] = set()
        self._refetch: list[tuple[bytes, str]] = []
        """Refetch requests not yet judged (rule 5): loaded at the open or adopted with a slice."""
        self._refetch_kept: dict[bytes, str] = {}
        """Refetch requests for URLs this frontier knows nothing of, by ``ops`` key (rule 5)."""
        self._refetch_kept_in: Counter[int] = Counter()
        """:attr:`_refetch_kept` by slice."""
        self._refetch_held: list[tuple[bytes, str]] = []
        """Requests an open found in a slice being released: written again once it is (rule 5)."""
        self.requisites = RequisiteCaps(cfg)
        """The requisite caps and the URLs queued as requisites in this run (rule 6)."""

    def load_op(self, kind: str, arg: str, key: bytes, raw: bytes) -> None:
        """Reinstate a stored op of the intake: a seed host, trap counts, a refetch request."""
        if kind == SEED_HOST:  # a host with no record here, or a bundle's row (the adoption marks the record)
            self._scope.add_seed_host(arg)
        elif kind == "traps":
            self.traps.load(arg, raw)
        elif kind == refetch.KIND:
            self._refetch.append((key, raw.decode()))
        elif kind == requisites.KIND:
            self.requisites.load(arg, raw)

    def add_seed(self, url: str, now: float, importance: float = 1.0) -> Decided[str]:
        """Queue a canonical seed URL; its host joins the crawl scope (persisted). Answers the decision."""
        host = host_key(url)
        self._table.refuse_leaving(host)  # handover rule 7: before the scope learns the host
        out: list[Write] = []
        decided = self._add(url, host, 0, importance, now, out, seed=True)
        # Marked after the queueing (rule 9): the record it made, if any, takes the mark.
        return Decided(decided.value, [*decided.writes, *self.add_scope_host(host)])

    def add_seeds(self, urls: Sequence[str], now: float, importance: float = 1.0) -> Decided[list[str]]:
        """:meth:`add_seed` of each canonical URL of ``urls``, as one batch (rule 7; a batch of new hosts,
        rule 8); answers the decision of each, in order (a URL given twice is ``"seen"`` the second time)."""
        table, scope = self._table, self._scope
        hosts = [host_key(url) for url in urls]
        if table.leaving:  # handover rule 7
            for host in hosts:
                table.refuse_leaving(host)
        names = [host.encode() for host in hosts]
        prefixes = slice_prefixes(names)
        rows = host_rows(prefixes, names)
        stored_host = self._db.getter("hosts")
        in_memory = table.hosts
        n = len(urls)
        held = list(map(in_memory.get, hosts))  # table.peek() inline: one lookup a seed, no frame
        none_held = held.count(None) == n
        if none_held:  # rule 8: no host in memory, each looked up in one map
            raws: list[bytes | None] = list(map(stored_host, rows))
        else:
            raws = [stored_host(row) if st is None else None for row, st in zip(rows, held, strict=True)]
        new = none_held and raws.count(None) == n  # rule 8: every host new to the table
        states = held if new else [st if raw is None else decode_host(raw) for st, raw in zip(held, raws,
                                                                                             strict=True)]
        scope.add_seed_hosts(hosts)
        # Each table's rows as one write (polecat/writes.py rule 5; a key twice only as the same row).
        out: list[Write] = []
        marking: tuple[list[str], list[bytes], list[HostState | None]] | None = (hosts, rows, states)
        # Rule 9: every host of the batch, as found before it, unless every one queued its seed.
        cold: Container[str] = ()
        fresh_urls = dict.fromkeys(urls) if new and self._blocked.empty() else None
        longest = self._cfg.max_url_length
        todo: Sequence[int]
        if fresh_urls is not None and len(fresh_urls) == n and max(map(len, urls), default=0) <= longest:
            # Rule 8: nothing refuses a seed of a new host with no block set (rule 2), and none repeats.
            answers = [ACCEPTED] * n
            todo = range(n)
        else:
            answers, todo, fresh_urls = self._judge_seeds(urls, hosts, states)
        if todo:
            if len(todo) < n:
                hosts, rows = [hosts[i] for i in todo], [rows[i] for i in todo]
                states = [states[i] for i in todo]
            keys = url_keys_at(rows, fresh_urls)
            marks = self._seen.mark_many(self._db.getter("seen"), keys)
            every = marks.count(False) == 0
            seen = keys if every else [key for key, new_url in zip(keys, marks, strict=True) if new_url]
            out.append(PutRows("seen", seen, [b""] * len(seen)))
            room = table.room()
            if every and new and room is not None and len(set(hosts)) == len(hosts):
                # Rule 8: each seed the one of a new host; as many as memory has room for join it, in
                # order, and the others are filed cold (host_table rule 10).
                for url, host in zip(fresh_urls, hosts[:room], strict=False):
                    self._seed_in_memory(url, host, None, importance, now, out)
                if room < len(hosts):
                    seeds = zip(rows[room:], ([url] for url in itertools.islice(fresh_urls, room, None)),
                                strict=True)
                    cold = dict(zip(hosts[room:], seeds, strict=True))
                    table.enqueue_cold(cold, importance, now, out)
                if len(todo) == n:  # rule 9: every host of the batch queued its seed, and is marked
                    marking = None
            else:
                cold = self._file_seeds(fresh_urls, todo, hosts, rows, states, marks, answers, importance,
                                        now, out)
        if marking is not None:
            self._mark_seed_hosts(*marking, cold, out)
        self.seen_again += answers.count(SEEN)
        return Decided(answers, out)

    def _mark_seed_hosts(self, hosts: Sequence[str], rows: Sequence[bytes],
                         states: Sequence[HostState | None], cold: Container[str], out: list[Write]) -> None:
        """Rule 9: mark each host of a seeds batch whose queueing did not (``states``: the records found
        before the batch; ``cold``: the hosts it filed cold, marked by their new records)."""
        mark = self._table.mark_seed
        done: set[str] = set()
        for host, row, st in zip(hosts, rows, states, strict=True):
            if host not in done and host not in cold:
                done.add(host)
                mark(host, st, row, out)

    def _judge_seeds(self, urls: Sequence[str], hosts: list[str], states: list[HostState | None]
                     ) -> tuple[list[str], list[int], dict[str, None]]:
        """A seeds batch's answers so far (the refused, rule 2, and the repeated; the others
        ``"accepted"``), the places of the others, and those others' URLs, in order (rule 7)."""
        refuse = self._refuse
        fresh_urls: dict[str, None] = {}
        answers: list[str] = []
        todo: list[int] = []
        unblocked, longest = self._blocked.empty(), self._cfg.max_url_length
        for url, host, st in zip(urls, hosts, states, strict=True):
            if st is None and unblocked and len(url) <= longest:
                reason = None  # rule 2: a seed of a new host, neither blocked nor too long (no call a seed)
            else:
                reason = refuse(url, host, st, 0, True)
            if reason is None and url in fresh_urls:
                reason = SEEN
            elif reason is None:
                fresh_urls[url] = None
                todo.append(len(answers))
            else:
                self.rejected[reason] += 1
            answers.append(reason or ACCEPTED)
        return answers, todo, fresh_urls

    def _file_seeds(self, fresh_urls: dict[str, None], todo: Sequence[int], hosts: list[str],
                    rows: list[bytes], states: list[HostState | None], marks: list[bool], answers: list[str],
                    importance: float, now: float, out: list[Write]) -> Container[str]:
        """Queue the seeds of a batch the seen-set found new (``marks``), at the places ``todo`` of
        ``answers`` (the others answered ``"seen"``): a host in memory or with room there by
        :meth:`HostTable.enqueue`, the others filed cold in one call (host_table.py rule 10); answers the
        hosts filed cold."""
        table = self._table
        in_memory = table.hosts
        cold: dict[str, tuple[bytes, list[str]]] = {}
        for url, i, host, row, st, new in zip(fresh_urls, todo, hosts, rows, states, marks, strict=True):
            if not new:
                answers[i] = SEEN
                continue
            filed = cold.get(host)
            if filed is not None:
                filed[1].append(url)
            elif st is None and host not in in_memory and not table.has_room(host):
                cold[host] = (row, [url])  # host_table rule 10
            else:
                self._seed_in_memory(url, host, st, importance, now, out)
        if cold:
            table.enqueue_cold(cold, importance, now, out)
        return cold

    def _seed_in_memory(self, url: str, host: str, st: HostState | None, importance: float, now: float,
                        out: list[Write]) -> None:
        """Queue the seed ``url`` of ``host`` (its record ``st``, None: new) with the host in memory, its
        record marked a seed's (rule 9: saved with the count of the URL)."""
        table = self._table  # a seed counts towards no shape budget (traps rule 2: discovered URLs)
        held = table.held(host, st)
        held.seed = True
        table.enqueue(url, host, 0, importance, now, out, st=held, shape=False)

    def add_scope_host(self, host: str) -> list[Write]:
        """Let ``host`` into the crawl scope like a seed's host (persisted: its record marked, rule 9)
        without queueing anything: a member of a multi-process crawl learns every seed host, whichever
        member queues the seed."""
        self._scope.add_seed_host(host)
        out: list[Write] = []
        table = self._table
        table.mark_seed(host, table.peek(host), host_row(host), out)
        return out

    def load_seed_hosts(self) -> None:
        """The open, in ``domain`` mode: the seed hosts' domains into the scope, from the records that mark
        them (rule 9: a pass over the ``hosts`` table; the ``seedhost`` rows of the hosts with none come
        with the open's ops, :meth:`load_op`)."""
        self._scope.add_seed_hosts(host_of_row(key) for key, raw in self._db.items("hosts")
                                   if decode_host(raw).seed)

    def add(self, url: str, depth: int, importance: float, now: float, *, hops: int = 0) -> Decided[str]:
        """Queue a canonical discovered URL if it is in scope and new; answers ``"accepted"``,
        ``"seen"`` or the reason it was refused. ``hops``: redirects followed to reach it."""
        return self._add(url, host_key(url), depth, importance, now, [], seed=False, hops=hops)

    def set_routing(self, routing: Routing | None) -> None:
        """Judge only the URLs ``routing`` says this frontier owns (frontier/routing.py); None: all."""
        self._routing = routing

    def owns(self, url: str) -> bool:
        """Whether this frontier judges the canonical ``url`` (routing rule 1)."""
        return self._routing is None or self._routing.owns(url)

    def admit(self, urls: Iterable[str], depth: int, importance: float, now: float, *,
              hops: int = 0) -> Decided[Admission]:
        """Route discovered canonical URLs before dedup (rule 1): the owned ones are added (seen-set
        test, queue), the others come back per owner, unmarked. ``hops``: redirects followed to reach
        them (a redirect target)."""
        mine, outbox = self._split(urls)
        if hops:
            out: list[Write] = []
            accepted = sum(self._add(u, host_key(u), depth, importance, now, out, seed=False, hops=hops).value
                           == ACCEPTED for u in dict.fromkeys(mine))
            return Decided(Admission(accepted, outbox), out)
        added = self.add_many(mine, depth, importance, now)
        return Decided(Admission(added.value, outbox), added.writes)

    def admit_requisites(self, urls: list[str], depth: int, importance: float, now: float, *,
                         hops: int = 0) -> Decided[Admission]:
        """Route and add the canonical requisites of one page (rule 6), already at their own ``depth``
        and ``importance`` (requisites.py rule 5). Another owner's come back marked for it.
        ``hops``: redirects followed to reach them (a requisite's redirect target)."""
        considered, left_out = self.requisites.per_page(urls)
        if left_out:
            self.rejected["requisite_page_cap"] += left_out
        mine, outbox = self._split(considered)
        added = self.add_many(mine, depth, importance, now, requisite=True, hops=hops)
        return Decided(Admission(added.value, outbox, requisites=True), added.writes)

    def _split(self, urls: Iterable[str]) -> tuple[Iterable[str], dict[str, list[str]]]:
        """The URLs this frontier judges, and the others per owner (rule 1)."""
        routing = self._routing
        if routing is None or routing.single:
            return urls, {}
        return routing.split(urls)

    def add_many(self, urls: Iterable[str], depth: int, importance: float, now: float, *,
                 requisite: bool = False, hops: int = 0) -> Decided[int]:
        """Add the outlinks of one page in one batch (one vectorised Bloom pass); answers how many were
        accepted. Per-host budgets are checked before the batch, so one page may overshoot them by its
        own links at most. ``requisite``: they are the page's requisites (rule 6); ``hops``: redirects
        followed to reach them."""
        candidates: list[tuple[str, str]] = []
        recent = self._recent
        repeats = 0
        new_hosts: set[str] = set()
        leaving = self._table.leaving
        # A page often links one URL twice: the Bloom batch must see each URL once.
        for url in dict.fromkeys(urls):
            if url in recent:
                repeats += 1
                continue
            host = host_key(url)
            if leaving:  # handover rule 7: before any URL of the batch is marked
                self._table.refuse_leaving(host)
            st = self._peek(host)
            reason = self._refuse(url, host, st, depth, False, new_hosts, requisite=requisite)
            if reason is None:
                candidates.append((url, host))
                if st is None:
                    new_hosts.add(host)
            else:
                self.rejected[reason] += 1
        self.seen_again += repeats
        out: list[Write] = []
        if not candidates:
            return Decided(0, out)
        keys = [url_key(u, h) for u, h in candidates]
        fresh = self._seen.mark_many(self._db.getter("seen"), keys)
        accepted = 0
        if len(recent) + len(candidates) > RECENT_URLS:
            recent.clear()
        enqueue = self._table.enqueue
        for (url, host), key, new in zip(candidates, keys, fresh, strict=True):
            recent[url] = None
            if new:
                out.append(Put("seen", key, b""))
                enqueue(url, host, depth, importance, now, out, hops)
                accepted += 1
                if requisite:
                    self.requisites.queued(url, host)
        self.seen_again += len(candidates) - accepted
        return Decided(accepted, out)

    def _add(self, url: str, host: str, depth: int, importance: float, now: float, out: list[Write], *,
             seed: bool, hops: int = 0) -> Decided[str]:
        """Add one URL; its writes are appended to ``out``, which comes back in the decision."""
        if self._table.leaving:  # handover rule 7
            self._table.refuse_leaving(host)
        reason = self._refuse(url, host, self._peek(host), depth, seed)
        if reason is not None:
            self.rejected[reason] += 1
            return Decided(reason, out)
        key = url_key(url, host)
        if not self._seen.mark(self._db.getter("seen"), key):
            self.seen_again += 1
            return Decided(SEEN, out)
        out.append(Put("seen", key, b""))
        self._table.enqueue(url, host, depth, importance, now, out, hops)
        return Decided(ACCEPTED, out)

    def _refuse(self, url: str, host: str, st: HostState | None, depth: int, seed: bool,
                page_new_hosts: set[str] | None = None, *, requisite: bool = False) -> str | None:
        """Why ``url`` may not be queued (rule 2; None: it may). ``st``: its host's record (None: a new
        host); ``page_new_hosts``: the new hosts its page's links brought so far (budgets rules 3-5);
        ``requisite``: a page requisite (rule 6)."""
        if host in self._blocked:
            return "blocked"
        cfg = self._cfg
        if seed:
            if len(url) > cfg.max_url_length:
                return "url_too_long"
        else:
            reason = self._scope.reject_reason(url, host, depth, requisite=requisite)
            if reason is None and requisite:
                reason = self.requisites.refuse(host)
            if reason is None:
                reason = url_trap(url) or ("trap:shape" if self._shapes.refuses(host, url) else None)
                if reason is not None:
                    self.count_trap(host, reason)
            if reason is None:
                new_hosts = page_new_hosts or set()
                new_host = st is None and host not in new_hosts
                reason = admit_reason(cfg, new_host=new_host,
                                      hosts=self._table.known_hosts + len(new_hosts),
                                      queued=self._table.queued, page_new_hosts=len(new_hosts))
            if reason is not None:
                return reason
        if st is not None:
            if st.queued >= cfg.max_queue_per_host:
                return "host_queue_full"
            if st.queued + st.fetched >= cfg.max_pages_per_host:
                return "host_budget"
        return None

    def count_trap(self, host: str, reason: str) -> None:
        """A trap rule acted on ``host`` (kept with the frontier at the next commit)."""
        self.traps.add(host, reason)
        self._traps_dirty.add(host)

    def trap_writes(self) -> list[Write]:
        """The trap counts and the requisite counts changed since the last commit."""
        traps, dirty = self.traps, self._traps_dirty
        out: list[Write] = [Put("ops", op_key("traps", host), traps.encode(host)) for host in dirty]
        self._traps_dirty.clear()
        return out + self.requisites.writes()

    def refetch_url_keys(self) -> set[bytes]:
        """The URL keys of the refetch requests held here, kept for a slice's owner or not (rule 5): those
        an adoption must say it brought (polecat/frontier/handover.py rule 10)."""
        named = itertools.chain(self._refetch, self._refetch_kept.items())
        return {url_key(url, host_key(url)) for _, url in named}

    def refetch_writes(self, now: float, adopted_urls: set[bytes] | None = None) -> list[Write]:
        """Queue again the URLs whose stored copy was lost (rule 5; refetch.py rule 2). ``adopted_urls``:
        URL records an adoption is writing in the same decision (writes.py rule 3)."""
        out: list[Write] = []
        table, adopted = self._table, adopted_urls or set()
        todo = dict(self._refetch)
        if adopted:  # a slice came back with the record of a URL kept for its owner
            todo.update((key, url) for key, url in self._refetch_kept.items()
                        if url_key(url, host_key(url)) in adopted)
        self._refetch.clear()
        kept = len(self._refetch_kept)
        for key, url in todo.items():
            host = host_key(url)
            if table.in_leaving_slice(host):  # handover rule 7
                if key not in self._refetch_kept:  # else it went with the slice's bundle
                    self._refetch_held.append((key, url))
                continue
            self._keep_refetch(key, url, False)
            ukey = url_key(url, host)
            if ukey in adopted or self._db.get("urls", ukey) is not None:
                out.append(Delete("urls", ukey))
                table.url_written(host, ukey, None, out)
                table.enqueue(url, host, 0, 1.0, now, out)
            elif self._db.get("seen", ukey) is None:
                self._keep_refetch(key, url, True)  # known to no one here: for its slice's owner
                continue
            out.append(Delete("ops", key))  # queued again, or still queued here: fetched anyway
        if len(self._refetch_kept) > kept:
            log.info("frontier: %d refetch requests name URLs this frontier holds no record of: kept for "
                     "the member that owns their slices", len(self._refetch_kept) - kept)
        return out

    def _keep_refetch(self, key: bytes, url: str, keep: bool) -> None:
        """Keep (or no longer keep) the request ``key`` for its slice's owner (rule 5)."""
        s = slice_of(host_key(url))
        if keep and key not in self._refetch_kept:
            self._refetch_kept[key] = url
            self._refetch_kept_in[s] += 1
        elif not keep and self._refetch_kept.pop(key, None) is not None:
            self._refetch_kept_in[s] -= 1
            if not self._refetch_kept_in[s]:
                del self._refetch_kept_in[s]

    def pending_refetches(self, slices: Container[int]) -> Counter[int]:
        """The refetch requests kept for their owners (rule 5) in ``slices``, by slice: a look at the
        slices that hold one (usually none), not at every slice asked about."""
        return Counter({s: n for s, n in self._refetch_kept_in.items() if s in slices})

    def released(self, slices: frozenset[int]) -> list[Write]:
        """The end of the release of ``slices``: the requests kept there went with their bundles; those an
        open found while the release was under way are written again, kept for the owner (rule 5)."""
        for key, url in list(self._refetch_kept.items()):
            if slice_of(host_key(url)) in slices:
                self._keep_refetch(key, url, False)
        out: list[Write] = []
        held: list[tuple[bytes, str]] = []
        for key, url in self._refetch_held:
            if slice_of(host_key(url)) in slices:
                out.append(Put("ops", key, url.encode()))
                self._keep_refetch(key, url, True)
            else:
                held.append((key, url))
        self._refetch_held = held
        return out

    def forget_recent(self) -> None:
        """Empty the memo of rule 4 (its URLs' slices were released: they may come back as new)."""
        self._recent.clear()


class _SeedHosts:
    """The seed hosts as their records, or their rows, mark them (rule 9), for the scope: the record in
    memory or a lookup or two a question, nothing more kept in memory."""

    def __init__(self, table: HostTable) -> None:
        self._is_seed = table.is_seed

    def __contains__(self, host: object) -> bool:
        return isinstance(host, str) and self._is_seed(host)
