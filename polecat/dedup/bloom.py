"""A scalable Bloom filter: bitarray layers, mmh3 double hashing, atomic persistence.

Sizing: a layer for ``n`` keys at false-positive rate ``p`` has ``m = ceil(-n ln p / ln² 2)`` bits (rounded
up to whole 64-bit words) and ``k = round(m / n · ln 2)`` probes (9.6 bits and 7 probes per key at 1 %).

Growth: layer ``i`` holds ``capacity · growth**i`` keys at rate ``fp_rate · tightening**i``. Layer 0 is sized
exactly for the configured capacity and rate, so a correctly sized filter costs the optimal 1.2 bytes per
key at 1 %; past it, each new layer is twice as large and a little tighter, so the filter never
saturates and the overall rate stays below ``fp_rate / (1 - tightening)`` (6.7 x at 0.85) however far the
crawl overshoots, approaching that bound only slowly (about 2.6 x at 10 x the capacity).

Probes: one 128-bit MurmurHash3 per key gives ``h1, h2``; probe ``i`` is
``((h1 + i·(h2 | 1)) mod 2**64) mod m`` (Kirsch-Mitzenmacher). The single-key and the batched paths
compute the same positions, the batched one with numpy over a little-endian view of the bitarray buffer.
The native kernel (polecat/dedup/_bloom.c) probes and sets a batch of any size the batched path's way. Without
it, a batch of at most :data:`SMALL_BATCH` keys takes the per-key path with the batch's semantics and a
larger one numpy (imported when it first comes). Either way a crawl with the kernels built does not load
numpy (~30 ms of CPU and ~11 MB at start, benchmarks/README.md "Issue 17, fifth pass").

File format (little-endian): header ``_HEADER`` then per layer ``_LAYER`` followed by its ``m / 8`` bytes,
then an xxh3-64 checksum of everything before it. Saving writes a temporary file, fsyncs it, renames it
over the target and fsyncs the directory, so a crash leaves either the old or the new file.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Self, cast

import mmh3
import xxhash
from bitarray import bitarray

from polecat import native
from polecat.errors import CorruptBloom
from polecat.faults import storage_fault

_MASK64 = (1 << 64) - 1
_MAGIC = b"PCBLOOM1"
_HEADER = struct.Struct("<8sQQddQI")  # magic, tag, capacity, fp_rate, tightening, growth, layers
_LAYER = struct.Struct("<QQQI")  # capacity, count, m (bits), k
_CHECKSUM = struct.Struct("<Q")

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    U64Array = npt.NDArray[np.uint64]
    BoolArray = npt.NDArray[np.bool_]

SMALL_BATCH = 1024
"""Without the kernel, batches up to this size are probed key by key: ~2 us a key in Python, against
numpy's ~25-45 us a call plus its import (benchmarks/README.md "Issue 17, fifth pass"). A whole crawl of the
comparison web sends ~10,000 keys in 750 batches (1-24 keys most): ~20 ms key by key, ~50 ms with numpy's
import."""
_kernel = native.load("polecat.dedup._bloom")


def _hash_pair(key: bytes) -> tuple[int, int]:
    h1, h2 = mmh3.mmh3_x64_128_utupledigest(key, 0)
    return h1, h2 | 1


def _hash_pairs(keys: Sequence[bytes]) -> tuple[U64Array, U64Array]:
    """The batched twin of :func:`_hash_pair`: the digest bytes are the two words, little-endian."""
    import numpy as np

    words = np.frombuffer(b"".join(map(mmh3.mmh3_x64_128_digest, keys)), dtype="<u8").reshape(-1, 2)
    return words[:, 0], words[:, 1] | np.uint64(1)


class _Layer:
    """One classic Bloom filter: ``m`` bits, ``k`` probes, room for ``capacity`` keys."""

    __slots__ = ("bits", "capacity", "count", "k", "m")

    def __init__(self, capacity: int, fp_rate: float, count: int = 0, m: int = 0, k: int = 0) -> None:
        if not m:
            m = -(-math.ceil(-capacity * math.log(fp_rate) / math.log(2) ** 2) // 64) * 64
            k = max(1, round(m / capacity * math.log(2)))
        self.capacity, self.count, self.m, self.k = capacity, count, m, k
        self.bits = bitarray(m, endian="little")
        self.bits.setall(0)

    def copy(self) -> _Layer:
        out = _Layer.__new__(_Layer)
        out.capacity, out.count, out.m, out.k = self.capacity, self.count, self.m, self.k
        out.bits = self.bits.copy()
        return out

    def contains(self, h1: int, h2: int) -> bool:
        bits, m = self.bits, self.m
        for i in range(self.k):  # noqa: SIM110 (a plain loop beats all() over a generator here)
            if not bits[((h1 + i * h2) & _MASK64) % m]:
                return False
        return True

    def set(self, h1: int, h2: int) -> None:
        bits, m = self.bits, self.m
        for i in range(self.k):
            bits[((h1 + i * h2) & _MASK64) % m] = 1
        self.count += 1

    def _positions(self, h1: U64Array, h2: U64Array) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.uint8]]:
        import numpy as np

        steps = np.arange(self.k, dtype=np.uint64)
        pos = (h1[:, None] + steps[None, :] * h2[:, None]) % np.uint64(self.m)
        return (pos >> np.uint64(3)).astype(np.intp), np.left_shift(1, pos & np.uint64(7)).astype(np.uint8)

    def _view(self) -> npt.NDArray[np.uint8]:
        import numpy as np

        return np.frombuffer(memoryview(self.bits), dtype=np.uint8)

    def contains_many(self, h1: U64Array, h2: U64Array) -> BoolArray:
        import numpy as np

        byte, mask = self._positions(h1, h2)
        return cast("BoolArray", (self._view()[byte] & mask).astype(np.bool_).all(axis=1))

    def set_many(self, h1: U64Array, h2: U64Array) -> None:
        import numpy as np

        byte, mask = self._positions(h1, h2)
        np.bitwise_or.at(self._view(), byte.ravel(), mask.ravel())
        self.count += len(h1)


class ScalableBloom:
    """A Bloom filter that grows by layers; ``add`` answers "possibly seen before" (see module docstring)."""

    __slots__ = ("_capacity", "_fp_rate", "_growth", "_layers", "_tightening")

    def __init__(self, capacity: int, fp_rate: float, *, growth: int = 2, tightening: float = 0.85) -> None:
        if capacity < 1 or not 0 < fp_rate < 1 or growth < 1 or not 0 < tightening <= 1:
            raise ValueError(f"bad Bloom parameters {capacity=} {fp_rate=} {growth=} {tightening=}")
        self._capacity, self._fp_rate, self._growth, self._tightening = capacity, fp_rate, growth, tightening
        self._layers: list[_Layer] = [_Layer(capacity, fp_rate)]

    def copy(self) -> ScalableBloom:
        """An independent copy: a snapshot another thread may save while this filter keeps growing."""
        out = ScalableBloom.__new__(ScalableBloom)
        out._capacity, out._fp_rate, out._growth, out._tightening = (
            self._capacity, self._fp_rate, self._growth, self._tightening)
        out._layers = [layer.copy() for layer in self._layers]
        return out

    def _grow(self) -> _Layer:
        i = len(self._layers)
        layer = _Layer(self._capacity * self._growth**i, self._fp_rate * self._tightening**i)
        self._layers.append(layer)
        return layer

    def __contains__(self, key: bytes) -> bool:
        h1, h2 = _hash_pair(key)
        return any(layer.contains(h1, h2) for layer in self._layers)

    def add(self, key: bytes) -> bool:
        """Insert ``key``; True if it was possibly present already (then nothing changes)."""
        h1, h2 = _hash_pair(key)
        layers = self._layers
        for layer in layers:
            if layer.contains(h1, h2):
                return True
        last = layers[-1]
        if last.count >= last.capacity:
            last = self._grow()
        last.set(h1, h2)
        return False

    def add_many(self, keys: Sequence[bytes]) -> list[bool]:
        """``[add(k) for k in keys]``, vectorized. A key repeated within the batch is reported present
        from its second occurrence on; two different keys of one batch never make each other a false
        positive (the sequential loop might), which only lowers the false-positive rate."""
        if not keys:
            return []
        if _kernel is not None:
            try:
                return self._add_native(keys)
            except TypeError:  # a key that is not bytes (a bytearray): the other paths take what mmh3 does
                pass
        return self._add_few(keys) if len(keys) <= SMALL_BATCH else self._add_vectorized(keys)

    def _add_native(self, keys: Sequence[bytes]) -> list[bool]:
        """:meth:`add_many` by the kernel: probes against the filter before the batch, then the new keys
        set layer by layer (:meth:`_place`)."""
        assert _kernel is not None
        kernel = _kernel
        present, pairs = kernel.probe(keys, [(layer.bits, layer.m, layer.k) for layer in self._layers])

        def set_in(layer: _Layer, take: list[int]) -> None:
            kernel.set_bits((layer.bits, layer.m, layer.k), pairs, take)
            layer.count += len(take)

        self._place([i for i, seen in enumerate(present) if not seen], set_in)
        result: list[bool] = present
        return result

    def _add_vectorized(self, keys: Sequence[bytes]) -> list[bool]:
        """:meth:`add_many` in numpy (loaded on the first call)."""
        import numpy as np

        h1, h2 = _hash_pairs(keys)
        present = np.zeros(len(keys), dtype=np.bool_)
        for layer in self._layers:
            present |= layer.contains_many(h1, h2)
        _, first = np.unique(h1, return_index=True)
        repeated = np.ones(len(keys), dtype=np.bool_)
        repeated[first] = False
        present |= repeated
        self._place(np.flatnonzero(~present).tolist(), lambda layer, take: layer.set_many(h1[take], h2[take]))
        result: list[bool] = present.tolist()
        return result

    def _add_few(self, keys: Sequence[bytes]) -> list[bool]:
        """:meth:`add_many` key by key: every key is probed against the filter as it was before the
        batch, a repeat of an earlier key's ``h1`` counts as present, then the new keys are set in order
        (:meth:`_place`)."""
        layers = self._layers
        pairs = [_hash_pair(key) for key in keys]
        present = [any(layer.contains(h1, h2) for layer in layers) for h1, h2 in pairs]
        firsts: set[int] = set()
        for i, (h1, _) in enumerate(pairs):
            if h1 in firsts:
                present[i] = True
            else:
                firsts.add(h1)

        def set_in(layer: _Layer, take: list[int]) -> None:
            for i in take:
                layer.set(*pairs[i])

        self._place([i for i, seen in enumerate(present) if not seen], set_in)
        return present

    def _place(self, new: list[int], set_in: Callable[[_Layer, list[int]], None]) -> None:
        """The growth rule of every path: a batch's new keys (their indices, in batch order) fill the
        newest layer up to its capacity, then a new layer; ``set_in(layer, indices)`` sets and counts
        them."""
        while new:
            last = self._layers[-1]
            if last.count >= last.capacity:
                last = self._grow()
            room = last.capacity - last.count
            take, new = new[:room], new[room:]
            set_in(last, take)

    def __len__(self) -> int:
        """Keys inserted (a key reported present is not counted again)."""
        return sum(layer.count for layer in self._layers)

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the bit arrays (the object overhead is a few hundred bytes on top)."""
        return sum(layer.m // 8 for layer in self._layers)

    @property
    def layers(self) -> int:
        return len(self._layers)

    def save(self, path: Path, tag: int) -> None:
        """Write atomically to ``path`` with ``tag`` (the caller's commit counter) in the header.

        A write that fails (disk full) removes its partial temporary file and raises StorageFault."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            self._write(tmp, tag)
            os.replace(tmp, path)
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise storage_fault(exc, "seen-set snapshot", path) from exc

    def _write(self, tmp: Path, tag: int) -> None:
        digest = xxhash.xxh3_64()
        with open(tmp, "wb") as f:

            def write(data: bytes | memoryview) -> None:
                f.write(data)
                digest.update(data)

            write(_HEADER.pack(_MAGIC, tag, self._capacity, self._fp_rate, self._tightening,
                               self._growth, len(self._layers)))  # fmt: skip
            for layer in self._layers:
                write(_LAYER.pack(layer.capacity, layer.count, layer.m, layer.k))
                write(memoryview(layer.bits))
            f.write(_CHECKSUM.pack(digest.intdigest()))
            f.flush()
            os.fsync(f.fileno())

    @classmethod
    def load(cls, path: Path) -> tuple[Self, int]:
        """Read a file written by :meth:`save`; returns the filter and its tag.

        Raises :class:`CorruptBloom` if the file is truncated, of another format, or fails its checksum,
        and ``OSError`` if it cannot be read.
        """
        digest = xxhash.xxh3_64()
        with open(path, "rb") as f:

            def read(n: int) -> bytes:
                data = f.read(n)
                if len(data) != n:
                    raise CorruptBloom(f"{path}: truncated")
                digest.update(data)
                return data

            magic, tag, capacity, fp_rate, tightening, growth, n_layers = _HEADER.unpack(read(_HEADER.size))
            if magic != _MAGIC:
                raise CorruptBloom(f"{path}: not a polecat Bloom file")
            self = cls.__new__(cls)
            self._capacity, self._fp_rate, self._growth = capacity, fp_rate, growth
            self._tightening, self._layers = tightening, []
            for _ in range(n_layers):
                layer_capacity, count, m, k = _LAYER.unpack(read(_LAYER.size))
                if m % 64 or not 0 < k < 64 or m > 1 << 46:
                    raise CorruptBloom(f"{path}: bad layer header")
                layer = _Layer(layer_capacity, fp_rate, count=count, m=m, k=k)
                if f.readinto(memoryview(layer.bits)) != m // 8:
                    raise CorruptBloom(f"{path}: truncated")
                digest.update(memoryview(layer.bits))
                self._layers.append(layer)
            if f.read() != _CHECKSUM.pack(digest.intdigest()) or not self._layers:
                raise CorruptBloom(f"{path}: checksum mismatch")
        return self, tag
