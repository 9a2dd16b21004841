"""Which peers a node can speak to while a cluster is upgraded one node at a time: the wire version.
Sans-IO.

Rules:

1. :data:`WIRE_VERSION` is the version of everything the nodes of a cluster send each other: hand-off
   batches (polecat/cluster/batch.py), slice bundles (polecat/frontier/bundle.py), the internal routes
   and their heads (polecat/cluster/auth.py), member records (polecat/cluster/etcd.py). A change a node of
   the previous release cannot read raises it, and so does one that makes it decide otherwise where
   nodes must agree: the Ring's placement (polecat/cluster/ring.py ``RING_VERSION``), or two nodes would
   want different owners for one slice. :data:`WIRE_OLDEST` is the oldest version this release still
   reads, writes and decides by. A node speaks the range ``WIRE_OLDEST..WIRE_VERSION`` (a :class:`Wire`).
2. A node says its range and release in its etcd member record (``wire``, ``wire_oldest``,
   ``release``) and in the head of every internal request (:data:`WIRE_HEADER`, :data:`RELEASE_HEADER`).
   A record or a request without them comes from a release before this rule (0.2.0): wire 1.
3. Two nodes can speak when their ranges overlap (:func:`common`): each writes for the other in the
   newest version both read. A newer release that still reads the old wire works beside an older one,
   so a cluster is upgraded node by node with no stop.
4. A peer that cannot be spoken to (an incompatible member) stays in the Ring: every node, old or new,
   computes the same owner for each slice, and the owner keys in etcd keep one owner per slice. Nothing
   is sent to it: the URLs for its slices stay in this node's outbox (durable, counted), and slices whose
   heir it is stay here (as with a leaving member, ownership rule 8), until its member record shows a
   range this node speaks (it was upgraded and restarted) or this node is; then they go as usual.
   It is named once per range it shows, at WARNING, with both releases and ranges (:func:`refusal`).
5. A request whose head shows a range this node cannot speak is refused before its body is read (426,
   naming both ranges) and counted; its sender keeps what it sent (a batch stays in its outbox, a slice
   stays with it).
"""

from __future__ import annotations

from dataclasses import dataclass

from polecat.version import __version__

__all__ = [
    "CLAIM_BOOKS", "OLD", "RELEASE_HEADER", "THIS", "WIRE_HEADER", "WIRE_OLDEST", "WIRE_VERSION", "Wire",
    "common", "from_head", "refusal",
]

WIRE_VERSION = 3
"""This release's wire (rule 1). 1: 0.2.0's, with no version on it. 2: request proofs bound to their
receiver and used once, acknowledged (polecat/cluster/auth.py rules 3-5), and member records signed with
the cluster secret (polecat/cluster/member_records.py). 3: slice bundles may carry content claim books
(:data:`CLAIM_BOOKS`)."""
WIRE_OLDEST = 2
"""The oldest wire this release reads and writes (rule 1). Not 1: a node that still took 0.2.0's
replayable proofs and unsigned member records would keep the holes wire 2 closes, so a cluster of 0.2.0
is upgraded by stopping every node (CHANGELOG, Upgrading); from wire 2 on, node by node."""
CLAIM_BOOKS = 3
"""The first wire whose slice bundles may hold the ``claims`` table (polecat/cluster/claims.py rule 8): a
reader of wire 2 refuses a bundle with a table it does not know, so a bundle for it leaves the books
out (a missed collapse there, never a refused slice)."""
WIRE_HEADER = "X-Polecat-Wire"
"""``<oldest>-<newest>``: the wire versions the sender of an internal request speaks (rule 2)."""
RELEASE_HEADER = "X-Polecat-Release"
"""The sender's release, for the refusal's words (rule 2)."""
_BEFORE = "0.2.0 or older"
"""The release of a record or request that names none (rule 2)."""


@dataclass(frozen=True, slots=True, order=True)
class Wire:
    """The wire versions a node speaks, and its release."""

    oldest: int
    newest: int
    release: str = _BEFORE

    def __str__(self) -> str:
        span = str(self.newest) if self.oldest == self.newest else f"{self.oldest}-{self.newest}"
        return f"polecat {self.release}, wire {span}"

    @property
    def header(self) -> str:
        """The :data:`WIRE_HEADER` value."""
        return f"{self.oldest}-{self.newest}"


THIS = Wire(WIRE_OLDEST, WIRE_VERSION, __version__)
"""What this release speaks."""
OLD = Wire(1, 1)
"""What a record or request without a version speaks (rule 2)."""


def common(a: Wire, b: Wire) -> int | None:
    """The version ``a`` and ``b`` speak to each other (the newest both read), or None: none (rule 3)."""
    newest = min(a.newest, b.newest)
    return newest if newest >= max(a.oldest, b.oldest) else None


def from_head(wire: str | None, release: str | None) -> Wire | None:
    """The sender's range from a request's headers (rule 2: none is 0.2.0's); None when malformed."""
    if not wire:
        return OLD
    oldest, sep, newest = wire.strip().partition("-")
    if not (sep and oldest.isdigit() and newest.isdigit()) or int(oldest) > int(newest):
        return None
    name = (release or "").strip()[:40]
    return Wire(int(oldest), int(newest), name if name and name.isprintable() else _BEFORE)


def refusal(peer: str, theirs: Wire, ours: Wire) -> str:
    """The WARNING that names a peer this node cannot speak to (rule 4)."""
    return (f"member {peer} ({theirs}) and this node ({ours}) share no wire version: nothing is sent to "
            f"it, and the URLs and slices meant for it wait here until one of the two is upgraded")
