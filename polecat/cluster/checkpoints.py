"""Slice checkpoints in object storage: the blocking I/O of :mod:`.checkpoint_plan`'s rules.

Everything here blocks (obstore's synchronous calls, digests, serialization) and is meant for a worker
thread (:func:`asyncio.to_thread`), except the exports a round reads from a frontier snapshot: those stay
on the thread that took the snapshot (:meth:`CheckpointStore.ship_round` is the synchronous whole;
:mod:`.failover` runs its steps from the node). The store is any obstore backend (``file://``,
``s3://``, ``gs://``, ``az://``; ``memory:///`` in unit tests).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import obstore
import xxhash

from polecat.cluster.checkpoint_plan import (
    CheckpointError,
    Entry,
    Manifest,
    garbage,
    groups,
    manifest_name,
    object_name,
)
from polecat.errors import StoreError
from polecat.frontier.bundle import BundleError, BundleWriter, Fence, SliceBundle
from polecat.frontier.slices import SLICES, prefix_slice
from polecat.store.object import make_object_store

log = logging.getLogger(__name__)

Exporter = Callable[[frozenset[int], float], SliceBundle]
"""The committed state of some slices as a bundle stamped with the given time
(``Frontier.snapshot().export``)."""


@dataclass(frozen=True, slots=True)
class RoundReport:
    """What one round shipped."""

    manifest: Manifest
    uploaded: int
    """Objects written (groups that changed since the last round)."""
    bytes: int


def digest(bundle: SliceBundle) -> str:
    """Identifies a bundle's content (not its creation time): rule 2's "unchanged"."""
    h = xxhash.xxh3_128(",".join(map(str, sorted(bundle.ids))).encode())
    for frame in bundle.frames:
        h.update(frame)
    return h.hexdigest()


def subset(bundle: SliceBundle, slices: frozenset[int]) -> SliceBundle:
    """The records of ``bundle`` about ``slices`` (and the cross-slice operator controls it carries)."""
    out = BundleWriter(bundle.ids & slices, bundle.tables, created=bundle.created)
    for table, key, value in bundle.records():
        owner = prefix_slice(key)
        if owner >= SLICES or owner in slices:
            out.add(table, key, value)
    return out.finish()


class CheckpointStore:
    """One cluster's checkpoints in an object store (blocking calls: run them in a worker thread)."""

    def __init__(self, store: Any, cluster: str) -> None:
        self._store = store
        self.cluster = cluster

    @classmethod
    def open(cls, url: str, options: tuple[tuple[str, str], ...], cluster: str) -> CheckpointStore:
        """The store at ``url`` (CheckpointError naming ``cluster.checkpoints`` if it cannot be built)."""
        try:
            return cls(make_object_store(url, options), cluster)
        except StoreError as exc:
            raise CheckpointError(f"cluster.checkpoints: {exc}") from exc

    def read_manifest(self, node: str) -> Manifest | None:
        """``node``'s latest manifest; None if it never wrote one."""
        raw = self._get(manifest_name(self.cluster, node), missing_ok=True)
        return None if raw is None else Manifest.from_bytes(raw)

    def write_manifest(self, manifest: Manifest, previous: Manifest) -> None:
        """Write ``manifest`` (its objects are already written), then delete what it no longer names."""
        self._put(manifest_name(self.cluster, manifest.node), manifest.to_bytes())
        for name in garbage(previous, manifest):
            try:
                obstore.delete(self._store, name)
            except (OSError, obstore.exceptions.BaseError) as exc:  # an orphan costs space, nothing else
                log.warning("checkpoint: could not delete %s: %s", name, exc)

    def ship_round(self, export: Exporter, held: frozenset[int], previous: Manifest, round_: int,
                   now: float, *, carried: frozenset[int] = frozenset(),
                   written: frozenset[int] | None = None) -> RoundReport:
        """One round (rule 2): the groups of ``held`` with a slice in ``written`` (every group when
        None) exported from the last commit, the changed ones uploaded, the others' entries kept, then
        the manifest (which keeps ``previous``'s entries of ``carried`` slices). Raises
        CheckpointError (the previous manifest stays valid). The node runs the same steps with the
        exports on its loop thread (:mod:`.failover`)."""
        entries: list[Entry] = []
        size = 0
        for group, ids in groups(held).items():
            kept = previous.unchanged(group, ids) if written is not None and not ids & written else None
            if kept is not None:
                entries.append(kept)
                continue
            entry, sent = self.ship_group(group, export(ids, now), previous)
            entries.append(entry)
            size += sent
        return self.finish_round(previous, round_, entries, carried - held, now, size)

    def ship_group(self, group: int, bundle: SliceBundle, previous: Manifest) -> tuple[Entry, int]:
        """The entry of one group of a round: ``previous``'s if unchanged, else a new object (uploaded);
        and the bytes uploaded."""
        mark = digest(bundle)
        entry = previous.reusable(group, bundle.ids, mark)
        if entry is not None:
            return entry, 0
        entry = Entry(object_name(self.cluster, previous.node, previous.version + 1, f"g{group:02d}"),
                      bundle.ids, group, mark)
        body = bundle.to_bytes()
        self._put(entry.object, body)
        return entry, len(body)

    def finish_round(self, previous: Manifest, round_: int, entries: list[Entry], carried: frozenset[int],
                     now: float, size: int, strays: bytes = b"", fence: Fence | None = None) -> RoundReport:
        """Write the round's manifest (after every object of it is written), with ``strays`` (the
        msgpack URL list of the hand-off batches not acknowledged, checkpoint_plan rule 7) as one more
        object when there are any, and ``fence``, the token the round was taken under (checkpoint_plan
        rule 8)."""
        name = ""
        if strays:
            name = object_name(self.cluster, previous.node, previous.version + 1, "strays")
            self._put(name, strays)
            size += len(strays)
        manifest = previous.after_round(round_, entries, carried, now, name, fence)
        self.write_manifest(manifest, previous)
        return RoundReport(manifest, sum(1 for e in entries if e.object not in previous.objects) + bool(name),
                           size)

    def fetch_strays(self, manifest: Manifest) -> bytes:
        """The msgpack URL list of ``manifest``'s strays object (empty: none; rule 7)."""
        if not manifest.strays:
            return b""
        raw = self._get(manifest.strays, missing_ok=False)
        assert raw is not None  # missing_ok=False raises instead
        return raw

    def add_handover(self, body: bytes, slices: frozenset[int], previous: Manifest, now: float) -> Manifest:
        """Rule 4: a bundle adopted by hand-over becomes an object and an entry at once."""
        name = object_name(self.cluster, previous.node, previous.version + 1, "handover")
        self._put(name, body)
        manifest = previous.with_entry(Entry(name, slices), now)
        self.write_manifest(manifest, previous)
        return manifest

    def fetch(self, manifest: Manifest, slices: frozenset[int]) -> list[SliceBundle]:
        """The state of ``slices`` in ``manifest``'s objects, one bundle per object (rule 6)."""
        out = []
        for name, ids in sorted(manifest.locate(slices).items()):
            raw = self._get(name, missing_ok=False)
            assert raw is not None
            try:
                bundle = SliceBundle.read(io.BytesIO(raw))
            except BundleError as exc:
                raise CheckpointError(f"checkpoint object {name}: {exc}") from exc
            out.append(subset(bundle, ids))
        return out

    def _put(self, name: str, data: bytes) -> None:
        try:
            obstore.put(self._store, name, data)
        except (OSError, obstore.exceptions.BaseError) as exc:
            raise CheckpointError(f"checkpoint write of {name} failed: {exc}") from exc

    def _get(self, name: str, *, missing_ok: bool) -> bytes | None:
        try:
            return bytes(obstore.get(self._store, name).bytes())
        except FileNotFoundError as exc:
            if missing_ok:
                return None
            raise CheckpointError(f"checkpoint object {name} is missing") from exc
        except (OSError, obstore.exceptions.BaseError) as exc:
            raise CheckpointError(f"checkpoint read of {name} failed: {exc}") from exc

