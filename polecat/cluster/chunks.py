"""Slices handed over in bounded chunks instead of one bundle per new owner.

Rules:
1. A hand-over of many slices is a sequence of chunks, each a complete :class:`SliceBundle` of whole
   slices (never part of one), of at most :data:`CHUNK_SLICES` slices and, when it holds more than
   one slice, at most ``max_bytes`` bytes: a chunk over the bound is split in halves until it fits.
   So memory on both sides is bounded by ``max_bytes`` or by the largest single slice (a slice is
   1/4096 of the hosts), not by the whole share that moves. The first chunk is one slice, and each
   after it starts at the slices that the last one's bytes a slice say fit: an export costs ~12 us a URL
   (in steps on a node's loop: polecat/frontier/handover.py rule 8), and at 50M URLs a chunk of 4 MB holds
   ~6 slices, so starting each chunk at 64 slices and halving would export ~20 times what is sent (64
   slices, ~9 s, for the first try alone). A small frontier's hand-over pays one chunk more (its first)
   for that bound.
2. Chunks are exported one at a time, when the previous one is acknowledged: only one chunk exists at
   a time on the sender.
3. Each chunk carries its own checksums (the bundle format) and its own signature (the request's), and
   the new owner adopts and commits it whole before acknowledging; the sender then releases exactly
   that chunk's slices (in steps of bounded rows: polecat/frontier/handover.py rule 7). A transfer cut
   anywhere leaves every slice whole on one side: the slices of acknowledged chunks moved, the others are
   still the sender's and go again at the next attempt. A chunk adopted whose acknowledgement was lost is
   adopted again: adoption merges, and a queued URL the adopter has already seen is not queued twice, so
   a repeat duplicates nothing.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable

CHUNK_SLICES = 64
"""Most slices in one chunk."""
CHUNK_BYTES = 4 << 20
"""Default bound on a chunk's bytes (rule 1)."""

Exporter = Callable[[frozenset[int]], Awaitable[bytes]]
"""The bundle bytes of some slices, made now (a node's: in steps, polecat/frontier/handover.py rule 8)."""


async def bundle_chunks(export: Exporter, slices: Iterable[int], *, max_bytes: int = CHUNK_BYTES,
                        max_slices: int = CHUNK_SLICES) -> AsyncGenerator[tuple[frozenset[int], bytes], None]:
    """``(slices, bundle bytes)`` chunks covering ``slices`` in ascending order (rules 1 and 2), each
    made by ``export``. Each is exported when the caller asks for it, so release a chunk's slices before
    taking the next."""
    todo = sorted(set(slices))
    size = 1  # rule 1: the first chunk's bytes size the next
    while todo:
        group = todo[:size]
        body = await export(frozenset(group))
        while len(body) > max_bytes and len(group) > 1:
            group = group[: len(group) // 2]
            body = await export(frozenset(group))
        yield frozenset(group), body
        todo = todo[len(group) :]
        size = max(1, min(max_slices, max_bytes * len(group) // max(1, len(body))))  # rule 1's start
