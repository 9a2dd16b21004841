"""The frontier: what is fetched next, when, and what became of every accepted URL.

It is a synchronous object driven by the node on the event-loop thread: ``add`` URLs, ``lease`` the next
request (or learn how long to wait), ``complete`` the lease with what happened. Every call that changes
state is a decision: it returns the writes that record it and the node applies them (polecat/writes.py,
its rules 1-4). Time comes in as ``now`` (wall-clock seconds, so next-allowed times survive restarts).
State lives in the frontier's tables (per-host queues, host records with next-allowed times, the
seen-set, finished-URL records, operator controls; all keyed slice-first, see polecat/frontier/keys.py),
read through polecat/frontier/tables.py and written in one batched transaction; memory holds the records
of the hosts in rotation only, a bounded working set (host_table.py rules 6-8), with the ready heap and
in-flight leases over them.

:class:`Frontier` is the face the node calls; the work is done by its parts, each in its own module with
its own section of the configuration, over one shared :class:`~polecat.frontier.host_table.HostTable`
(host records, the ready heap, leases, queue counts):

- :class:`~polecat.frontier.intake.Intake` (``intake.py``, scope): which URLs join the queues.
- :class:`~polecat.frontier.leasing.Leasing` (``leasing.py``, politeness): leases and completions.
- :class:`~polecat.frontier.robots_state.RobotsAnswers` (``robots_state.py``, robots): the robots.txt
  answers kept; :class:`~polecat.frontier.hops.RobotsHops` (``hops.py``): robots.txt redirect hops.
- :class:`~polecat.frontier.refresh_queue.RefreshQueue` (``refresh_queue.py``, refresh): due times,
  re-queueing, freshness, sitemap priors.
- :class:`~polecat.frontier.controls.Controls` (``controls.py``): throttle, block, pause.
- :class:`~polecat.frontier.handover.SliceHandover` (``handover.py``): owned slices, export, adoption.
- :class:`~polecat.frontier.observe.Observation` (``observe.py``): the read-only views and stats.
- :class:`~polecat.frontier.read_ahead.ReadAhead` (``read_ahead.py``): the hosts whose queue heads are
  read ahead of the leases after an open (the node's reader thread reads them: ``head_reader.py``).

Invariant: an accepted URL is queued (its key is in ``queue``), in flight (leased, or its request released
before its record, leasing.py rule 7; key still in ``queue``), or done (key deleted and a record in
``urls``, in the same transaction). A crash therefore replays the in-flight and uncommitted work and drops
nothing.
"""

from __future__ import annotations

import random

from polecat.config import Config
from polecat.dedup.seen import SeenSet
from polecat.frontier import refetch
from polecat.frontier.budgets import PageBudget
from polecat.frontier.controls import Controls
from polecat.frontier.handover import SliceHandover
from polecat.frontier.hops import RobotsHops
from polecat.frontier.host_table import HostTable
from polecat.frontier.intake import Intake
from polecat.frontier.keys import HOST_OPS, SEED_HOST, ops_prefixes, parse_op_key
from polecat.frontier.leasing import Leasing
from polecat.frontier.observe import Observation
from polecat.frontier.read_ahead import ReadAhead
from polecat.frontier.refresh_queue import RefreshQueue
from polecat.frontier.robots import RobotsPolicy
from polecat.frontier.robots_state import RobotsAnswers
from polecat.frontier.tables import FrontierTables
from polecat.frontier.traps import ShapeBudget
from polecat.writes import Write

OPENED_OPS = HOST_OPS - {SEED_HOST} | {refetch.KIND}
"""The per-slice op kinds an open reads (keys.py rule 4), besides the global ones."""


class Frontier:
    """Per-host queues, the ready heap and the done records, composed of parts (see the module docstring)."""

    def __init__(self, db: FrontierTables, cfg: Config, robots: RobotsPolicy, seen: SeenSet, now: float,
                 *, rng: random.Random | None = None) -> None:
        rng = rng or random.Random()  # leases and robots hops draw their jitter from one stream
        self._db = db
        self._table = table = HostTable(db, cfg.politeness, ShapeBudget(cfg.scope.max_urls_per_shape),
                                        cfg.frontier.working_hosts)
        answers = RobotsAnswers(db, robots, cfg.robots)
        refresh = RefreshQueue(table, cfg.refresh)
        self._refresh = refresh
        self._controls = controls = Controls(table)
        self._intake = intake = Intake(table, cfg.scope, seen)
        self.budget = PageBudget(cfg.scope.max_pages)
        """This run's page budget, robots.txt reservations included (polecat/frontier/budgets.py)."""
        self.traps = intake.traps
        """Per-host counts of trap rules that acted (polecat/frontier/traps.py), persisted in ``ops``."""
        leasing = Leasing(table, cfg.politeness, robots, answers, refresh, self.budget, rng)
        hops = RobotsHops(table, rng)
        handover = SliceHandover(table, seen, robots, intake, refresh, self._load_op)
        observation = Observation(table, intake)
        self.read_ahead = ReadAhead(table)
        """The hosts whose queue heads the node reads ahead of its leases after the open (read_ahead.py)."""

        # The public calls are the parts' own methods, bound once rather than wrapped: the per-URL paths
        # (add_many, admit, lease, complete) pay no delegating frame.
        self.add_seed = intake.add_seed
        self.add_seeds = intake.add_seeds
        self.add_scope_host = intake.add_scope_host
        self.add = intake.add
        self.add_many = intake.add_many
        self.admit = intake.admit
        self.admit_requisites = intake.admit_requisites
        self.is_requisite = intake.requisites.is_requisite
        self.set_routing = intake.set_routing
        self.owns = intake.owns
        self.count_trap = intake.count_trap
        self.lease = leasing.lease
        self.bind_ip = leasing.bind_ip
        self.withdraw = leasing.withdraw
        self.complete = leasing.complete
        self.release_request = leasing.release
        self.next_due = table.next_due
        self.url_record = table.url_record
        self.host_rate = table.rate
        self.robots_answer = answers.answer
        self.hop = hops.hop
        self.hold = hops.hold
        self.release = hops.release
        self.next_allowed = hops.next_allowed
        self.requeue_due = refresh.requeue_due
        self.scan_step = refresh.scan_step
        self.set_prior = refresh.set_prior
        self.freshness = refresh.freshness
        self.set_throttle = controls.set_throttle
        self.throttle_now = controls.throttle_now
        self.unthrottle = controls.unthrottle
        self.block = controls.block
        self.unblock = controls.unblock
        self.set_paused = controls.set_paused
        self.throttles = controls.throttles
        self.blocks = controls.blocks
        self.is_blocked = controls.is_blocked
        self.set_owned = handover.set_owned
        self.in_flight_in = handover.in_flight_in
        self.unowned_queued = handover.unowned_queued
        self.export_slices = handover.export_slices
        self.begin_export = handover.begin_export
        self.snapshot = handover.snapshot
        self.take_written = db.take_written
        self.mark_written = db.mark_written
        self.adopt = handover.adopt
        self.begin_adopt = handover.begin_adopt
        self.release_slices = handover.release_slices
        self.begin_release = handover.begin_release
        self.queued_since_export = handover.queued_since_export
        self.host_state = observation.host_state
        self.parked_hosts = observation.parked_hosts
        self.busiest = observation.busiest
        self.queue_bands = observation.queue_bands
        self.quarantined_hosts = observation.quarantined_hosts
        self.host_counts = observation.host_counts
        self.stats = observation.stats

        # Opening: the stored ops first (throttles set the rates the host records are loaded with). The
        # seed hosts' marks are asked one at a time (intake.py rule 9) unless domain mode keeps their
        # domains: then the records that mark them, and the rows of those with no record.
        domain = cfg.scope.mode == "domain"
        for prefix in ops_prefixes(OPENED_OPS | ({SEED_HOST} if domain else set())):
            for key, raw in db.items("ops", prefix):
                self._load_op(key, raw)
        if domain:
            intake.load_seed_hosts()
        if refresh.index.stale:  # built in batches, each applied at once (writes.py rule 4)
            for batch in refresh.index.rebuild(now):
                db.apply(batch)
                db.commit_if_big()  # db.py rule 16, refresh_index.py rule 6
        release = handover.resume()  # before anything is queued (handover.py rule 7)
        opening = table.load(now)
        opening += intake.refetch_writes(now)
        opening += controls.from_config(cfg.politeness.throttle, cfg.scope.block)
        db.apply(opening)  # writes.py rule 4
        while release is not None:
            step = release.step()
            db.apply(step.writes)
            release = None if step.value else release

    def _load_op(self, key: bytes, raw: bytes) -> None:
        """Reinstate one stored op (on open, or adopted with a slice) in the part it belongs to."""
        kind, arg = parse_op_key(key)
        self._controls.load_op(kind, arg, raw)
        self._intake.load_op(kind, arg, key, raw)

    @property
    def paused(self) -> bool:
        """Set by the operator (:meth:`set_paused`): the node leases nothing while it is (persisted)."""
        return self._controls.paused

    @property
    def queued(self) -> int:
        return self._table.queued

    @property
    def hosts_in_memory(self) -> int:
        """Host records held in memory: the working set (host_table.py rule 6)."""
        return len(self._table.hosts)

    @property
    def pending_ops(self) -> int:
        return self._db.pending

    def commit(self) -> int:
        """Make every change so far durable. The node calls it after flushing the store."""
        self._db.apply(self.prepare_commit())
        return self._db.commit()

    def late_writes(self) -> list[Write]:
        """What changed since :meth:`prepare_commit` of what it wrote (host records, trap counts,
        counters), for the same commit (host_table.py rule 28): the node applies them as the commit
        begins, in that step of the loop."""
        return self._table.late_writes() + self._intake.trap_writes() + self._refresh.index.commit_writes()

    def rank_for_commit(self, most: int) -> bool:
        """Rank up to ``most`` host records for the next commit's working-set cut (host_table.py rule 22);
        whether the ranking is done (or none is due)."""
        return self._table.rank_step(most)

    def rebuild_heaps_in_steps(self) -> None:
        """From now on the heaps' rebuilds wait for :meth:`heaps_step` (host_table.py rule 23)."""
        self._table.heaps_in_steps = True

    def heaps_step(self) -> bool:
        """Rebuild the next of the heaps due for a rebuild (host_table.py rule 23); whether none is left."""
        return self._table.heaps_step()

    def prepare_commit(self) -> list[Write]:
        """The writes of what is kept in memory between commits (host records, trap counts, counters), so
        that a commit of the transaction, once they are applied, holds every change so far: :meth:`commit`
        does both; the node's periodic commit runs on the writer thread instead
        (polecat/frontier/db.py rule 1)."""
        return (self._table.host_writes() + self._intake.trap_writes() + self._table.counter_writes()
                + self._refresh.index.commit_writes())
