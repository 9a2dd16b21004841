"""Leasing and completing: the next request to make, and what a finished one changes.

:meth:`Leasing.lease` pops the earliest ready host from the ready heap and hands out its best URL the
robots policy allows (or its robots.txt first); :meth:`Leasing.complete` applies the politeness rules to
how the request went (polecat/frontier/politeness.py owns them) and records the URL done, or queues it
again for a retry. Both are decisions (polecat/writes.py): they return the writes that record them.

Rules:
1. One lease per host at a time, none before the host's next-allowed time; with ``key_by_ip``, one per
   IP too (:meth:`Leasing.bind_ip` withdraws a lease whose IP turns out busy).
2. A host's robots.txt is fetched before its pages, as a lease of the host (a robots.txt request counts
   as a request to it); while its robots.txt is unreachable the host is closed until the policy's retry.
3. URLs robots.txt disallows are recorded done (``skipped:robots``) as the lease reads past them, at
   most :data:`ROBOTS_SKIPS_PER_LEASE` per host per call, so a disallowed site cannot stall the others.
4. Every lease is charged to the run's page budget (budgets.py rules 1-2); a lease with nothing left
   in the budget is not made, and its URLs stay queued for a later run. A due host that nothing of the
   budget fits (the budget full, and no reservation or page of its own in this run) is passed over
   without reading its queue or its robots.txt: once ``max_pages`` is spent in a breadth crawl, tens of
   thousands of due hosts are, and their reads took a lease call 460 ms (benchmarks/README.md "Issue 39:
   loop stalls, second pass").
5. A retried URL is queued again behind its host's others at half its importance, until
   ``politeness.max_url_attempts``; then it is recorded ``failed``.
6. When descriptors run short (the node's connections near their cap, ``prefer_warm``), a due host whose
   last request ended less than :data:`WARM_FOR` ago (its connection likely still open, its robots.txt
   known) is leased before the due hosts ahead of it (the earliest due of them, from the host table's
   heap of warm hosts); with none due the earliest host goes, so a cold host waits, never starves (while
   the connections are full, one whose lease would open a TLS connection waits for room: rule 11).
7. A page whose record waits after its request ended (its content claims, polecat/cluster/claimlink.py)
   is released first (:meth:`Leasing.release`): the politeness part of its completion applies at once,
   so its host's next request may go at the host's next-allowed time, not after the wait; its URL stays
   queued (the frontier's invariant), is never leased again meanwhile, and counts as in flight for a
   slice release, until :meth:`Leasing.complete` records it done, as when not released.
8. A lease withdrawn before its request went out (the node's leave to send was refused: a fence) is
   held back until ``hold_until`` (the node's next look at what it owns), not woken at once: the
   frontier still counts the slice owned until then, and leasing the same URL again at once spun the
   node's lease loop (hundreds of leases withdrawn in 0.2 s on a fenced node, load that costs leases).
9. One lease call looks at most :data:`HOSTS_PER_LEASE` due hosts and pops at most
   :data:`STALE_PER_LEASE` stale heap entries (host_table.py rule 2), so its event-loop step is bounded
   whatever it passes over; past either it answers ``Wait(now)`` with the writes made so far, and the
   next call goes on from there (each host looked at left the heap, or went back to it at a later time).
   In a 100,000-host breadth crawl one call passed over 35,000 hosts (460 ms), and another popped stale
   entries for 175 ms (benchmarks/README.md "Issue 39: loop stalls, second pass").
10. After a completion, a host keeps its connection (:func:`keeps_connection`) only while it has a URL
   queued, is not parked, and may be asked again within :data:`WARM_FOR` (the pool's keep-alive): any
   other host's idle connection would only wait out the keep-alive unused, so the node lets it go at once
   (polecat/node/lease_runner.py rule 9, polecat/fetch/pool.py rule 11). A host out of the working set
   (no record in memory) keeps none either; a URL whose completion is held for a commit counts as done.
11. While the node's connections are full (``full``: polecat/fetch/pool.py rule 15, its TLS connections and
   those its leases under way may open at their cap), a due host that is not warm (rule 6) and whose lease
   would open a TLS connection (an ``https`` URL: its queue head as the lease reads it, or its robots.txt)
   is not leased: it is held back (host_table.py rule 25), due still and read once while the connections
   stay full, and the hosts behind it are looked at. A plain-HTTP host needs no TLS connection and is leased
   as when not full (rule 6 and pool rule 6 bound it). A host key has no scheme (keys.py) and one host may
   queue both, so the URL the lease would take decides, not the host. With no warm or plain-HTTP host due,
   the call answers ``Wait`` until the earliest warm host is due, at most :data:`FULL_RECHECK` seconds; once
   the connections are not full, the hosts held back go first, the earliest due first. While full, no host
   out of memory is read in (host_table.py rule 7's refill): it would be held back too, and memory filled
   with hosts held back, due before the hosts in rotation, so rule 6's cut of the working set dropped the
   hosts in rotation (their connections open, their warmth forgotten): held back in turn, the crawl sat at
   the cap with 2,048 idle connections and 50,000 hosts held until the keep-alive closed them: 8,999 pages
   in 399 s (a first version of this rule, benchmarks/README.md "A mixed crawl at the TLS cap"). Room comes
   as the warm hosts finish (rule 10's let-go). A cold host's connection past the cap would close a warm
   host's (pool rule 12), which reconnects at the cap in turn and closes the next: a chain that lasts while
   the crawl sits at the cap. Rule 6 only prefers the warm hosts, and a crawl fast enough to keep more of
   them than the shortage leased cold hosts whenever none warm was due, past the cap (benchmarks/README.md
   "The HTTPS breadth crawl at rule 12's cap"). One cold lease a second past it, tried, set off such a
   chain. Holding back every cold host, as this rule first did, stalled the plain-HTTP hosts of a mixed
   crawl (http and https hosts from one domain list) while it sat at the TLS cap (benchmarks/README.md "A
   mixed crawl at the TLS cap").
12. A lease taken ``ahead`` seconds ahead (the node's, before an LMDB commit during which the frontier is
   not read: polecat/node/commits.py rule 15) may be of a host whose next-allowed time comes within that
   long; it is a lease as any other (rule 1: one per host, the host in flight from now on, charged to the
   budget), its ``not_before`` the host's next-allowed time, before which its request is not sent (the node
   holds it until then: polecat/node/leases.py rule 7), or the time the host was scheduled for, if later
   (a hold of rule 8, a robots hop). Everything else is judged at ``now`` (the hosts out
   of memory refilled, robots.txt's expiry, an IP's turn with ``key_by_ip``), so a lease taken ahead is
   never one a later call could not have made.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import replace
from itertools import islice

from polecat.config import PolitenessConfig
from polecat.frontier.budgets import PageBudget
from polecat.frontier.host_table import HostTable, quarantined
from polecat.frontier.ipkeys import IpKeys
from polecat.frontier.keys import queue_key, queue_prefix, url_key_at
from polecat.frontier.politeness import HostState, after_attempt, gave_up, interval, wait_one_interval
from polecat.frontier.records import Completion, Idle, Lease, QueuedUrl, UrlRecord, Wait, origin_of
from polecat.frontier.refresh_queue import RefreshQueue
from polecat.frontier.robots import Closed, Fetch, Ready, RobotsPolicy
from polecat.frontier.robots_state import RobotsAnswers
from polecat.writes import Decided, Delete, Put, Write

WARM_FOR = 30.0
"""Seconds after its last request a host counts as warm (rule 6): the pool's keep-alive (fetch/pool.py)."""
ROBOTS_SKIPS_PER_LEASE = 256
"""Robots-disallowed URLs retired per lease call for one host before yielding to other hosts (rule 3)."""
HOSTS_PER_LEASE = 256
"""Due hosts one lease call looks at most before it answers ``Wait(now)`` (rule 9): ~13 us each when its
queue and robots.txt are read, so a few ms a call."""
FULL_RECHECK = 1.0
"""Seconds a lease call waits at most while the connections are full and no warm host is due (rule 11): a
completion wakes the node's lease loop, but the pool's own closes (keep-alive expiry, a server's close),
which make room too, wake nothing."""
STALE_PER_LEASE = 2048
"""Stale heap entries one lease call pops at most before it answers ``Wait(now)`` (rule 9): ~3 us each
from a heap of 300,000, so a few ms a call."""


def keeps_connection(state: HostState | None, now: float, held: int = 0) -> bool:
    """Rule 10: whether the host whose lease just completed (``state``: its record, None when it is out of
    the working set) should keep its idle connection at wall-clock ``now``. ``held``: URLs still counted
    in its queue whose completion is held (a page completed after a commit: that URL is done)."""
    return (state is not None and state.queued > held and not state.parked
            and state.next_allowed <= now + WARM_FOR)


class Leasing:
    """Hands out leases and completes them (see the module docstring)."""

    def __init__(self, table: HostTable, pol: PolitenessConfig, robots: RobotsPolicy, answers: RobotsAnswers,
                 refresh: RefreshQueue, budget: PageBudget, rng: random.Random) -> None:
        self._table = table
        self._hosts = table.hosts
        self._scheduled = table.scheduled
        self._leases = table.leases
        self._db = table.db
        self._pol = pol
        self._robots = robots
        self._answers = answers
        self._refresh = refresh
        self._budget = budget
        self._rng = rng
        self._ipkeys = IpKeys()

    def lease(self, now: float, *, prefer_warm: bool = False, full: bool = False,
              ahead: float = 0.0) -> Decided[Lease | Wait | Idle]:
        """The next request to make, or how long nothing is ready. Never returns two leases for one host
        (or, with key_by_ip, one IP) at once, nor one whose ``not_before`` is before the host's
        next-allowed time. The writes retire the robots-disallowed URLs it skipped on the way.
        ``prefer_warm``: descriptors run short (rule 6); ``full``: the TLS connections are at their cap
        (rule 11); ``ahead``: a host due within that many seconds may be leased (rule 12)."""
        due = now + ahead  # rule 12: only which hosts count as due; every other judgement is at ``now``
        table = self._table
        table.advance(now)  # its heap popped as time passes (host_table.py rule 17)
        heap, scheduled, schedule = table.heap, self._scheduled, table.schedule
        held = table.held_heap
        out: list[Write] = []
        refilled = False
        warm_heap = table.warm_heap
        looked = stale = 0
        while warm_heap and warm_heap[0][0] <= now and scheduled.get(warm_heap[0][1]) != warm_heap[0][0]:
            heapq.heappop(warm_heap)  # stale (host_table.py rule 2): popped as time passes, short or not
        while True:
            # Rule 11: with room again, the hosts held back go first, due before those in the heap now.
            source = held if held and not full else heap
            if source:
                at, host = source[0]
                if scheduled.get(host) != at:
                    if stale == STALE_PER_LEASE:
                        return Decided(Wait(now), out)  # rule 9
                    stale += 1
                    heapq.heappop(source)
                    continue
            if not source or at > due:
                # Nothing in memory is due: the hosts out of memory that are (host_table.py rule 7).
                if not refilled and not full and table.cold_ready(now):  # rule 11: none while full
                    table.refill(now, out)
                    refilled = True
                    continue
                break
            if looked == HOSTS_PER_LEASE:
                return Decided(Wait(now), out)  # rule 9: the hosts not looked at stay in the heap
            looked += 1
            hot = not (prefer_warm or full) or self._warm(host, now)
            warm = None if hot else self._pop_warm(now)
            if warm is not None:  # its entry in the heap is stale from here on (host_table.py rule 2)
                entry, host, hot = warm, warm[1], True
            else:
                entry = heapq.heappop(source)
            table.unschedule(host)
            st = self._hosts[host]
            if st.parked or st.in_flight or st.queued <= table.releasing(host):  # rule 7
                continue
            if st.next_allowed > due:  # spaced again after it was scheduled: a robots hop held it (rule 8)
                schedule(host, st.next_allowed)
                continue
            if self._pol.key_by_ip and st.ip and not self._ip_ready(host, st.ip, now):
                continue
            if not (self._budget.allows("page", host) or self._budget.allows("robots", host)):
                continue  # rule 4: left queued for a later run, its queue not read
            before = len(out)
            got = self._lease_from(host, st, now, out)
            if got is None and len(out) > before and scheduled.get(host) == now:
                # Its skips ran out (rule 3): its retired URLs stay in the table until these writes are
                # applied, so it is not read again in this call (writes.py rule 3).
                return Decided(Wait(now), out)
            if got is not None and full and not hot and got.tls:
                table.hold(entry)  # rule 11: a TLS connection past the cap; due still, read once
                continue
            if got is not None:
                if ahead and entry[0] > got.not_before:  # rule 12: a host scheduled past its politeness
                    got = replace(got, not_before=entry[0])
                self._budget.charge(got.kind, host)
                self._leases[host] = got
                st.in_flight = True
                if self._pol.key_by_ip and st.ip:
                    self._ipkeys.take(host, st.ip)
                return Decided(got, out)
        until = table.next_ask(now)
        if held and full:  # rule 11: room for the hosts held back comes without a wake-up
            until = self._full_wait(now) if until is None else min(until, self._full_wait(now))
        if until is None:
            # A released request's URL may yet be queued again (rule 7): not idle before its record.
            return Decided(Wait(None) if self._leases or table.finishing else Idle(), out)
        return Decided(Wait(until), out)

    def _warm(self, host: str, now: float) -> bool:
        ended = self._table.warm.get(host)
        return ended is not None and now - ended < WARM_FOR

    def _full_wait(self, now: float) -> float:
        """Rule 11, no warm host due: the earliest warm host's time (its heap entry may be stale: then the
        next call only comes early), at most :data:`FULL_RECHECK` from ``now``."""
        warm_heap = self._table.warm_heap
        until = now + FULL_RECHECK
        return min(until, warm_heap[0][0]) if warm_heap else until

    def _pop_warm(self, now: float) -> tuple[float, str] | None:
        """The earliest due warm host (rule 6), popped from the warm heap; None: none is due."""
        warm_heap, scheduled = self._table.warm_heap, self._scheduled
        while warm_heap and warm_heap[0][0] <= now:
            at, host = heapq.heappop(warm_heap)
            if scheduled.get(host) == at and self._warm(host, now):
                return at, host
        return None

    def _lease_from(self, host: str, st: HostState, now: float, out: list[Write]) -> Lease | None:
        """First allowed URL of ``host`` as a lease (or a robots.txt lease); None to skip the host now.
        The robots-disallowed URLs before it are retired: their writes go to ``out``."""
        skipped = 0
        released = self._table.finishing.get(host, ())
        # The retired keys are deleted only when ``out`` is applied: the range reads on past them.
        for key, raw in islice(self._db.items("queue", queue_prefix(host, st.num)),
                               ROBOTS_SKIPS_PER_LEASE + len(released)):
            if key in released:  # rule 7: its record is on its way
                continue
            q = QueuedUrl.decode(raw, key, host)
            origin = origin_of(q.url)
            decision = self._robots.lookup(origin, now)
            if isinstance(decision, Fetch) or (isinstance(decision, Ready) and decision.refresh_due):
                if not self._budget.allows("robots", host):
                    return None  # out of the run's budget: left queued for a later run
                return Lease(host, origin + "/robots.txt", "robots", not_before=st.next_allowed)
            if isinstance(decision, Closed):
                st.next_allowed = max(st.next_allowed, decision.until)
                self._table.save(host)
                self._table.schedule(host, st.next_allowed)
                return None
            if decision.rules.allowed(q.url):
                if not self._budget.allows("page", host):
                    return None
                prev = self._table.url_record(q.url, url_key_at(key, q.url))
                return Lease(host, q.url, "page", q.depth, q.importance, q.attempts, key,
                             prev.etag if prev else None, prev.last_modified if prev else None,
                             not_before=st.next_allowed, hops=q.hops)
            out += self._table.finish_writes(host, st, key, UrlRecord(q.url, "skipped", "robots"))
            skipped += 1
        if skipped == ROBOTS_SKIPS_PER_LEASE:
            self._table.schedule(host, now)
        else:
            # Repair a count that disagrees with the table; the released URLs are still queued (rule 7).
            self._table.count_queued(host, st, len(released) - st.queued)
            self._table.save(host)
        return None

    def bind_ip(self, lease: Lease, ip: str, now: float) -> bool:
        """With ``key_by_ip``: the node resolved ``lease.host`` to ``ip`` just before sending. True: go
        ahead (the IP is now held by this lease). False: the lease is withdrawn, the IP is busy or not
        yet allowed, and the host waits for it; send nothing."""
        host = lease.host
        if self._ipkeys.held_by(host) == ip:
            return True
        self._wake_ip_waiters(*self._ipkeys.release(host))
        self._hosts[host].ip = ip  # lease() checks it from now on, before handing out the host
        if self._ip_ready(host, ip, now):
            self._ipkeys.take(host, ip)
            return True
        self._leases.pop(host, None)
        self._hosts[host].in_flight = False
        self._budget.refund(lease.kind, host)
        return False

    def withdraw(self, lease: Lease, aborted_at: float | None = None, *,
                 hold_until: float | None = None) -> None:
        """The node may not send ``lease`` after all, or go on with it: it lost the host's slice between
        the lease and the send (a fence, a process frozen and woken), or while the request was in
        flight (``aborted_at``: when it was aborted; the request may have reached the server, so the
        host waits one full interval from then, politeness rule 7). The URL stays queued, and the host
        is scheduled again only while its slice is owned (:meth:`HostTable.schedule`), not before
        ``hold_until`` (rule 8). A released lease (rule 7) is one whose request ended: only its record is
        given up."""
        host = lease.host
        if self._released(lease):
            self._budget.refund(lease.kind, host)
            st = self._hosts[host]
            self._table.wake(host, st, st.next_allowed)
            return
        self._wake_ip_waiters(*self._ipkeys.release(host))
        self._leases.pop(host, None)
        st = self._hosts[host]
        st.in_flight = False
        if aborted_at is not None:
            wait_one_interval(self._pol, self._table.rate(host), st, aborted_at)
        self._budget.refund(lease.kind, host)
        self._table.wake(host, st, max(st.next_allowed, hold_until or 0.0))  # rule 8

    def _ip_ready(self, host: str, ip: str, now: float) -> bool:
        """Whether ``host`` may use ``ip`` now; if not, it is scheduled for when it may, or waits for the
        IP's current request to end."""
        at = self._ipkeys.wait_time(host, ip, now)
        if at is None:
            return True
        if at != math.inf:
            self._table.schedule(host, at)
        return False

    def _wake_ip_waiters(self, waiters: set[str], ip_next_allowed: float) -> None:
        for waiter in waiters:
            ws = self._table.state(waiter)  # a waiter may have left memory (host_table.py rule 6)
            if not ws.in_flight and ws.queued > 0 and waiter not in self._scheduled:
                self._table.schedule(waiter, max(ws.next_allowed, ip_next_allowed))

    def release(self, lease: Lease, result: Completion, now: float) -> None:
        """Rule 7: the request of the page ``lease`` ended as ``result`` says, and its record waits. The
        host's politeness part of the completion applies now; :meth:`complete` records the URL later."""
        self._end_request(lease, result, now)
        self._table.finishing.setdefault(lease.host, set()).add(lease.key)
        st = self._hosts[lease.host]
        self._table.save(lease.host)
        self._table.wake(lease.host, st, st.next_allowed)

    def complete(self, lease: Lease, result: Completion, now: float) -> list[Write]:
        """Decide how a leased request ended: schedules the host's next request per the politeness rules
        (unless :meth:`release` did, rule 7) and returns the writes that record it (polecat/writes.py;
        the caller applies them with :meth:`FrontierDB.apply` before the frontier's next call)."""
        host = lease.host
        if self._released(lease):
            st = self._hosts[host]
            writes = self._complete_page(lease, st, result)
        else:
            writes = self._end_request(lease, result, now)
            st = self._hosts[host]
            if lease.kind == "page":
                writes = self._complete_page(lease, st, result)
            else:
                self._table.save(host)
        self._table.wake(host, st, st.next_allowed)
        return writes

    def _released(self, lease: Lease) -> bool:
        """Whether ``lease`` was released (rule 7); it no longer is."""
        finishing = self._table.finishing
        keys = finishing.get(lease.host) if finishing else None
        if keys is None or lease.key not in keys:
            return False
        keys.discard(lease.key)
        if not keys:
            del finishing[lease.host]
        return True

    def _end_request(self, lease: Lease, result: Completion, now: float) -> list[Write]:
        """The politeness part of a completion: the lease ends, the host's next-allowed time and backoff
        follow the attempt. Returns the writes of a robots.txt answer."""
        host = lease.host
        st = self._hosts[host]
        self._leases.pop(host, None)
        st.in_flight = False
        self._table.warm[host] = result.attempt.ended
        if result.ip:
            st.ip = result.ip
        writes: list[Write] = []
        if lease.kind == "robots":
            writes = self._answers.record(origin_of(lease.url), result.robots, now)
            decision = self._robots.lookup(origin_of(lease.url), now)
            if isinstance(decision, Ready):
                st.crawl_delay = decision.rules.crawl_delay or 0.0
        rate = self._table.rate(host)
        was = quarantined(st)
        after_attempt(self._pol, rate, st, result.attempt, self._rng)
        if result.park:
            st.parked = True
        self._table.health(st, was)  # host_table rule 16
        parked = self._table.parked
        if st.parked and host not in parked:
            parked[host] = result.park or _park_reason(self._pol, st, result)
        if self._ipkeys.held_by(host) is not None:
            self._wake_ip_waiters(*self._ipkeys.release(host, result.attempt, interval(self._pol, rate, st)))
        return writes

    def _complete_page(self, lease: Lease, st: HostState, result: Completion) -> list[Write]:
        table = self._table
        if result.outcome == "retry" and lease.attempts + 1 < self._pol.max_url_attempts:
            # Re-queue behind the host's other URLs (halved importance) so one bad URL cannot pin a host.
            table.count_band(lease.key, -1)
            table.qseq += 1
            retry = QueuedUrl(lease.url, lease.depth, lease.importance / 2, lease.attempts + 1, lease.hops)
            key = queue_key(lease.host, st.num, retry.importance, retry.depth, table.qseq)
            table.count_band(key, 1)
            table.save(lease.host)
            table.count_done("retried")
            return [Delete("queue", lease.key), Put("queue", key, retry.encode(lease.host))]
        outcome = "failed" if result.outcome == "retry" else result.outcome
        ukey = url_key_at(lease.key, lease.url)  # one fingerprint, no host hashing, for every key below
        prev_raw = self._db.get("urls", ukey)
        rec = UrlRecord.decode(prev_raw) if prev_raw is not None else UrlRecord(
            lease.url, outcome, depth=lease.depth, importance=lease.importance)
        rec.outcome, rec.reason, rec.fetched_at = outcome, result.reason, result.attempt.started
        changed = result.changed and outcome == "fetched"
        if result.content_hash is not None:
            changed = changed and rec.content_hash != result.content_hash.hex()
            if rec.content_hash and changed:
                rec.changes += 1
            rec.content_hash = result.content_hash.hex()
        if outcome == "not_modified" or (outcome == "fetched" and result.reason.startswith("2")):
            self._refresh.after_visit(lease.host, rec, ukey, changed, st.next_allowed, result.last_modified)
        rec.etag = result.etag or rec.etag
        rec.last_modified = result.last_modified or rec.last_modified
        rec.fetches += 1
        table.count_fetched(st, 1)
        return table.finish_writes(lease.host, st, lease.key, rec, ukey)


def _park_reason(pol: PolitenessConfig, st: HostState, result: Completion) -> str:
    detail = result.detail or result.reason
    if gave_up(pol, st):
        return f"gave up after {st.strikes} attempts ({detail})"
    return f"{st.failures} consecutive failures ({detail})"
