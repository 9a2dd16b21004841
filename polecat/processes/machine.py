"""One ``polecat node`` in a multi-machine cluster: etcd membership, signed hand-off, slices that move.

Rules:
1. The node joins (etcd lease, member key, the member list read) before its crawler opens, so its
   seeds are queued by their owners under the real Ring. Until a slice's owner key is held, the frontier
   leases nothing of it; :meth:`ClusterNode.sync_owned` applies the state machine's ``leasable()`` to
   the frontier (at once on every change, and every :data:`SYNC_EVERY` seconds), which is also how
   self-fencing stops fetching.
2. Routing follows the Ring of the latest member list (:class:`~polecat.cluster.link.ClusterLink`). A
   batch received for slices this node does not own under that Ring (a sender with an older list) is
   forwarded through the outbox, committed before the batch is acknowledged; nothing is stranded.
3. A slice that moves away (a join, or this node leaving) is handed over: this node stops leasing it,
   waits for its leases in flight, exports it in bounded chunks (:mod:`.chunks`; each in steps of the
   loop, frontier handover rule 8), ``POST``s each to the new owner's ``/internal/adopt`` (signed like
   batches; the new owner adopts the chunk in steps of the loop, frontier handover rule 9, and commits it
   before answering, and its hosts wait one full interval), releasing each chunk's slices once it is
   answered (exported and sent again first while URLs were queued in them meanwhile: frontier handover
   rule 5), and commits; only then is the owner key deleted and may the new owner claim it.
4. Every internal request is signed with the cluster secret (HMAC-SHA256): a missing or wrong signature
   is answered 401 and changes nothing. Its head proves the secret before its body is read, and the body
   is bounded per route (batches :data:`~polecat.cluster.batch.MAX_BATCH_BYTES`, bundles
   :data:`MAX_BUNDLE_BYTES`; :mod:`polecat.cluster.auth` rule 1): a stranger makes a node read a head.
5. With ``cluster.checkpoints`` set, the node ships its slices to object storage (:mod:`.failover`):
   every ``checkpoint_interval`` seconds, before a graceful leave, and for slices adopted by hand-over
   before the adoption is answered; slices handed over leave its checkpoint before their owner keys are
   deleted. The slices of a member that died are restored from its checkpoint before they are claimed;
   a node started on an empty data dir restores from its own checkpoint the slices no other node owns.
   A leave that keeps slices (no member that stays to hand them to: ownership rule 8) ships one more
   round of them once the hand-over has waited for their requests in flight, and records the ones its
   checkpoint holds as orphaned in etcd (ownership rule 12), for whoever owns them
   next; without checkpoints it says at WARNING that they start again from the seeds (unless the node
   comes back with its data dir).
6. With checkpoints, a batch received is answered with the checkpoint round that will hold it; the
   sender keeps it (outbox rule 3) until that member's manifest reaches the round, read from the object
   store every :data:`RELEASE_EVERY` seconds at most, and re-routes it to the heirs if the member is
   gone before.
7. A node that is leaving answers every hand-over to it with 409 and hands nothing to members flagged
   leaving (ownership rule 8); a sender answered 409 keeps those slices. It refuses every hand-off batch
   too, asked when the batch's URLs would be queued (polecat/node/member.py rule 3): its Ring, no longer
   followed, still names it the owner of the slices it is handing over, and a URL queued in one after
   its bundle went would stay on this node (or be deleted with it); the sender keeps the batch and
   re-routes it once this node is gone from its member list (rule 2). Once its held slices are handed
   over, a leave hands over the same way the slices it holds URLs in without owning them and those it
   adopted and has not held since (what the reconcile loop below, which a leave stops, would have
   shipped later): else their URLs stayed on the node that went. Every :data:`RECONCILE_EVERY`
   seconds, and at once after a member list change or an adoption, an unfenced node that is not
   leaving hands the URLs it holds in slices it does not own, the slices it adopted and has not held
   since, and the slices of its own orphan record that it does not want (their owner waits for them:
   ownership rule 13), to their Ring owners (ownership rule 7), the same way as a hand-over: after a
   whole cluster stopped and started again, nothing stays stranded. Hand-overs run
   one at a time.
8. Fencing (ownership rule 9): every bundle carries the sender's token; a hand-over stops before its
   next chunk once the token it began under is no longer this node's (its lease was lost) or the node
   is fenced. A receiver refuses a stale bundle with 410 and a WARNING naming why, and counts it; the
   sender abandons that hand-over (the decision was void). A bundle without a token (from a node of an
   older release) is adopted as before. Hand-off batches carry the token read when each is sent
   (:data:`~polecat.cluster.batch.FENCE_HEADER`; a fenced node sends none) and are refused the same way
   (410, a WARNING, counted); the sender keeps a refused batch and sends it again under its next
   registration. A batch without a token (a node of 0.2.0) is received as before.
9. Rolling upgrades (polecat/cluster/wire.py): the node's member record and every internal request it
   sends name the wire versions it speaks (``wire``, default this release's). A member it shares no
   version with gets no batch and no slice (its URLs wait in the outbox, its slices stay here; named
   once at WARNING, counted in ``polecat_cluster_incompatible_members``); a request whose head names no
   shared version is answered 426 before its body is read, logged once per sender and range, and
   counted (``polecat_cluster_wire_refused_total``).
10. Requests go out under ownership rule 10's permits (:meth:`ClusterNode._permit`, read on the lease
    clock, ``Clock.boottime``): asked when a lease starts and just before its bytes are written; every
    :data:`SYNC_EVERY` seconds the sync loop aborts the requests in flight that may not go on, so a
    node is silent within ownership's ``ABORT_BOUND`` of its lease's end by its clock. A restore holds
    its hosts that bound more (ownership rule 11).
11. Content claims (polecat/cluster/claims.py) run as between ``--workers``: content slices are owned by
    the Ring of the latest member list, claim frames are signed like batches and travel on a stream to
    each peer that offers one (``GET /internal/claims``, polecat/cluster/claimstream.py; authenticated
    like every internal request), else on the batches' route (``POST /handoff``, told apart by their
    magic: a peer of 0.3.0). A content slice's book moves with the URL slice
    of the same number (claims rule 8): in its hand-over bundles, and in checkpoints to the heirs of a
    dead member; claims that reach the new owner before the bundle are answered from what it has (a
    copy may be stored in full once). A claim sent to a member that left is answered by nobody (its
    pages are stored in full, marked). Bundles for a member of wire 2 (0.3.0), and checkpoint rounds
    while one is in the cluster, carry no books (:data:`~polecat.cluster.wire.CLAIM_BOOKS`).
12. A node that cannot reach etcd at start-up (refused, timed out: etcd still starting after a reboot)
    tries again, pausing :data:`START_RETRY` seconds, doubling up to :data:`START_RETRY_MAX`, for
    ``cluster.etcd_start_wait`` seconds, each try logged at WARNING with the reason; then it stops with
    the last reason (exit 1). An access error (the wrong CA, a TLS failure, the wrong password or
    scheme: an :class:`~polecat.cluster.aetcd_client.EtcdAccessError`) stops it at once, as more
    waiting cannot mend it. A stop signal (SIGTERM, SIGINT) while it waits cancels the join: what it
    registered is left, and the node exits 0 saying it stopped before it started
    (polecat/processes/service_runner.py); its crawler was never opened, so its frontier and page store
    are as they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
from io import BytesIO
from typing import TYPE_CHECKING

import aiohttp
import lmdb
from aiohttp import web

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster import auth
from polecat.cluster.aetcd_client import AetcdClient, etcd_access
from polecat.cluster.auth import ACK_HEADER, AUTH_HEADER, RequestAuth, ack_proves, hmac_signer, hmac_verifier
from polecat.cluster.batch import (
    FENCE_HEADER,
    MAX_BATCH_BYTES,
    Batch,
    HandoffError,
    HandoffUrl,
    SignatureError,
    decode_urls,
    encode_urls,
    read_fence_header,
)
from polecat.cluster.checkpoints import CheckpointStore
from polecat.cluster.chunks import CHUNK_BYTES, bundle_chunks
from polecat.cluster.claimlink import NODE_TICK, ContentClaims
from polecat.cluster.claimstream import STREAM_PATH, StreamServer, StreamTransport
from polecat.cluster.claimwire import is_claim_frame
from polecat.cluster.etcd import EtcdMembership, Orphans
from polecat.cluster.failover import Failover
from polecat.cluster.handoff import Handoff
from polecat.cluster.link import ClusterLink, SendLeave
from polecat.cluster.member_records import MemberRecords
from polecat.cluster.membership import Member
from polecat.cluster.outbox import Outbox
from polecat.cluster.ownership import ABORT_BOUND, stale
from polecat.cluster.receiver import HandoffReceiver
from polecat.cluster.stats import ClusterStats, RecentRate
from polecat.cluster.transport import _STATUS, PATH, ROUND_HEADER, HttpTransport, read_body
from polecat.cluster.wire import (
    CLAIM_BOOKS,
    RELEASE_HEADER,
    THIS,
    WIRE_HEADER,
    Wire,
    common,
    from_head,
    refusal,
)
from polecat.config import Config
from polecat.errors import ConfigError, FrontierError, PolecatError
from polecat.frontier.bundle import BundleError, Fence, SliceBundle
from polecat.frontier.slices import slice_of

if TYPE_CHECKING:
    from polecat.node.crawler import Crawler

log = logging.getLogger(__name__)

ADOPT_PATH = "/internal/adopt"
SIGNATURE_HEADER = "X-Polecat-Signature"
SYNC_EVERY = 0.1
"""Seconds between applications of ``leasable()`` to the frontier (fencing acts within this)."""
HANDOVER_TIMEOUT = 60.0
"""Seconds a hand-over may take (in-flight leases, then the new owner's answer) before it is retried."""
MAX_BUNDLE_BYTES = 256 * 1024 * 1024
"""The largest slice bundle a node accepts in one request."""
RELEASE_EVERY = 2.0
"""Most seconds between two reads of a peer's checkpoint round while batches are held for it."""
RECONCILE_EVERY = 2.0
"""Seconds between two looks for URLs held in slices this node does not own (rule 7)."""
STATUS_PATH = "/admin/cluster/status"
START_RETRY = 0.5
"""Seconds before the second try to reach etcd at start-up; each later pause doubles (rule 12)."""
START_RETRY_MAX = 5.0
"""The longest pause between two tries to reach etcd at start-up (rule 12)."""
"""Where a node serves its :class:`ClusterStats` as JSON (for ``polecat cluster status``; operator token)."""
INTERNAL_PATHS = frozenset({PATH, ADOPT_PATH, STREAM_PATH})
"""Routes authenticated by the cluster signature instead of the operator's bearer token."""


class ClusterNode:
    """The cluster side of one node (rules above). ``join()``, then open the crawler with ``link``,
    ``start(crawler)``, mount :meth:`routes`; ``leave()`` hands every slice over. ``clock`` is the one
    the membership, the hand-off and failover read (fencing compares the membership's lease times
    with it, so they must be one clock); give the crawler the same one."""

    def __init__(self, cfg: Config, *, clock: Clock = SYSTEM_CLOCK, wire: Wire = THIS) -> None:
        cc = cfg.cluster
        self._clock = clock
        self.me = Member(cc.node_id, cc.advertise, wire=wire)
        self._sign = hmac_signer(cc.secret)
        self._verify = hmac_verifier(cc.secret)
        self.outbox = Outbox(cfg.data_dir / "handoff", batch_urls=cc.batch_urls)
        self.auth = RequestAuth(self._verify, self.me.address.rstrip("/"), sign=self._sign)
        """Checks the heads of requests to this node, once each (auth rules 1, 3)."""
        self.transport = HttpTransport(sign=self._sign, verify=self._verify, clock=clock, wire=wire,
                                       fence=self._token)
        self._chunk_bytes = CHUNK_BYTES
        self.handoff = Handoff(self.me.id, self.outbox, self.transport, {}, sign=self._sign, clock=clock)
        self.failover = Failover(CheckpointStore.open(cc.checkpoints, cc.checkpoint_options, cc.name),
                                 self.me.id, cc.checkpoint_interval,
                                 settled=self.handoff.settled, unacked=self._unacked,
                                 on_strays=self._route_strays, token=self._token, books=self._books,
                                 bodies_remote=bool(cfg.store.url), clock=clock) if cc.checkpoints else None
        if not cfg.store.url:  # failover rule 7
            log.warning("no [store] url: this node's pages are on its disk only; if the disk is lost they "
                        "are lost%s", ", and the heirs of its slices restore their URLs as done without them"
                        if cc.checkpoints else "")
        self._etcd = AetcdClient(cc.etcd, access=etcd_access(cc))
        records = MemberRecords(cc.name, self._sign, self._verify)
        self.membership = EtcdMembership(self._etcd, cc.name, self.me, records=records, ttl=cc.lease_ttl,
                                         clock=clock, on_release=self._hand_over,
                                         on_restore=self.failover.restore if self.failover else None,
                                         orphaned=self._orphaned)
        self.receiver = HandoffReceiver(self._sink, capacity=cc.inbox_urls, verify=self._verify)
        self.claim_transport = StreamTransport(self.transport, sign=self._sign, verify=self._verify,
                                               clock=clock, wire=wire, fence=self._token)
        """Claim frames: on a stream to each peer that offers one (rule 11)."""
        self._streams = StreamServer(self.auth, self._sign, self._verify, clock=clock,
                                     on_refused=self._stream_refused)
        self.claims = ContentClaims(self.me.id, self._content_owner, self.claim_transport, {},
                                    capacity=cc.claim_pages, wait=cc.claim_wait, book_capacity=cc.claim_book,
                                    sign=self._sign, verify=self._verify, near=cfg.dedup.near_duplicates,
                                    near_distance=cfg.dedup.minhash_distance, tick=NODE_TICK,
                                    clock=clock) \
            if cc.content_claims else None
        """Rule 9."""
        self._fresh = not (cfg.data_dir / "frontier").exists()
        """No frontier on disk before this start (a new node, or one whose disk was lost)."""
        self.link: ClusterLink | None = None
        self._max_backlog = cc.max_backlog
        self._start_wait = cc.etcd_start_wait
        self._crawler: Crawler | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self.slices_handed_over = self.slices_adopted = 0
        self.bundles_sent = self.bundles_adopted = self.bundles_refused = 0
        """Hand-over bundles adopted by their receiver, adopted here, refused here as stale (rule 8)."""
        self.batches_refused = 0
        """Hand-off batches refused here as stale (rule 8)."""
        self._rate = RecentRate()
        """Page fetches per second over the last minute (``polecat cluster status``), read every second."""
        self._newest: dict[str, int] = {}
        """Sender -> the highest token revision of a bundle adopted from it (rule 8)."""
        self._leaving = False
        """Set when ``leave()`` begins: hand-overs to this node are refused from then on (rule 7)."""
        self._reconcile = asyncio.Event()
        """Set on every member list change and adoption: look for strays at once (a peer that came back
        wants its slices before it fetches their seeds again), not only every :data:`RECONCILE_EVERY`
        seconds."""
        self._adopted: set[int] = set()
        """Slices adopted here by hand-over and not held since: strays even with no URL queued, as their
        finished URLs are news to their owner (ownership rule 7)."""
        self._kept: set[int] = set()
        """Slices a hand-over since the leave began kept here (no heir that stays: rule 5)."""
        self._handing = asyncio.Lock()
        """Held by the hand-over that runs (rule 7: one at a time)."""
        self._incompatible: dict[str, Wire] = {}
        """Members this node shares no wire version with, and what they speak (rule 9)."""
        self.wire_refused = 0
        """Internal requests refused here for their wire versions (rule 9)."""
        self._refusals_named: set[tuple[str | None, str | None]] = set()
        """(sender address, its wire header) pairs already logged (rule 9: once each)."""

    async def join(self) -> ClusterLink:
        """Register in etcd and read the member list; returns the link to open the crawler with. An etcd
        that is not there yet is tried again for ``cluster.etcd_start_wait`` seconds (rule 12)."""
        if self.failover is not None:
            await self.failover.open()
        deadline = self._clock.monotonic() + self._start_wait
        inherited = started = False
        try:
            for attempt in itertools.count(1):
                try:
                    if self.failover is not None and self._fresh and not inherited:
                        # restarted without its disk: its checkpoint has the slices nobody took over
                        own = self.failover.manifest.slices - await self.membership.owned_by_others()
                        self.membership.ownership.inherit(own, self.me.id)
                        inherited = True
                    if not started:
                        await self.membership.start()
                        started = True
                    await self.membership.resync()
                    break
                except Exception as exc:  # the wrong CA, password or scheme, or no etcd (yet)
                    error = self._etcd.explain(exc)
                    left = deadline - self._clock.monotonic()
                    if isinstance(error, ConfigError) or left <= 0:  # stop with the reason
                        await self._abandon_join()
                        raise error from exc
                    pause = min(START_RETRY * 2 ** min(attempt - 1, 8), START_RETRY_MAX, left)
                    log.warning("etcd not reachable at start-up (try %d): %s; trying again in %.1f s, for "
                                "%.0f s more (cluster.etcd_start_wait)", attempt, error, pause, left)
                    await asyncio.sleep(pause)
        except asyncio.CancelledError:  # a stop signal while waiting (rule 12): leave nothing running
            await self._abandon_join()
            raise
        self.link = ClusterLink(self.membership, self.handoff, self.receiver, max_backlog=self._max_backlog)
        self.link.permit = self._permit
        self.link.claims = self.claims
        self._follow(self.membership.members())
        return self.link

    async def _abandon_join(self) -> None:
        """A join that stops (rule 12): whatever it registered is left (bounded), the etcd client closed."""
        with contextlib.suppress(Exception):
            await self.membership.close()
            async with asyncio.timeout(1.0):
                await self._etcd.close()

    def start(self, crawler: Crawler) -> None:
        """Drive ``crawler``'s owned slices and the hand-off from now on."""
        self._crawler = crawler
        self.sync_owned()
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANDOVER_TIMEOUT))
        self._tasks += [asyncio.create_task(self.handoff.run()), asyncio.create_task(self._views()),
                        asyncio.create_task(self._sync_loop()), asyncio.create_task(self._reconcile_loop())]
        if self.claims is not None:
            self._tasks.append(asyncio.create_task(self.claims.run()))
        if self.failover is not None:
            self.failover.attach(crawler.member)
            self._tasks += [asyncio.create_task(self.failover.run(self._shipped)),
                            asyncio.create_task(self._release_loop(self.failover))]

    def routes(self, app: web.Application) -> None:
        """Mount ``POST /handoff`` (batches), ``POST /internal/adopt`` (slice bundles) and
        ``GET /admin/cluster/status`` (:meth:`stats` as JSON, for ``polecat cluster status``)."""
        app.router.add_post(PATH, self._handle_batch)
        app.router.add_post(ADOPT_PATH, self._handle_adopt)
        app.router.add_get(STATUS_PATH, self._handle_status)
        if self.claims is not None:
            app.router.add_get(STREAM_PATH, self._handle_stream)
            app.on_shutdown.append(lambda _: self._streams.close())

    def stats(self) -> ClusterStats:
        """This node's cluster figures now (``/metrics``)."""
        own = self.membership.ownership
        now, lease_now = self._clock.monotonic(), self._clock.boottime()
        queued = self._crawler.frontier.unowned_queued() if self._crawler is not None else {}
        # The frontier's owned set follows the membership's within SYNC_EVERY: strays by the latter.
        strays = {s: queued[s] for s in own.strays(queued)}
        fo = self.failover
        return ClusterStats(
            fenced=own.fenced(lease_now), lease_age=own.lease_age(lease_now),
            slices_owned=len(own.leasable(lease_now)),
            slices_wanted=len(own.wanted), bundles_sent=self.bundles_sent,
            incompatible_members=len(self._incompatible), wire_refused=self.wire_refused,
            bundles_adopted=self.bundles_adopted, bundles_refused=self.bundles_refused,
            stray_urls=sum(strays.values()), stray_slices=len(strays),
            checkpoint_rounds=fo.rounds if fo else 0, checkpoint_failures=fo.failures if fo else 0,
            checkpoint_age=now - fo.last_round_at if fo and fo.last_round_at is not None else None,
            restored_without_body=fo.restored_without_body if fo else 0,
            manifests_refused=fo.manifests_refused if fo else 0,
            claim_frames_streamed=self.claim_transport.streamed,
            claim_frames_http=self.claim_transport.fallbacks,
            claim_events=self.claims.stats().events() if self.claims is not None else (),
            members_ignored=self.membership.records.ignored, replays_refused=self.auth.replays,
            batches_refused=self.batches_refused, fetches_per_s=self._rate.rate(),
            leave_failures=self.membership.leave_failures)

    def _token(self) -> Fence | None:
        """This node's fencing token while it is not fenced (a checkpoint round is written under one)."""
        own = self.membership.ownership
        return None if own.fenced(self._clock.boottime()) else self.membership.fence

    def _reads_books(self, wire: Wire) -> bool:
        """Whether a member of ``wire`` adopts content claim books (rule 11)."""
        return (common(wire, self.me.wire) or 0) >= CLAIM_BOOKS

    def _books(self) -> bool:
        """Whether a checkpoint round carries the books: every member (an heir) reads them (rule 11)."""
        return all(self._reads_books(m.wire) for m in self.membership.members())

    def _content_owner(self, content_slice: int) -> str:
        """Rule 11: the owner of a content slice under the latest member list's Ring."""
        return self.link.ring.owner(content_slice) if self.link is not None else self.me.id

    def _permit(self, host: str) -> SendLeave | None:
        """Ownership rule 10 at send time (lease_runner rule 6): the frontier's owned set lags by up to
        :data:`SYNC_EVERY`, and a woken process runs its fetch tasks before its sync loop."""
        own, clock = self.membership.ownership, self._clock
        permit = own.permit(slice_of(host), clock.boottime())
        if permit is None:
            return None
        return SendLeave(lambda: own.permitted(permit, clock.boottime()),
                         lambda: own.may_go_on(permit, clock.boottime()))

    def sync_owned(self) -> None:
        if self._crawler is not None:
            self._crawler.member.set_owned(self.membership.leasable(), hold=ABORT_BOUND)  # ownership rule 11

    async def leave(self) -> None:
        """Checkpoint, hand every slice over and revoke the lease (graceful stop; the crawler still
        runs)."""
        now = self._shipped()
        self._leaving = True  # from here on the leave ships its own rounds (_shipped)
        self._kept.clear()
        if self.failover is not None and self._crawler is not None and now is not None:
            await self.failover.ship(*now)
        await self.membership.close()

    async def detach(self) -> None:
        """The crawler is about to close: no checkpoint round or restore may touch it any more."""
        if self.failover is not None:
            await self.failover.detach()

    async def close(self) -> None:
        """Leave if not done yet, stop the hand-off (what is unsent stays in the outbox for the next
        start), close the connections."""
        await self.membership.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.claims is not None:
            await self.claims.close()
        await self.claim_transport.close()
        if self._session is not None:
            await self._session.close()
        await self.transport.close()
        self.outbox.close()

    async def _orphaned(self) -> Orphans | None:
        """The slices this leave kept or adopted and never held, to record as orphaned in etcd (rule 5,
        ownership rule 12), after one more checkpoint round of them: the hand-over waited for their
        requests in flight, which the leave's first round did not hold."""
        if self._leaving and self._crawler is not None:  # rule 7: the reconcile loop runs no more
            loose = frozenset(self._adopted | self._crawler.frontier.unowned_queued().keys())
            if loose:
                try:
                    await self._hand_over(loose)
                except (PolecatError, TimeoutError) as exc:
                    log.warning("a leave could not hand %d slices it held unowned over: %s", len(loose), exc)
        # Slices adopted and not held since that the hand-over kept are nobody else's either (a peer
        # handed them over to this node as their owner, then it stopped before it claimed them).
        kept = frozenset(self._kept | self._adopted)
        recorded = self.membership.own_orphans  # still this node's: merged in (etcd rule 7)
        if not (kept or recorded) or not self._leaving:
            return None
        if self.failover is None:
            log.warning("%d slices stay here with no member that stays to hand them to, and there are no "
                        "checkpoints (cluster.checkpoints): their next owner starts them again from the "
                        "seeds, unless this node comes back with its data dir", len(kept))
            return None
        await self.failover.ship(kept, recorded)
        manifest = self.failover.manifest
        orphaned = (kept | recorded) & manifest.slices
        if kept - manifest.slices:
            log.warning("%d slices stay here in no checkpoint: their next owner starts them again from the "
                        "seeds, unless this node comes back with its data dir", len(kept - manifest.slices))
        log.info("%d slices stay here with no member that stays to hand them to (%d recorded before): "
                 "recorded as orphaned, their next owner restores them from checkpoint version %d",
                 len(orphaned), len(recorded), manifest.version)
        return Orphans(orphaned, manifest.version)

    def _shipped(self) -> tuple[frozenset[int], frozenset[int]] | None:
        """The slices a checkpoint round ships and those it carries (failover rule 4); None while leaving
        (a periodic round after the release would hold no slice, and drop from the checkpoint those
        the leave keeps: rule 5)."""
        own = self.membership.ownership
        if self._leaving or own.fenced(self._clock.boottime()):
            return None
        # Its own orphan record's slices stay in its checkpoint: heirs may restore them (etcd rule 7).
        return own.held, (own.wanted | self.membership.own_orphans) - own.held

    # -- loops --------------------------------------------------------------------------------------

    async def _views(self) -> None:
        async for members in self.membership.changes():
            self._follow(members)

    def _follow(self, members: tuple[Member, ...]) -> None:
        assert self.link is not None
        self.link.set_members(members)
        incompatible = {m.id: m.wire for m in members if common(m.wire, self.me.wire) is None}
        for peer, wire in incompatible.items():
            if self._incompatible.get(peer) != wire:
                log.warning(refusal(peer, wire, self.me.wire))
        for peer in self._incompatible.keys() - incompatible.keys():
            log.info("member %s now speaks a wire version this node speaks: what waited for it goes", peer)
        self._incompatible = incompatible
        self.handoff.set_addresses({m.id: m.address for m in members if m.id != self.me.id},
                                   withheld=frozenset(incompatible))
        if self.claims is not None:
            self.claims.set_addresses({m.id: m.address for m in members})
        self.sync_owned()
        self._reroute()
        self._reconcile.set()

    def _reroute(self) -> None:
        """URLs waiting in the outbox for members that left go to their new owners (rule 2). Known gap:
        a crash between the outbox and the frontier commit of one checkpoint loses the re-routed URLs
        that became this node's own."""
        if self._crawler is None:
            return  # joining: the crawler is not open yet (after a restart the outbox may hold URLs for
            # peers not back yet); the sync loop re-routes once it is
        present = {m.id for m in self.membership.members()}
        moved = 0
        for peer in self.outbox.peers() - present:
            moved += self.handoff.reroute(peer, self._route_again)
        if moved:  # durable at the crawler's next checkpoint (outbox, then frontier: rule 2 of outbox.py)
            log.info("re-routed %d URLs queued for members that left", moved)

    def _unacked(self) -> bytes:
        """The URLs of the hand-off batches not acknowledged now, one msgpack list (b"": none); a
        checkpoint round carries them (failover rule 2)."""
        urls: list[HandoffUrl] = []
        for peer, seqs in self.outbox.pending().items():
            for seq in seqs:
                urls += decode_urls(self.outbox.read(peer, seq))
        return encode_urls(urls) if urls else b""

    def _route_strays(self, raw: bytes) -> int:
        """A dead member's unacknowledged hand-off URLs, restored with its slices (failover rule 6), go
        to their owners as re-routed URLs do; returns how many."""
        urls = list(decode_urls(raw))
        self._route_again(urls)
        return len(urls)

    def _route_again(self, urls: list[HandoffUrl]) -> None:
        """Stage each URL for its owner under the current Ring; the ones that are now this node's go to
        its frontier (committed by the crawler's next checkpoint, with the outbox)."""
        assert self.link is not None and self._crawler is not None
        now = self._clock.wall()
        for u in urls:
            if u.seed:  # a forwarded seed stays a seed (link rule 2)
                self._crawler.member.queue_handed(self.link.forward([u]), now)
                continue
            admission = self._crawler.member.admit([u.url], u.depth, u.importance, hops=u.hops)
            self.link.stage(admission, u.depth, u.importance, u.hops)

    async def _release_loop(self, failover: Failover) -> None:
        """Held batches leave the outbox once their receiver's checkpoint holds them, or go to the
        receiver's heirs if it left before (rule 6)."""
        every = min(RELEASE_EVERY, failover.schedule.interval)
        while True:
            await asyncio.sleep(every)
            present = {m.id for m in self.membership.members()}
            for peer in sorted(self.outbox.held_peers()):
                try:
                    checkpointed = await failover.round_of(peer)
                except PolecatError as exc:
                    log.warning("cannot read %s's checkpoint round: %s", peer, exc)
                    continue
                self.handoff.release(peer, checkpointed)
                if peer not in present:
                    moved = self.handoff.reroute_held(peer, self._route_again)
                    if moved:
                        log.info("re-routed %d URLs %s had accepted but not checkpointed before it left",
                                 moved, peer)

    async def _reconcile_loop(self) -> None:
        """Ship the URLs held in slices this node does not own to their owners (rule 7)."""
        while True:
            with contextlib.suppress(TimeoutError):  # not wait_for: it can swallow a cancel (etcd.py)
                async with asyncio.timeout(RECONCILE_EVERY):
                    await self._reconcile.wait()
            self._reconcile.clear()
            await asyncio.sleep(SYNC_EVERY)  # the claims a change starts go first (strays() skips them)
            crawler = self._crawler
            own = self.membership.ownership
            if crawler is None or self._leaving or own.fenced(self._clock.boottime()):
                continue
            self._adopted -= own.held
            # Its own orphan record's slices that another member wants wait for it (ownership rule 13).
            strays = own.strays(crawler.frontier.unowned_queued().keys() | self._adopted
                                | self.membership.own_orphans)
            if strays:
                log.info("reconciling: %d slices with URLs queued here belong to other nodes", len(strays))
                try:
                    await self._hand_over(strays)
                except (PolecatError, TimeoutError) as exc:  # kept here: the next look tries again
                    log.warning("reconciling %d stray slices failed: %s", len(strays), exc)

    async def _sync_loop(self) -> None:
        beat = 0
        while True:
            await asyncio.sleep(SYNC_EVERY)
            self.sync_owned()
            if self._crawler is not None:  # ownership rule 10: within ABORT_BOUND of the fence
                aborted = self._crawler.member.abort_unpermitted()
                if aborted:
                    log.warning("aborted %d requests in flight: the lease they were sent under ran out or "
                                "was lost; their URLs stay queued", aborted)
            beat += 1
            if beat % 10 == 0:  # batches that were in flight at the change come back here
                self._reroute()
                if self._crawler is not None:
                    self._rate.add(self._clock.monotonic(), self._crawler.member.fetches)

    # -- receiving ----------------------------------------------------------------------------------

    async def _sink(self, batch: Batch) -> None:
        """Queue what this node owns; forward the rest to its owner (rule 2)."""
        assert self.link is not None and self._crawler is not None
        if self._leaving:  # rule 7
            raise PolecatError("leaving: send these URLs to the members that stay")
        mine = self.link.forward(batch.urls)  # a forwarded seed stays a seed (link rule 2)
        if len(mine) < len(batch.urls):  # durable in the outbox before the sender may forget them
            with contextlib.suppress(lmdb.Error):  # raised by finish_commit, as a FrontierError
                await asyncio.wrap_future(self.handoff.start_commit())  # the fsync off the loop
            self.handoff.finish_commit()
        if mine:
            await self._crawler.member.receive(Batch(batch.sender, batch.seq, tuple(mine)),
                                               taking=lambda: not self._leaving)

    async def _read(self, request: web.Request, max_bytes: int) -> bytes:
        """The body, once the request's head proves the secret (rule 4) and names a wire version this
        node speaks (rule 9)."""
        try:
            return await read_body(request, max_bytes, self.auth, self._clock, head_check=self._check_wire)
        except web.HTTPUnauthorized as exc:
            self.receiver.unauthorized += 1
            log.warning("refused %s from %s: %s", request.path, request.remote, exc.text)
            raise

    def _check_wire(self, request: web.Request) -> None:
        """Rule 9: 426 for a head (proved to be a member's) naming no wire version this node speaks."""
        said = request.headers.get(WIRE_HEADER)
        theirs = from_head(said, request.headers.get(RELEASE_HEADER))
        if theirs is not None and common(theirs, self.me.wire) is not None:
            return
        self.wire_refused += 1
        why = (f"this node ({self.me.wire}) shares no wire version with the sender "
               f"({theirs if theirs is not None else f'{WIRE_HEADER} {said!r}'})")
        if (request.remote, said) not in self._refusals_named:
            self._refusals_named.add((request.remote, said))
            log.warning("refused %s from %s: %s; it keeps what it sent", request.path, request.remote, why)
        raise web.HTTPUpgradeRequired(text=why)

    async def _handle_batch(self, request: web.Request) -> web.Response:
        body = await self._read(request, MAX_BATCH_BYTES)
        if self.claims is not None and is_claim_frame(body):  # rule 11: claims share the batches' route
            claimed = await self.claims.receive(body)
            ok = claimed.status == "ok"
            ack = self.auth.ack(PATH, request.headers.get(AUTH_HEADER, "")) if ok else None  # auth rule 4
            return web.Response(status=_STATUS[claimed.status], text=claimed.detail, headers=ack)
        if (value := request.headers.get(FENCE_HEADER)) is not None:  # none: a node of 0.2.0 (rule 8)
            try:
                fence = read_fence_header(value, body, self._verify)
            except SignatureError as exc:
                self.receiver.unauthorized += 1
                return web.Response(status=401, text=str(exc))
            except HandoffError as exc:
                self.receiver.bad += 1
                return web.Response(status=400, text=str(exc))
            refused = await self._refusal(fence, "hand-off batch")
            if refused is not None:
                self.batches_refused += refused.status == 410
                return refused
        reply = await self.receiver.receive(body)
        headers = {"Retry-After": f"{reply.retry_after:.3f}"} if reply.status == "busy" else None
        if reply.status == "ok":  # acknowledged with a proof of the secret (auth rule 4)
            headers = self.auth.ack(PATH, request.headers.get(AUTH_HEADER, ""))
            if self.failover is not None:  # committed now: that round will hold it
                headers[ROUND_HEADER] = str(self.failover.covering_round())
        return web.Response(status=_STATUS[reply.status], text=reply.detail, headers=headers)

    async def _handle_stream(self, request: web.Request) -> web.StreamResponse:
        assert self.claims is not None  # mounted only with claims (routes)
        return await self._streams.serve(request, self.claims.receive, head_check=self._check_wire)

    def _stream_refused(self) -> None:
        self.receiver.unauthorized += 1

    async def _handle_status(self, request: web.Request) -> web.Response:
        return web.json_response(dataclasses.asdict(self.stats()))

    async def _handle_adopt(self, request: web.Request) -> web.Response:
        body = await self._read(request, MAX_BUNDLE_BYTES)
        try:
            sig = bytes.fromhex(request.headers.get(SIGNATURE_HEADER, "").strip() or "00")
        except ValueError:
            sig = b""
        if not self._verify(body, sig):
            return web.Response(status=401, text="bundle signature is missing or does not verify")
        if self._crawler is None:
            return web.Response(status=503, text="not started")
        if self._leaving:
            return web.Response(status=409, text="leaving: hand these slices to a member that stays")
        try:
            # Up to MAX_BUNDLE_BYTES of msgpack: decoded off the loop, which goes on serving meanwhile.
            bundle = await asyncio.to_thread(SliceBundle.read, BytesIO(body))
        except (BundleError, ValueError) as exc:
            return web.Response(status=400, text=str(exc))
        if bundle.fence is not None:
            refused = await self._refusal(bundle.fence, f"bundle of {len(bundle.ids)} slices")
            if refused is not None:
                self.bundles_refused += refused.status == 410
                return refused
        try:
            report = await self._crawler.member.adopt_in_steps(bundle, self._clock.wall())
        except FrontierError as exc:  # some of its slices are being released here (handover rule 7)
            return web.Response(status=503, text=str(exc))
        await self._crawler.commit()
        if self.failover is not None:
            await self.failover.handed_in(body, bundle.ids)
        self.slices_adopted += len(bundle.ids)
        self.bundles_adopted += 1
        self._adopted |= bundle.ids
        self._reconcile.set()  # a leaving peer may have handed this node slices another member owns
        log.info("adopted %d slices from %s: %s", len(bundle.ids), request.remote, report)
        ack = self.auth.ack(ADOPT_PATH, request.headers.get(AUTH_HEADER, ""))
        return web.Response(text="adopted", headers=ack)

    async def _refusal(self, fence: Fence, what: str) -> web.Response | None:
        """The answer that refuses ``what`` came with ``fence`` (rule 8): 410 when the token is stale (a
        WARNING names why), 503 when etcd cannot tell (the sender tries again); None to take it, the
        token then being the newest seen from its node."""
        try:
            why = await self._stale(fence)
        except Exception as exc:  # etcd unreachable: it cannot be proved current; the sender retries
            return web.Response(status=503, text=f"cannot check the fencing token: {exc}")
        if why is not None:
            log.warning("refused a stale %s: %s", what, why)
            return web.Response(status=410, text=f"stale fencing token: {why}")
        self._newest[fence.node] = max(self._newest.get(fence.node, 0), fence.revision)
        return None

    async def _stale(self, fence: Fence) -> str | None:
        """Why a bundle carrying ``fence`` is stale (rule 8), from the member list, or from etcd read
        now when the list names another lease (it may be older than the sender's registration); raises
        if etcd cannot be read."""
        known = {m.id: m.lease for m in self.membership.members()}
        lease = known.get(fence.node)
        if lease != fence.lease:
            fresh = await self.membership.registered()
            lease = fresh[fence.node].lease if fence.node in fresh else None
        return stale(fence, lease, self._newest.get(fence.node, 0))

    # -- handing over (rule 3) ----------------------------------------------------------------------

    async def _hand_over(self, slices: frozenset[int]) -> None:
        async with self._handing:
            await self._hand_over_now(slices)

    async def _hand_over_now(self, slices: frozenset[int]) -> None:
        crawler = self._crawler
        token = self.membership.fence
        self._kept |= slices  # until handed over (rule 5)
        if crawler is None or token is None:
            return  # nothing opened yet, or not registered: the slices stay here
        self.sync_owned()
        frontier = crawler.frontier
        started = self._clock.monotonic()
        async with asyncio.timeout(HANDOVER_TIMEOUT):
            while frontier.in_flight_in(slices):  # noqa: ASYNC110 - the frontier has no event for this
                await asyncio.sleep(0.05)
            own = self.membership.ownership
            heirs = own.heirs(slices, self.membership.leaving() | self._incompatible.keys())
            members = {m.id: m for m in self.membership.members()}
            addresses = {k: m.address for k, m in members.items()}
            sent_total = 0
            for owner, group in heirs.items():
                if owner not in addresses:
                    continue  # its owner is gone: kept for the next change
                sent: set[int] = set()
                books = self._reads_books(members[owner].wire)
                export = functools.partial(crawler.member.export, fence=token, books=books)
                async with contextlib.aclosing(bundle_chunks(export, group,
                                                             max_bytes=self._chunk_bytes)) as chunks:
                    async for chunk, body in chunks:
                        if not await self._deliver(owner, addresses[owner], chunk, body, token, books):
                            break  # its new owner left meanwhile: the rest stays here for the next change
                        await crawler.member.release_slices(chunk)  # adopted and committed there
                        self._adopted -= chunk
                        self._kept -= chunk
                        self.bundles_sent += 1
                        sent |= chunk
                self.slices_handed_over += len(sent)
                sent_total += len(sent)
                if sent and self.failover is not None:  # one manifest write per new owner
                    await self.failover.handed_out(frozenset(sent))
                if sent:  # its owner has them: no longer this node's orphans (ownership rule 13)
                    await self.membership.handed_over(frozenset(sent))
            await crawler.commit()
        kept = len(slices) - sent_total
        log.info("handed %d slices over in %.3f s%s", sent_total, self._clock.monotonic() - started,
                 f" ({kept} kept here: no heir that stays)" if kept else "")

    async def _deliver(self, owner: str, address: str, chunk: frozenset[int], body: bytes, token: Fence,
                       books: bool) -> bool:
        """Send the bundle ``body`` of ``chunk`` to ``owner`` until it is adopted with every URL queued here
        in those slices (True), or until ``owner`` is gone (False). A URL queued while a bundle was on the
        wire (a hand-off batch or an adoption taken in meanwhile) is in none sent: the chunk is exported
        and sent again before its release may delete it (handover rule 5; adoption merges, chunks rule 3)."""
        assert self._crawler is not None
        frontier, own = self._crawler.frontier, self.membership.ownership
        while True:
            if self.membership.fence != token or own.fenced(self._clock.boottime()):
                raise PolecatError("the lease this hand-over began under is gone: abandoned")
            if not await self._send_bundle(owner, address, body):
                return False
            late = frontier.queued_since_export(chunk)
            if not late:
                return True
            log.info("%d URLs were queued in %d slices while they went to %s: sent again", late, len(chunk),
                     owner)
            body = await self._crawler.member.export(chunk, token, books=books)

    async def _send_bundle(self, owner: str, address: str, body: bytes) -> bool:
        """POST one chunk to ``owner`` until it is adopted (True), or until ``owner`` is no longer
        registered in etcd (False; e.g. every node stopping at once: a peer that left never answers)."""
        assert self._session is not None
        delay = 0.1
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                proof = auth.request_proof(self._sign, ADOPT_PATH, address.rstrip("/"), len(body),
                                           self._clock.wall())
                headers = {SIGNATURE_HEADER: self._sign(body).hex(), AUTH_HEADER: proof,
                           WIRE_HEADER: self.me.wire.header, RELEASE_HEADER: self.me.wire.release}
                async with self._session.post(address.rstrip("/") + ADOPT_PATH, data=body,
                                              headers=headers) as resp:
                    if resp.status == 200:
                        if not ack_proves(self._verify, ADOPT_PATH, proof, resp.headers.get(ACK_HEADER)):
                            # Not a member: the slices stay here (auth rule 4).
                            raise PolecatError(f"{address} answered a slice bundle without proving the "
                                               "cluster secret: the slices stay here")
                        return True
                    if resp.status == 409:  # it is leaving too (rule 7)
                        log.info("%s is leaving: the slices meant for it stay here", owner)
                        return False
                    if resp.status == 426:  # its record said otherwise a moment ago (rule 9)
                        log.warning("%s refused a slice bundle: %s; the slices stay here", owner,
                                    await resp.text())
                        return False
                    if resp.status == 410:  # this node's token is stale: the hand-over is void
                        raise PolecatError(f"{owner} refused a slice bundle: {await resp.text()}")
                    if resp.status in (400, 401):
                        raise PolecatError(f"{address} refused a slice bundle: HTTP {resp.status}")
            with contextlib.suppress(Exception):  # etcd unreachable: keep trying the peer
                if owner not in await self.membership.registered():
                    log.warning("%s left during a hand-over to it: its slices stay here", owner)
                    return False
            await asyncio.sleep(delay)
            # Capped low: a peer that just came back wants its strays before it fetches their seeds
            # again (rule 7), and it answers as soon as its crawler is open.
            delay = min(0.5, delay * 2)

