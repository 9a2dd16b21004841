"""What one worker node needs from the cluster: routing by slice owner, the hand-off, idle reporting.

Rules:
1. A discovered URL is routed before dedup by the frontier's rule (polecat/frontier/routing.py, under the
   Ring over the member list): the frontier admits the URLs this member owns; the link stages the others
   in their owner's outbox (they are never marked seen here).
2. Seeds are queued by their owner only; every member learns every seed host of the configuration, so
   scope decisions (host and domain modes) are the same whichever member judges a URL. A seed an
   operator adds on a member that does not own it is forwarded to its owner marked as a seed
   (:meth:`ClusterLink.forward`): the owner adds its host to its scope and queues it.
3. The node stops leasing pages while more than ``max_backlog`` URLs wait for acknowledgement: a slow
   receiver slows the members that discover its URLs, and nothing is dropped. URLs kept for a member
   the node does not send to (no shared wire version, polecat/cluster/wire.py rule 4) do not count: they
   wait for its upgrade, and the node's own slices go on being fetched meanwhile.
4. A member is *quiet* when its frontier is idle, its outbox is empty and no batch is being received:
   the parent ends the crawl when every member stayed quiet with unchanged counters across two reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polecat.cluster.batch import HandoffUrl
from polecat.cluster.handoff import Handoff
from polecat.cluster.membership import Member, Membership
from polecat.cluster.receiver import HandoffReceiver
from polecat.cluster.ring import Ring
from polecat.fetch.pool import SendGate
from polecat.frontier.routing import Admission, Routing
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key

if TYPE_CHECKING:
    from polecat.cluster.claimlink import ContentClaims
    from polecat.frontier.frontier import Frontier


@dataclass(frozen=True, slots=True)
class SendLeave:
    """Leave to send one request (polecat/cluster/ownership.py rule 10): ``send`` is asked just before
    its bytes are written, ``go_on`` while it is in flight (False: abort it)."""

    send: SendGate
    go_on: SendGate


@dataclass(frozen=True, slots=True)
class LinkStats:
    """The hand-off side of a worker's report."""

    urls_routed_out: int
    urls_acked: int
    """URLs this member sent that their owners acknowledged."""
    urls_received: int
    """URLs received from other members and committed here."""
    backlog: int
    inbox_waits: int
    """Batches from other members that had to wait for room in this member's inbox."""
    lease_pauses: int
    """Times this member stopped leasing because its own URLs for others were not acknowledged."""
    busy_replies: int
    send_failures: int
    bytes_sent: int
    content_copies: int = 0
    """Pages stored as revisits of a copy the crawl stored first (content claims)."""
    claims_unanswered: int = 0
    """Pages stored in full, marked, because their content claim had no answer in time."""


class ClusterLink:
    """Routing (rule 1) and back-pressure (rule 3) for one member; the node drives it."""

    def __init__(self, membership: Membership, handoff: Handoff, receiver: HandoffReceiver, *,
                 max_backlog: int) -> None:
        self.self_id = membership.self_id
        self.ring = Ring(m.id for m in membership.members())
        self.routing = Routing(self.ring, self.self_id)
        self._frontier: Frontier | None = None
        self.handoff = handoff
        self.receiver = receiver
        self._max_backlog = max_backlog
        self.routed_out = 0
        self.pauses = 0
        self.permit: Callable[[str], SendLeave | None] | None = None
        """Set by a node whose ownership can be lost (etcd): leave to send a request to a host (None:
        withdraw it; see polecat/node/lease_runner.py rules 6-7). Unset: every request may go."""
        self.claims: ContentClaims | None = None
        """The member's content claims (polecat/cluster/claims.py), when the crawl stores each body once
        across members; the node holds pages there until their owner answers."""

    def set_members(self, members: Iterable[Member]) -> None:
        """Route by the Ring of a new member list (the etcd cluster's membership changes)."""
        ids = [m.id for m in members]
        if ids:
            self.ring = Ring(ids)
            self.routing = Routing(self.ring, self.self_id)
            if self._frontier is not None:
                self._frontier.set_routing(self.routing)

    def bind(self, frontier: Frontier) -> None:
        """Route ``frontier``'s admissions by this link's Ring from now on, through member changes."""
        self._frontier = frontier
        frontier.set_routing(self.routing)

    def owns(self, url: str) -> bool:
        return self.routing.owns(url)

    def route(self, urls: Iterable[str], depth: int, importance: float, hops: int = 0) -> list[str]:
        """The URLs this member owns; the rest are staged for their owners (rule 1)."""
        mine, outbox = self.routing.split(urls)
        self.stage(Admission(0, outbox), depth, importance, hops)
        return mine

    def forward(self, urls: Iterable[HandoffUrl]) -> list[HandoffUrl]:
        """Stage each URL (a seed keeps its mark) for its owner under the current Ring; returns the ones
        this member owns."""
        mine: list[HandoffUrl] = []
        by_owner: dict[str, list[HandoffUrl]] = {}
        for u in urls:
            if self.routing.owns(u.url):
                mine.append(u)
            else:
                by_owner.setdefault(self.ring.owner(slice_of(host_key(u.url))), []).append(u)
        for peer, staged in by_owner.items():
            self.handoff.stage(peer, staged)
            self.routed_out += len(staged)
        return mine

    def stage(self, admission: Admission, depth: int, importance: float, hops: int = 0) -> None:
        """Run an admission's outbox decision: stage each owner's URLs for it (rule 1)."""
        for peer, urls in admission.outbox.items():
            self.handoff.stage(peer, [HandoffUrl(url, depth, importance, hops, requisite=admission.requisites)
                                      for url in urls])
            self.routed_out += len(urls)

    def backlogged(self) -> bool:
        """Rule 3."""
        over = self.handoff.sendable_backlog() > self._max_backlog
        self.pauses += over
        return over

    def quiet(self, frontier_idle: bool) -> bool:
        """Rule 4."""
        return frontier_idle and self.handoff.backlog() == 0 and self.receiver.inbox.in_use == 0

    def stats(self) -> LinkStats:
        s = self.handoff.sender
        claims = self.claims.stats() if self.claims is not None else None
        return LinkStats(self.routed_out, self.handoff.urls_acked, self.receiver.urls, self.handoff.backlog(),
                         self.receiver.inbox.refused, self.pauses, s.busy_replies, s.failures,
                         self.handoff.bytes_sent, claims.copies if claims else 0,
                         claims.unanswered if claims else 0)
