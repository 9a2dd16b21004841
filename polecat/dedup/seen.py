"""The seen-URL set: a Bloom filter in front of a ground-truth table of URL fingerprints (the frontier's
``seen`` table: sorted runs beside its LMDB, polecat/frontier/seenlog.py).

Invariant: the Bloom filter contains every fingerprint committed to the table (it may contain more:
keys of aborted transactions, and of decisions whose writes were never applied). So a Bloom "new" answer
is final and needs no lookup; only a Bloom "seen" answer costs a table lookup, and a miss there is a
Bloom false positive.

The set decides and its caller writes (polecat/writes.py): :meth:`SeenSet.mark` answers whether
a fingerprint is new and the frontier puts each new one in the table among its decision's writes. The
caller owns the table and its write transaction (the frontier commits in batches), so the lookups go
through the caller's ``stored`` (the table's get in the open transaction); a fingerprint marked but not
yet written reads as a false positive that is new, so a caller never marks one twice before its writes
are applied.

Persistence keeps the invariant across crashes: the filter is saved with the caller's commit counter as
its tag right after a commit; on restart, a file whose tag is the current counter is the filter; one of an
earlier commit (work was committed after the save: a kill -9 between two saves) is brought up to date with
the keys committed since, where the table can tell them (polecat/frontier/seenlog.py rule 7), else
discarded with one of a later commit or none (the save never finished), and the filter rebuilt from the
table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from polecat.dedup.bloom import ScalableBloom
from polecat.errors import CorruptBloom

_REBUILD_BATCH = 65_536

Stored = Callable[[bytes], bytes | None]
"""A fingerprint's value in the ground-truth table (empty), None if absent."""


@dataclass(frozen=True, slots=True)
class SeenStats:
    urls: int
    """Fingerprints in the table (counted at restore, plus those added since)."""
    bloom_false_positives: int
    """Bloom said "seen", the table said no."""
    lookups_saved: int
    """Bloom said "new": the table was written without a lookup."""
    observed_fp_rate: float
    """``bloom_false_positives`` over all new fingerprints since restore."""
    memory_bytes: int
    """Bloom filter bit arrays."""


class SeenSet:
    """Answers "was this URL fingerprint seen before?" and records it (see the module docstring)."""

    __slots__ = ("_bloom", "_false_positives", "_saved", "_urls")

    def __init__(self, bloom: ScalableBloom, urls: int = 0) -> None:
        """``bloom`` must already contain every key of the ground-truth table (URL fingerprints,
        slice-prefixed by the frontier; values empty) and ``urls`` is their count. Use :meth:`restore`
        to get both right from an LMDB table."""
        self._bloom, self._urls = bloom, urls
        self._false_positives = self._saved = 0

    def mark(self, stored: Stored, fp: bytes) -> bool:
        """Add ``fp`` to the filter; True if it was not seen before (the caller writes it to the table).
        ``stored``: the table's lookup in the caller's open transaction."""
        maybe_seen = self._bloom.add(fp)
        fresh = not maybe_seen or stored(fp) is None  # a Bloom "new" needs no lookup
        self._count(not maybe_seen, fresh)
        return fresh

    def mark_many(self, stored: Stored, fps: Sequence[bytes]) -> list[bool]:
        """``[mark(stored, fp) for fp in fps]`` with one vectorized Bloom pass; ``fps`` must be distinct."""
        maybe = self._bloom.add_many(fps)
        fresh = [not seen or stored(fp) is None for fp, seen in zip(fps, maybe, strict=True)]
        self._count(maybe.count(False), fresh.count(True))  # once for the batch: no frame a URL
        return fresh

    def _count(self, saved: int, marked: int) -> None:
        """``marked`` keys new, ``saved`` of them answered by the filter alone (the rest were its false
        positives, found absent from the table)."""
        self._saved += saved
        self._false_positives += marked - saved
        self._urls += marked

    def snapshot(self) -> ScalableBloom:
        """A copy of the filter as it is now, to :meth:`ScalableBloom.save` from another thread (a copy
        taken after a commit holds every key that commit holds: the invariant's side of a snapshot)."""
        return self._bloom.copy()

    def save(self, bloom_path: Path, tag: int) -> None:
        """Persist the filter atomically; ``tag`` is the caller's commit counter of the state it covers."""
        self._bloom.save(bloom_path, tag)

    @classmethod
    def restore(cls, keys: Callable[[], Iterable[bytes]], entries: int, bloom_path: Path, tag: int,
                capacity: int, fp_rate: float,
                keys_after: Callable[[int], Iterable[bytes]] | None = None) -> SeenSet:
        """The seen-set over a table of ``entries`` fingerprints, which ``keys()`` reads, at commit ``tag``:
        the saved filter if its tag is ``tag``; the saved filter of an earlier commit with the keys
        ``keys_after(its tag)`` answers (those committed since, and maybe more) added; else one rebuilt
        from the table (:meth:`rebuild`). A loaded filter keeps the sizing it was saved with (changing the
        configuration takes effect on the next rebuild)."""
        try:
            bloom, saved_tag = ScalableBloom.load(bloom_path)
        except (OSError, CorruptBloom):
            saved_tag = None
        if saved_tag == tag:
            return cls(bloom, urls=entries)
        if saved_tag is None or saved_tag > tag or keys_after is None:
            return cls.rebuild(keys(), entries, capacity, fp_rate)
        _add_batched(bloom, keys_after(saved_tag))
        return cls(bloom, urls=entries)

    @classmethod
    def rebuild(cls, keys: Iterable[bytes], entries: int, capacity: int, fp_rate: float) -> SeenSet:
        """The seen-set over a table of ``entries`` fingerprints, ``keys``, with a filter rebuilt from
        them, sized for ``max(capacity, entries)`` at ``fp_rate``."""
        bloom = ScalableBloom(max(capacity, entries), fp_rate)
        _add_batched(bloom, keys)
        return cls(bloom, urls=entries)

    def stats(self) -> SeenStats:
        new = self._false_positives + self._saved
        return SeenStats(
            urls=self._urls,
            bloom_false_positives=self._false_positives,
            lookups_saved=self._saved,
            observed_fp_rate=self._false_positives / new if new else 0.0,
            memory_bytes=self._bloom.memory_bytes,
        )


def _add_batched(bloom: ScalableBloom, keys: Iterable[bytes]) -> None:
    """Add ``keys`` to ``bloom``, :data:`_REBUILD_BATCH` at a time."""
    batch: list[bytes] = []
    for key in keys:
        batch.append(key)
        if len(batch) == _REBUILD_BATCH:
            bloom.add_many(batch)
            batch.clear()
    bloom.add_many(batch)
