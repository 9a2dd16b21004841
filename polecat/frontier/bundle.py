"""SliceBundle: the byte format that carries whole slices from one frontier to another.

Layout (version 1), readable without the data dir it came from:

- ``PCSB``, then a u32 length and a JSON header: ``version``, ``slices`` (S of the crawl), ``ids`` (the
  slices carried), ``tables`` (the names the records' table numbers index), ``created`` (wall seconds),
  and, in a bundle handed over in a cluster, ``fence``: ``{"node", "lease", "revision"}``, the sender's
  fencing token (:class:`Fence`). ``fence`` came later in version 1: a bundle without it (written
  before, or a checkpoint) reads with ``fence`` None, and a reader from before ignores it, so the
  version did not change (tests/fixtures/bundle_unfenced.pcsb is one written before it).
- Frames: a u32 length, then one zstd frame (with zstd's own content checksum) holding records
  ``u8 table | u16 key length | u32 value length | key | value``, about :data:`FRAME_BYTES` each.
- End: a u32 zero, a u64 record count and the xxh3-64 of the header and every frame's uncompressed
  payload, in order.

Reading verifies everything (magic, version, S, every frame's checksum, the count and the digest) before
a single record is handed out, so a truncated or corrupted bundle is refused whole: adopting never
stops half-way because of the bytes.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import xxhash
import zstandard

from polecat.errors import FrontierError
from polecat.frontier.slices import SLICES

MAGIC = b"PCSB"
VERSION = 1
FRAME_BYTES = 1 << 20
_LEN = struct.Struct(">I")
_REC = struct.Struct(">BHI")
_END = struct.Struct(">QQ")
MAX_FRAME = 64 << 20
"""Largest compressed frame a reader accepts (a corrupt length must not allocate gigabytes)."""


@dataclass(frozen=True, slots=True)
class Fence:
    """Who sent a bundle, under which registration in the cluster: the node, its etcd lease and the etcd
    revision its member record was written at (ownership rule 9 of polecat/cluster/ownership.py)."""

    node: str
    lease: int
    revision: int


class BundleError(FrontierError):
    """A slice bundle is truncated, corrupted, of another version or of another slice count."""


@dataclass(frozen=True, slots=True)
class SliceBundle:
    """Verified, compressed slices; iterate :meth:`records` to read them."""

    ids: frozenset[int]
    tables: tuple[str, ...]
    created: float
    frames: tuple[bytes, ...]
    records_count: int
    header: bytes
    fence: Fence | None = None
    """The sender's fencing token (None: a bundle written before tokens, or not handed over)."""

    def records(self) -> Iterator[tuple[str, bytes, bytes]]:
        """``(table, key, value)`` in the order they were exported."""
        dctx = zstandard.ZstdDecompressor()
        tables = self.tables
        for frame in self.frames:
            payload = dctx.decompress(frame)
            pos, end = 0, len(payload)
            while pos < end:
                t, klen, vlen = _REC.unpack_from(payload, pos)
                pos += _REC.size
                key = payload[pos : pos + klen]
                pos += klen
                yield tables[t], key, payload[pos : pos + vlen]
                pos += vlen

    @property
    def size(self) -> int:
        """Bytes of the serialized bundle."""
        return 4 + _LEN.size + len(self.header) + sum(_LEN.size + len(f) for f in self.frames) + \
            _LEN.size + _END.size

    def write(self, out: BinaryIO) -> int:
        """Write the bundle to ``out``; returns the bytes written."""
        out.write(MAGIC + _LEN.pack(len(self.header)) + self.header)
        digest = xxhash.xxh3_64(self.header)
        dctx = zstandard.ZstdDecompressor()
        for frame in self.frames:
            out.write(_LEN.pack(len(frame)))
            out.write(frame)
            digest.update(dctx.decompress(frame))
        out.write(_LEN.pack(0) + _END.pack(self.records_count, digest.intdigest()))
        return self.size

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        self.write(buf)
        return buf.getvalue()

    @classmethod
    def read(cls, src: BinaryIO) -> SliceBundle:
        """Read and verify a bundle from ``src`` (see the module docstring); BundleError if it is bad."""
        if _read_exact(src, 4) != MAGIC:
            raise BundleError("not a slice bundle (bad magic)")
        header = _read_exact(src, _LEN.unpack(_read_exact(src, _LEN.size))[0])
        try:
            info = json.loads(header)
            version, slices = info["version"], info["slices"]
            ids, tables, created = frozenset(info["ids"]), tuple(info["tables"]), float(info["created"])
            raw = info.get("fence")
            fence = None if raw is None else Fence(str(raw["node"]), int(raw["lease"]), int(raw["revision"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BundleError(f"slice bundle header unreadable: {exc}") from exc
        if version != VERSION:
            raise BundleError(f"slice bundle version {version}, this polecat reads {VERSION}")
        if slices != SLICES:
            raise BundleError(f"slice bundle made with {slices} slices, this crawl uses {SLICES}")
        digest = xxhash.xxh3_64(header)
        dctx = zstandard.ZstdDecompressor()
        frames: list[bytes] = []
        count = 0
        while (n := _LEN.unpack(_read_exact(src, _LEN.size))[0]) != 0:
            if n > MAX_FRAME:
                raise BundleError(f"slice bundle frame of {n} bytes (corrupt length)")
            frame = _read_exact(src, n)
            try:
                payload = dctx.decompress(frame)
            except zstandard.ZstdError as exc:
                raise BundleError(f"slice bundle frame {len(frames)} corrupt: {exc}") from exc
            digest.update(payload)
            count += _count_records(payload, len(tables))
            frames.append(frame)
        want_count, want_digest = _END.unpack(_read_exact(src, _END.size))
        if (count, digest.intdigest()) != (want_count, want_digest):
            raise BundleError("slice bundle checksum or record count mismatch")
        return cls(ids, tables, created, tuple(frames), count, header, fence)


def _read_exact(src: BinaryIO, n: int) -> bytes:
    data = src.read(n)
    if len(data) != n:
        raise BundleError("slice bundle truncated")
    return data


def _count_records(payload: bytes, tables: int) -> int:
    pos, end, n = 0, len(payload), 0
    while pos < end:
        if pos + _REC.size > end:
            raise BundleError("slice bundle record cut")
        t, klen, vlen = _REC.unpack_from(payload, pos)
        pos += _REC.size + klen + vlen
        if t >= tables or pos > end:
            raise BundleError("slice bundle record cut or of an unknown table")
        n += 1
    return n


class BundleWriter:
    """Builds a :class:`SliceBundle` record by record, compressing a frame every :data:`FRAME_BYTES`.
    ``created``: the header's wall-clock stamp, given by the caller (nothing here reads a clock);
    ``fence``: the sender's fencing token, for a bundle handed over in a cluster."""

    def __init__(self, ids: frozenset[int], tables: tuple[str, ...], *, level: int = 3,
                 created: float, fence: Fence | None = None) -> None:
        self._ids = ids
        self._tables = {name: i for i, name in enumerate(tables)}
        self._created = created
        self._fence = fence
        info: dict[str, object] = {"version": VERSION, "slices": SLICES, "ids": sorted(ids),
                                   "tables": list(tables), "created": self._created}
        if fence is not None:
            info["fence"] = {"node": fence.node, "lease": fence.lease, "revision": fence.revision}
        self._header = json.dumps(info).encode()
        self._cctx = zstandard.ZstdCompressor(level=level, write_checksum=True)
        self._buf = bytearray()
        self._frames: list[bytes] = []
        self._count = 0
        self._names = tables

    def add(self, table: str, key: bytes, value: bytes) -> None:
        self._buf += _REC.pack(self._tables[table], len(key), len(value))
        self._buf += key
        self._buf += value
        self._count += 1
        if len(self._buf) >= FRAME_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            self._frames.append(self._cctx.compress(bytes(self._buf)))
            self._buf.clear()

    def finish(self) -> SliceBundle:
        self._flush()
        return SliceBundle(self._ids, self._names, self._created, tuple(self._frames), self._count,
                           self._header, self._fence)
