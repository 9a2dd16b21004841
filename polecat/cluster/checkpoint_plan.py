"""Slice checkpoints in object storage: what a node's manifest says and when a round is due (sans-IO).

Layout under the ``cluster.checkpoints`` store, per cluster and node (:func:`object_name`,
:func:`manifest_name`):

- ``<cluster>/<node>/<version>-<tag>.pcsb``: immutable :class:`~polecat.frontier.bundle.SliceBundle`
  objects, each holding some of the node's slices;
- ``<cluster>/<node>/MANIFEST``: JSON, the node's latest complete checkpoint (every slice it holds, and
  the object holding each), replaced whole by one PUT (atomic in every obstore backend).

Rules:
1. A manifest names, for each slice in it, the one object holding that slice's latest shipped state (a
   slice is in at most one entry). Objects are written and confirmed before the manifest that names
   them, so a reader of a manifest always finds its objects.
2. A *round* ships every slice the node holds, one object per group of :data:`GROUP` consecutive
   slices; a group whose slices and bundle digest are those of its entry in the current manifest is not
   uploaded again (incremental). A group none of whose slices was written since the last round (the
   frontier's written slices, polecat/frontier/tables.py rule 6) keeps its entry when that entry has
   the same slices and a digest (:meth:`Manifest.unchanged`): it is not even exported, so a round reads
   the groups written since the last one, not every slice held. Slices the Ring gives the node that
   it does not hold at the moment (claims pending after a restart, a lease being renewed) keep their
   entries (*carried*): a round never drops the last checkpoint of a slice that is still the node's.
   A round is due every
   ``interval`` seconds, and at once after an adoption (:meth:`CheckpointSchedule.urge`), so adopted
   slices are not only in a dead member's manifest.
3. Rounds are numbered when their snapshot is taken (after a frontier commit); every URL committed to
   the frontier before round R began is in each manifest whose ``round`` is >= R. A receiver acknowledges
   a hand-off batch with :meth:`CheckpointSchedule.covering_round`; the sender keeps the batch until the
   receiver's manifest reaches that round (or re-routes it if the receiver died before).
4. A slice adopted by hand-over gets its own entry at once (the bundle received is written as an
   object): the adopter's manifest holds it before the old owner releases the owner key. A slice handed
   over leaves the manifest before its owner key is deleted (:meth:`Manifest.without`), so a node that
   left gracefully leaves a manifest naming no slice: only a dead node's manifest holds slices.
5. Objects named by the previous manifest and not by the new one are deleted once the new one is
   written (:func:`garbage`); a dead node's objects stay for its heirs.
6. The heir of a dead member's slices reads that member's manifest and takes from each object only the
   slices it inherits (:meth:`Manifest.locate`).
7. A round whose hand-off batches are not all acknowledged (a receiver frozen, cut off, slow) still
   ships: the URLs of those batches go into one more object, the manifest's ``strays``, and the heir
   that restores the manifest's lowest slice routes them to their owners, as if the node had sent them
   again (:meth:`Manifest.routes_strays`). Heirs restore disjoint slices (one owner key each), so each
   stray is routed by exactly one heir: when every heir routed them, each URL arrived once per heir.
   A snapshot records pages done whose links for other owners were still only in the node's outbox,
   which dies with its disk; without this the round had to wait (or be skipped) until every receiver
   answered, and a restore then went back to an older round. A manifest without ``strays``
   (none pending, or written by 0.3.0) reads as none.
8. A manifest carries the fencing token its round was taken under (``fence``: the writer's lease and
   the etcd revision of its registration, ownership rule 9; hand-over entries and removals keep the
   round's). An heir restoring a slice that several manifests name (held by A, then by B) takes it from
   the one with the newest token, and refuses, for that slice, a manifest whose token is older than
   another one naming it or than the newest manifest token it restored that slice from before:
   :func:`freshest`. (A bundle adopted by hand-over does not count: a node ships the URLs it queued
   from seeds in a slice it never owned, under its own token, as strays.) A manifest without a token
   (written by 0.3.0) is taken as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from polecat.errors import PolecatError
from polecat.frontier.bundle import Fence
from polecat.frontier.slices import SLICES

FORMAT = 1
GROUP = 64
"""Slices per object in a round (4096 / 64 = 64 objects at most per node and round)."""
MANIFEST = "MANIFEST"


class CheckpointError(PolecatError):
    """A checkpoint manifest or object is unreadable, or the store refused a read or write."""

    retryable = True


def manifest_name(cluster: str, node: str) -> str:
    return f"{cluster}/{node}/{MANIFEST}"


def object_name(cluster: str, node: str, version: int, tag: str) -> str:
    return f"{cluster}/{node}/{version:012d}-{tag}.pcsb"


def groups(slices: Iterable[int]) -> dict[int, frozenset[int]]:
    """``slices`` by group of rule 2."""
    out: dict[int, set[int]] = {}
    for s in slices:
        out.setdefault(s // GROUP, set()).add(s)
    return {g: frozenset(ss) for g, ss in sorted(out.items())}


@dataclass(frozen=True, slots=True)
class Entry:
    """One object and the slices of the manifest it holds. ``digest`` identifies a round's group
    bundle (empty for a hand-over entry, which the next round replaces)."""

    object: str
    slices: frozenset[int]
    group: int = -1
    digest: str = ""


@dataclass(frozen=True, slots=True)
class Manifest:
    """A node's latest complete checkpoint (rules 1, 3)."""

    node: str
    version: int = 0
    """Counts every manifest this node wrote."""
    round: int = 0
    """The last complete round (rule 3)."""
    written: float = 0.0
    entries: tuple[Entry, ...] = ()
    strays: str = ""
    """The object of the hand-off URLs not yet acknowledged when the last round was taken (rule 7;
    empty: none)."""
    fence: Fence | None = None
    """The token the last round was taken under (rule 8; None: written by 0.3.0, or outside etcd)."""

    @property
    def slices(self) -> frozenset[int]:
        return frozenset().union(*(e.slices for e in self.entries))

    @property
    def objects(self) -> frozenset[str]:
        return frozenset(e.object for e in self.entries) | ({self.strays} if self.strays else set())

    def routes_strays(self, restoring: Iterable[int]) -> bool:
        """Whether the heir restoring ``restoring`` (some of this manifest's slices) routes its strays:
        the one that restores its lowest slice (rule 7)."""
        return bool(self.strays) and bool(self.entries) and min(self.slices) in frozenset(restoring)

    def locate(self, slices: Iterable[int]) -> dict[str, frozenset[int]]:
        """Object -> the slices of ``slices`` it holds (slices not in the manifest are left out)."""
        want = frozenset(slices)
        return {e.object: e.slices & want for e in self.entries if e.slices & want}

    def reusable(self, group: int, slices: frozenset[int], digest: str) -> Entry | None:
        """The entry a round may keep for ``group`` without uploading it again (rule 2)."""
        for e in self.entries:
            if e.group == group and e.slices == slices and e.digest == digest:
                return e
        return None

    def unchanged(self, group: int, slices: frozenset[int]) -> Entry | None:
        """The entry a round keeps for ``group`` when none of ``slices`` was written since the last
        round (rule 2); None when there is none to keep (a hand-over entry, or a narrowed one, has no
        digest: the round exports the group)."""
        for e in self.entries:
            if e.group == group and e.slices == slices and e.digest:
                return e
        return None

    def after_round(self, round_: int, entries: Iterable[Entry], carried: Iterable[int], written: float,
                    strays: str = "", fence: Fence | None = None) -> Manifest:
        """The manifest a complete round writes: its entries, and this manifest's entries for the
        ``carried`` slices (rule 2), narrowed to them; ``strays``, the round's object of hand-off URLs
        not acknowledged (rule 7); ``fence``, the token the round was taken under (rule 8)."""
        keep = frozenset(carried)
        old = [Entry(e.object, e.slices & keep, e.group, e.digest if e.slices <= keep else "")
               for e in self.entries if e.slices & keep]
        return Manifest(self.node, self.version + 1, round_, written, (*old, *entries), strays, fence)

    def with_entry(self, entry: Entry, written: float) -> Manifest:
        """``entry`` added; its slices leave every other entry (rule 4)."""
        kept = self._minus(entry.slices)
        return Manifest(self.node, self.version + 1, self.round, written, (*kept, entry), self.strays,
                        self.fence)

    def without(self, slices: Iterable[int], written: float) -> Manifest:
        """``slices`` removed (handed over: rule 4)."""
        return Manifest(self.node, self.version + 1, self.round, written, self._minus(frozenset(slices)),
                        self.strays, self.fence)

    def _minus(self, gone: frozenset[int]) -> tuple[Entry, ...]:
        out = []
        for e in self.entries:
            left = e.slices - gone
            if left == e.slices:
                out.append(e)
            elif left:  # narrowed: the next round uploads this group again (digest no longer matches)
                out.append(Entry(e.object, left, e.group, ""))
        return tuple(out)

    def to_bytes(self) -> bytes:
        info: dict[str, object] = {
            "format": FORMAT, "node": self.node, "version": self.version, "round": self.round,
            "written": self.written,
            "entries": [{"object": e.object, "slices": sorted(e.slices), "group": e.group, "digest": e.digest}
                        for e in self.entries],
        }
        if self.strays:  # absent otherwise: the manifest 0.3.0 writes and reads (rule 7)
            info["strays"] = self.strays
        if self.fence is not None:  # absent: 0.3.0's manifest, and one written outside etcd (rule 8)
            fence = self.fence
            info["fence"] = {"node": fence.node, "lease": fence.lease, "revision": fence.revision}
        return json.dumps(info, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        """Parse and check a manifest; CheckpointError naming what is wrong."""
        try:
            info = json.loads(raw)
            if info["format"] != FORMAT:
                raise CheckpointError(f"checkpoint manifest format {info['format']}, this polecat reads "
                                      f"{FORMAT}")
            entries = tuple(Entry(str(e["object"]), frozenset(int(s) for s in e["slices"]), int(e["group"]),
                                  str(e["digest"])) for e in info["entries"])
            token = info.get("fence")
            fence = None if token is None else Fence(str(token["node"]), int(token["lease"]),
                                                     int(token["revision"]))
            manifest = cls(str(info["node"]), int(info["version"]), int(info["round"]),
                           float(info["written"]), entries, str(info.get("strays", "")), fence)
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"checkpoint manifest unreadable: {exc!r}") from exc
        seen: set[int] = set()
        for e in entries:
            if not all(0 <= s < SLICES for s in e.slices) or seen & e.slices:
                raise CheckpointError("checkpoint manifest names a slice out of range or twice")
            seen |= e.slices
        return manifest


@dataclass(frozen=True, slots=True)
class Choice:
    """Which manifest an heir restores each slice from (rule 8)."""

    take: dict[str, frozenset[int]]
    """Member -> the slices restored from its manifest."""
    refused: dict[str, frozenset[int]]
    """Member -> the slices asked of its manifest that a newer token names (not restored from it)."""


def freshest(manifests: Mapping[str, Manifest], sources: Mapping[str, Iterable[int]],
             known: Mapping[int, int]) -> Choice:
    """Rule 8: for each slice of ``sources`` (member -> slices to restore from its manifest), the
    manifest of ``manifests`` (member -> its manifest) to take it from; ``known``: slice -> the newest
    token revision of its owners seen here."""
    take: dict[str, set[int]] = {}
    refused: dict[str, set[int]] = {}
    for member, slices in sorted(sources.items()):
        mine = manifests.get(member)
        if mine is None:
            continue
        for s in frozenset(slices) & mine.slices:
            if mine.fence is None:  # 0.3.0's manifest: no token to compare
                take.setdefault(member, set()).add(s)
                continue
            best, rev = member, mine.fence.revision
            for other, theirs in sorted(manifests.items()):
                if theirs.fence is not None and theirs.fence.revision > rev and s in theirs.slices:
                    best, rev = other, theirs.fence.revision
            if best != member or mine.fence.revision < known.get(s, 0):
                refused.setdefault(member, set()).add(s)
            if rev >= known.get(s, 0):
                take.setdefault(best, set()).add(s)
    return Choice({m: frozenset(ss) for m, ss in take.items()},
                  {m: frozenset(ss) for m, ss in refused.items()})


def garbage(old: Manifest, new: Manifest) -> frozenset[str]:
    """Objects ``old`` named and ``new`` does not (rule 5)."""
    return old.objects - new.objects


class CheckpointSchedule:
    """When the next round is due, and the round numbers of rule 3."""

    def __init__(self, interval: float, *, round_: int = 0) -> None:
        self.interval = interval
        self.begun = round_
        """Rounds begun (the last one may still be running)."""
        self._last = float("-inf")
        self._urged = False

    def due(self, now: float) -> bool:
        return self._urged or now - self._last >= self.interval

    def wait(self, now: float) -> float:
        """Seconds until a round is due (0: now)."""
        return 0.0 if self._urged else max(0.0, self._last + self.interval - now)

    def urge(self) -> None:
        """A round as soon as possible (rule 2: after an adoption)."""
        self._urged = True

    def begin(self, now: float) -> int:
        """A round starts at ``now`` (before its frontier commit and snapshot): its number."""
        self._last = now
        self._urged = False
        self.begun += 1
        return self.begun

    def covering_round(self) -> int:
        """The first round whose snapshot holds everything committed so far (rule 3)."""
        return self.begun + 1


def covered(batches: Mapping[int, int], manifest_round: int) -> frozenset[int]:
    """Of ``batches`` (seq -> the round a receiver named when acknowledging it), those its manifest
    at ``manifest_round`` holds (rule 3)."""
    return frozenset(seq for seq, r in batches.items() if r <= manifest_round)
