"""Near-duplicate bodies stored as deltas: every page's own bytes come back, at a fraction of the space.

Rules (this module owns the format; polecat/store/segstore.py writes and reads it):

1. A near-duplicate's body is kept, compressed against the stored body it resembles (its *base*): zstd
   with the base as a raw-content dictionary (what ``zstd --patch-from`` does), so what the two pages
   share costs a few bytes. Its address is its own content hash, like any body.
2. The delta is a zstd *skippable frame* written right after the near-duplicate's ``revisit`` record in
   the same segment. ``zstd -dc`` and every reader that takes a segment as WARC skip such frames, so the
   segments stay plain WARC; polecat's readers find the frame through the body index.
3. The frame: the skippable magic :data:`MAGIC` (little-endian 0x184D2A5D), its payload length (u32,
   little-endian), then the payload: :data:`TAG` (format 1), the base's content hash (32 bytes) and one
   zstd frame (with its checksum) of the body.
4. A base is always a body stored whole, never another delta: reading a delta costs one more read.
5. A delta whose base cannot be read is as lost as a damaged body (``store verify`` reports it,
   ``store repair`` drops it and queues its URL again).
"""

from __future__ import annotations

import struct

import zstandard

from polecat.errors import CorruptRecord

LEVEL = 9
"""zstd's level for deltas. Below 8 its fast strategies barely use a raw-content dictionary: a 26 KB page
with 1 % of its words changed took 4,084 bytes at level 3 against its base, 5,176 alone; level 9 takes
186-1,875 bytes in 92-332 µs of CPU for 26 KB pages with 0.5-2 % of the words changed (levels 12+ halve
that again for 10x the CPU). Reads cost 15-35 µs."""
MAGIC = struct.pack("<I", 0x184D2A5D)
TAG = b"PCDELTA1"
_HEAD = struct.Struct("<4sI8s32s")


def _dictionary(base: bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def encode(base_hash: bytes, base: bytes, body: bytes) -> bytes:
    """The skippable frame that stores ``body`` against ``base`` (rules 1 and 3)."""
    if len(base_hash) != 32:
        raise ValueError("a delta's base is named by a 32-byte content hash")
    cctx = zstandard.ZstdCompressor(level=LEVEL, dict_data=_dictionary(base), write_checksum=True)
    patch = cctx.compress(body)
    return _HEAD.pack(MAGIC, len(TAG) + 32 + len(patch), TAG, base_hash) + patch


def is_delta(frame: bytes) -> bool:
    """Whether a stored frame is a delta (rule 2) rather than a WARC record."""
    return frame[:4] == MAGIC


def base_of(frame: bytes) -> bytes:
    """The content hash of the body ``frame`` was made against."""
    _check(frame)
    return frame[16:48]


def apply(frame: bytes, base: bytes, max_size: int) -> bytes:
    """The body stored in ``frame``, rebuilt over ``base``; CorruptRecord when the frame is damaged."""
    _check(frame)
    try:
        dctx = zstandard.ZstdDecompressor(dict_data=_dictionary(base))
        return dctx.decompress(frame[_HEAD.size:], max_output_size=max_size)
    except zstandard.ZstdError as exc:
        raise CorruptRecord(f"bad delta frame: {exc}") from exc


def _check(frame: bytes) -> None:
    if len(frame) < _HEAD.size:
        raise CorruptRecord("delta frame is too short")
    magic, length, tag, _ = _HEAD.unpack_from(frame)
    if magic != MAGIC or tag != TAG or length != len(frame) - 8:
        raise CorruptRecord("not a delta frame of a format this release reads")
