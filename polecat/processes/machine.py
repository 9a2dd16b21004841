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
   waits for its leases in flight, exports it in bounded chunks (:mod:`.chunks`), ``POST``s each to
   the new owner's ``/internal/adopt`` (signed like batches; the new owner adopts and commits the chunk
   before answering, and its hosts wait one full interval), releasing each chunk's slices once it is
   answered, and commits; only then is the owner key deleted and may the new owner claim it.
4. Every internal request is signed with the cluster secret (HMAC-SHA256): a missing or wrong signature
   is answered 401 and changes nothing. Its head proves the secret before its body is read, and the body
   is bounded per route (batches :data:`~polecat.cluster.batch.MAX_BATCH_BYTES`, bundles
   :data:`MAX_BUNDLE_BYTES`; :mod:`polecat.cluster.auth` rule 1): a stranger makes a node read a head.
5. With ``cluster.checkpoints`` set, the node ships its slices to object storage (:mod:`.failover`):
   every ``checkpoint_interval`` seconds, before a graceful leave, and for slices adopted by hand-over
   before the adoption is answered; slices handed over leave its checkpoint before their owner keys are
   deleted. The slices of a member that died are restored from its checkpoint before they are claimed;
   a node started on an empty data dir restores from its own checkpoint the slices no other node owns.
6. With checkpoints, a batch received is answered with the checkpoint round that will hold it; the
   sender keeps it (outbox rule 3) until that member's manifest reaches the round, read from the object
   store every :data:`RELEASE_EVERY` seconds at most, and re-routes it to the heirs if the member is
   gone before.
7. A node that is leaving answers every hand-over to it with 409 and hands nothing to members flagged
   leaving (ownership rule 8); a sender answered 409 keeps those slices. Every :data:`RECONCILE_EVERY`
   seconds, and at once after a member list change, an unfenced node that is not leaving hands the
   URLs it holds in slices it does not own to their Ring owners (ownership rule 7), the same way as a
   hand-over: after a whole cluster stopped and started again, nothing stays stranded. Hand-overs run
   one at a time.
8. Fencing (ownership rule 9): every bundle carries the sender's token; a hand-over stops before its
   next chunk once the token it began under is no longer this node's (its lease was lost) or the node
   is fenced. A receiver refuses a stale bundle with 410 and a WARNING naming why, and counts it; the
   sender abandons that hand-over (the decision was void). A bundle without a token (from a node of an
   older release) is adopted as before.
9. Content claims (polecat/cluster/claims.py) run as between ``--workers``: content slices are owned by
   the Ring of the latest member list, claim frames are signed like batches and travel on the batches'
   route (``POST /handoff``, told apart by their magic). A member list change moves content slices with
   no hand-over: the new owner's book starts empty for them (a later copy is stored in full once), and
   a claim sent to a member that left is answered by nobody (its pages are stored in full, marked).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from io import BytesIO
from typing import TYPE_CHECKING

import aiohttp
import lmdb
from aiohttp import web

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.aetcd_client import AetcdClient
from polecat.cluster.auth import AUTH_HEADER, hmac_signer, hmac_verifier, request_proof
from polecat.cluster.batch import MAX_BATCH_BYTES, Batch, HandoffUrl
from polecat.cluster.checkpoints import CheckpointStore
from polecat.cluster.chunks import CHUNK_BYTES, bundle_chunks
from polecat.cluster.claimlink import ContentClaims
from polecat.cluster.claimwire import is_claim_frame
from polecat.cluster.etcd import EtcdMembership
from polecat.cluster.failover import Failover
from polecat.cluster.handoff import Handoff
from polecat.cluster.link import ClusterLink
from polecat.cluster.membership import Member
from polecat.cluster.outbox import Outbox
from polecat.cluster.ownership import stale
from polecat.cluster.receiver import HandoffReceiver
from polecat.cluster.stats import ClusterStats
from polecat.cluster.transport import _STATUS, PATH, ROUND_HEADER, HttpTransport, read_body
from polecat.config import Config
from polecat.errors import PolecatError
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
"""Where a node serves its :class:`ClusterStats` as JSON (for ``polecat cluster status``; operator token)."""
INTERNAL_PATHS = frozenset({PATH, ADOPT_PATH})
"""Routes authenticated by the cluster signature instead of the operator's bearer token."""


class ClusterNode:
    """The cluster side of one node (rules above). ``join()``, then open the crawler with ``link``,
    ``start(crawler)``, mount :meth:`routes`; ``leave()`` hands every slice over. ``clock`` is the one
    the membership, the hand-off and failover read (fencing compares the membership's lease times
    with it, so they must be one clock); give the crawler the same one."""

    def __init__(self, cfg: Config, *, clock: Clock = SYSTEM_CLOCK) -> None:
        cc = cfg.cluster
        self._clock = clock
        self.me = Member(cc.node_id, cc.advertise)
        self._sign = hmac_signer(cc.secret)
        self._verify = hmac_verifier(cc.secret)
        self.outbox = Outbox(cfg.data_dir / "handoff", batch_urls=cc.batch_urls)
        self.transport = HttpTransport(sign=self._sign, clock=clock)
        self._chunk_bytes = CHUNK_BYTES
        self.handoff = Handoff(self.me.id, self.outbox, self.transport, {}, sign=self._sign, clock=clock)
        self.failover = Failover(CheckpointStore.open(cc.checkpoints, cc.checkpoint_options, cc.name),
                                 self.me.id, cc.checkpoint_interval,
                                 settled=self.handoff.settled, token=self._token,
                                 clock=clock) if cc.checkpoints else None
        self.membership = EtcdMembership(AetcdClient(cc.etcd), cc.name, self.me, ttl=cc.lease_ttl,
                                         clock=clock, on_release=self._hand_over,
                                         on_restore=self.failover.restore if self.failover else None)
        self.receiver = HandoffReceiver(self._sink, capacity=cc.inbox_urls, verify=self._verify)
        self.claims = ContentClaims(self.me.id, self._content_owner, self.transport, {},
                                    capacity=cc.claim_pages, wait=cc.claim_wait, book_capacity=cc.claim_book,
                                    sign=self._sign, verify=self._verify, clock=clock) \
            if cc.content_claims else None
        """Rule 9."""
        self._fresh = not (cfg.data_dir / "frontier").exists()
        """No frontier on disk before this start (a new node, or one whose disk was lost)."""
        self.link: ClusterLink | None = None
        self._max_backlog = cc.max_backlog
        self._crawler: Crawler | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self.slices_handed_over = self.slices_adopted = 0
        self.bundles_sent = self.bundles_adopted = self.bundles_refused = 0
        """Hand-over bundles adopted by their receiver, adopted here, refused here as stale (rule 8)."""
        self._newest: dict[str, int] = {}
        """Sender -> the highest token revision of a bundle adopted from it (rule 8)."""
        self._leaving = False
        """Set when ``leave()`` begins: hand-overs to this node are refused from then on (rule 7)."""
        self._reconcile = asyncio.Event()
        """Set on every member list change: look for strays at once (a peer that came back wants its
        slices before it fetches their seeds again), not only every :data:`RECONCILE_EVERY` seconds."""
        self._handing = asyncio.Lock()
        """Held by the hand-over that runs (rule 7: one at a time)."""

    async def join(self) -> ClusterLink:
        """Register in etcd and read the member list; returns the link to open the crawler with."""
        if self.failover is not None:
            await self.failover.open()
            if self._fresh:  # restarted without its disk: its checkpoint has the slices nobody took over
                own = self.failover.manifest.slices - await self.membership.owned_by_others()
                self.membership.ownership.inherit(own, self.me.id)
        await self.membership.start()
        await self.membership.resync()
        self.link = ClusterLink(self.membership, self.handoff, self.receiver, max_backlog=self._max_backlog)
        self.link.may_send = self._may_send
        self.link.claims = self.claims
        self._follow(self.membership.members())
        return self.link

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

    def stats(self) -> ClusterStats:
        """This node's cluster figures now (``/metrics``)."""
        own = self.membership.ownership
        now = self._clock.monotonic()
        queued = self._crawler.frontier.unowned_queued() if self._crawler is not None else {}
        # The frontier's owned set follows the membership's within SYNC_EVERY: strays by the latter.
        strays = {s: queued[s] for s in own.strays(queued)}
        fo = self.failover
        return ClusterStats(
            fenced=own.fenced(now), lease_age=own.lease_age(now), slices_owned=len(own.leasable(now)),
            slices_wanted=len(own.wanted), bundles_sent=self.bundles_sent,
            bundles_adopted=self.bundles_adopted, bundles_refused=self.bundles_refused,
            stray_urls=sum(strays.values()), stray_slices=len(strays),
            checkpoint_rounds=fo.rounds if fo else 0, checkpoint_failures=fo.failures if fo else 0,
            checkpoint_age=now - fo.last_round_at if fo and fo.last_round_at is not None else None)

    def _token(self) -> Fence | None:
        """This node's fencing token while it is not fenced (a checkpoint round is written under one)."""
        own = self.membership.ownership
        return None if own.fenced(self._clock.monotonic()) else self.membership.fence

    def _content_owner(self, content_slice: int) -> str:
        """Rule 9: the owner of a content slice under the latest member list's Ring."""
        return self.link.ring.owner(content_slice) if self.link is not None else self.me.id

    def _may_send(self, host: str) -> bool:
        """Ownership rule 5 at send time (lease_runner rule 6): the frontier's owned set lags by up to
        :data:`SYNC_EVERY`, and a woken process runs its fetch tasks before its sync loop."""
        return self.membership.ownership.may_lease(slice_of(host), self._clock.monotonic())

    def sync_owned(self) -> None:
        if self._crawler is not None:
            self._crawler.member.set_owned(self.membership.leasable())

    async def leave(self) -> None:
        """Checkpoint, hand every slice over and revoke the lease (graceful stop; the crawler still
        runs)."""
        self._leaving = True
        if self.failover is not None and self._crawler is not None and (now := self._shipped()) is not None:
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
        if self._session is not None:
            await self._session.close()
        await self.transport.close()
        self.outbox.close()

    def _shipped(self) -> tuple[frozenset[int], frozenset[int]] | None:
        """The slices a checkpoint round ships and those it carries (failover rule 4)."""
        own = self.membership.ownership
        if own.fenced(self._clock.monotonic()):
            return None
        return own.held, own.wanted - own.held

    # -- loops --------------------------------------------------------------------------------------

    async def _views(self) -> None:
        async for members in self.membership.changes():
            self._follow(members)

    def _follow(self, members: tuple[Member, ...]) -> None:
        assert self.link is not None
        self.link.set_members(members)
        self.handoff.set_addresses({m.id: m.address for m in members if m.id != self.me.id})
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
            if crawler is None or self._leaving or own.fenced(self._clock.monotonic()):
                continue
            strays = own.strays(crawler.frontier.unowned_queued())
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
            beat += 1
            if beat % 10 == 0:  # batches that were in flight at the change come back here
                self._reroute()

    # -- receiving ----------------------------------------------------------------------------------

    async def _sink(self, batch: Batch) -> None:
        """Queue what this node owns; forward the rest to its owner (rule 2)."""
        assert self.link is not None and self._crawler is not None
        mine = self.link.forward(batch.urls)  # a forwarded seed stays a seed (link rule 2)
        if len(mine) < len(batch.urls):  # durable in the outbox before the sender may forget them
            with contextlib.suppress(lmdb.Error):  # raised by finish_commit, as a FrontierError
                await asyncio.wrap_future(self.handoff.start_commit())  # the fsync off the loop
            self.handoff.finish_commit()
        if mine:
            await self._crawler.member.receive(Batch(batch.sender, batch.seq, tuple(mine)))

    async def _read(self, request: web.Request, max_bytes: int) -> bytes:
        """The body, once the request's head proves the secret (rule 4)."""
        try:
            return await read_body(request, max_bytes, self._verify, self._clock)
        except web.HTTPUnauthorized:
            self.receiver.unauthorized += 1
            log.warning("refused %s from %s: %s", request.path, request.remote, "its head does not prove the "
                        "cluster secret")
            raise

    async def _handle_batch(self, request: web.Request) -> web.Response:
        data = await self._read(request, MAX_BATCH_BYTES)
        if self.claims is not None and is_claim_frame(data):  # rule 9: claims share the batches' route
            claimed = await self.claims.receive(data)
            return web.Response(status=_STATUS[claimed.status], text=claimed.detail)
        reply = await self.receiver.receive(data)
        headers = {"Retry-After": f"{reply.retry_after:.3f}"} if reply.status == "busy" else None
        if reply.status == "ok" and self.failover is not None:  # committed now: that round will hold it
            headers = {ROUND_HEADER: str(self.failover.covering_round())}
        return web.Response(status=_STATUS[reply.status], text=reply.detail, headers=headers)

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
        if (fence := bundle.fence) is not None:
            try:
                why = await self._stale(fence)
            except Exception as exc:  # etcd unreachable: it cannot be proved current; the sender retries
                return web.Response(status=503, text=f"cannot check the fencing token: {exc}")
            if why is not None:
                self.bundles_refused += 1
                log.warning("refused a stale bundle of %d slices: %s", len(bundle.ids), why)
                return web.Response(status=410, text=f"stale fencing token: {why}")
            self._newest[fence.node] = max(self._newest.get(fence.node, 0), fence.revision)
        report = self._crawler.member.adopt(bundle, self._clock.wall())
        await self._crawler.commit()
        if self.failover is not None:
            await self.failover.handed_in(body, bundle.ids)
        self.slices_adopted += len(bundle.ids)
        self.bundles_adopted += 1
        log.info("adopted %d slices from %s: %s", len(bundle.ids), request.remote, report)
        return web.Response(text="adopted")

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
        if crawler is None or token is None:
            return  # nothing opened yet, or not registered: the slices stay here
        self.sync_owned()
        frontier = crawler.frontier
        started = self._clock.monotonic()
        async with asyncio.timeout(HANDOVER_TIMEOUT):
            while frontier.in_flight_in(slices):  # noqa: ASYNC110 - the frontier has no event for this
                await asyncio.sleep(0.05)
            own = self.membership.ownership
            heirs = own.heirs(slices, self.membership.leaving())
            addresses = {m.id: m.address for m in self.membership.members()}
            sent_total = 0
            for owner, group in heirs.items():
                if owner not in addresses:
                    continue  # its owner is gone: kept for the next change
                sent: set[int] = set()
                chunks = bundle_chunks(frontier, group, self._clock.wall(), max_bytes=self._chunk_bytes,
                                       fence=token)
                for chunk, body in chunks:
                    if self.membership.fence != token or own.fenced(self._clock.monotonic()):
                        raise PolecatError("the lease this hand-over began under is gone: abandoned")
                    if not await self._send_bundle(owner, addresses[owner], body):
                        break  # its new owner left meanwhile: the rest stays here for the next change
                    crawler.member.release_slices(chunk)  # adopted and committed there
                    self.bundles_sent += 1
                    sent |= chunk
                self.slices_handed_over += len(sent)
                sent_total += len(sent)
                if sent and self.failover is not None:  # one manifest write per new owner
                    await self.failover.handed_out(frozenset(sent))
            await crawler.commit()
        kept = len(slices) - sent_total
        log.info("handed %d slices over in %.3f s%s", sent_total, self._clock.monotonic() - started,
                 f" ({kept} kept here: no heir that stays)" if kept else "")

    async def _send_bundle(self, owner: str, address: str, body: bytes) -> bool:
        """POST one chunk to ``owner`` until it is adopted (True), or until ``owner`` is no longer
        registered in etcd (False; e.g. every node stopping at once: a peer that left never answers)."""
        assert self._session is not None
        delay = 0.1
        while True:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                headers = {SIGNATURE_HEADER: self._sign(body).hex(),
                           AUTH_HEADER: request_proof(self._sign, ADOPT_PATH, len(body), self._clock.wall())}
                async with self._session.post(address.rstrip("/") + ADOPT_PATH, data=body,
                                              headers=headers) as resp:
                    if resp.status == 200:
                        return True
                    if resp.status == 409:  # it is leaving too (rule 7)
                        log.info("%s is leaving: the slices meant for it stay here", owner)
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

