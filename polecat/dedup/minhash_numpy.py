"""The numpy specification of :func:`polecat.dedup.minhash.fingerprint` (the algorithm is in that module's
docstring), and the fallback where the native kernel is not built. Only that fallback and the tests load
this module, and with it numpy."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from xxhash import xxh3_64_intdigest

from polecat.dedup.minhash import _BINS, _ONE_THRESHOLD, VERIFY_BINS, VERIFY_BYTES

U64Array = npt.NDArray[np.uint64]

_BIN_SHIFT = np.uint64(64 - 6)
_LOW_MASK = np.uint64((1 << 58) - 1)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_EMPTY = np.iinfo(np.uint64).max
_ONE_THRESHOLD_U64 = np.uint64(_ONE_THRESHOLD)
_BIN_IDS = np.arange(_BINS, dtype=np.uint64)

_WORD_BYTE = bytes(int(48 <= b <= 57 or 97 <= b <= 122 or b >= 0x80) for b in range(256))
"""``bytes.translate`` table: 1 for a byte of a word (ASCII lowercase letter or digit, non-ASCII), else 0."""
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
_PAD = bytes(8)

_VERIFY_SHIFT = np.uint64(64 - 9)
_VERIFY_IDS = np.arange(VERIFY_BINS, dtype=np.uint64)
_VERIFY_SEED = np.uint64(0x243F6A8885A308D3)


def _mix(x: U64Array) -> U64Array:
    """splitmix64's finalizer: a bijection of uint64 whose output bits all depend on every input bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _word_hashes(text: str) -> U64Array:
    """One 64-bit hash per word, in text order (step 1 of the module docstring)."""
    data = text.lower().encode("utf-8", "surrogatepass")
    word = np.frombuffer(b"\0" + data.translate(_WORD_BYTE) + b"\0", dtype=np.bool_)
    edges = np.flatnonzero(word[1:] != word[:-1])  # start, end, start, end...: the runs of word bytes
    starts, ends = edges[0::2], edges[1::2]
    lengths = ends - starts
    # Every byte offset read as a little-endian uint64 (an unaligned view, no copy): heads and tails.
    at = np.ndarray((len(data),), dtype="<u8", buffer=data + _PAD, strides=(1,))
    short = np.minimum(lengths, 8)
    mask = _MASKS.take(short)
    head = at.take(starts) & mask
    tail = at.take(ends - short) & mask
    hashes = _mix((head * _GOLDEN + tail) ^ lengths.astype(np.uint64))
    long = np.flatnonzero(lengths > 16)
    if len(long):
        spans = zip(starts[long].tolist(), ends[long].tolist(), strict=True)
        hashes[long] = [xxh3_64_intdigest(data[s:e]) for s, e in spans]
    return hashes


def _densify(mins: U64Array, filled: npt.NDArray[np.intp], ids: U64Array) -> U64Array:
    """Fill each empty bin from the next non-empty one, mixed with its own index ("rotation")."""
    donor = filled[np.searchsorted(filled, np.arange(len(mins))) % len(filled)]
    return np.where(mins == _EMPTY, _mix(mins[donor] ^ ids * _GOLDEN), mins)


def _bin_minima(features: U64Array, shift: np.uint64, ids: U64Array) -> U64Array:
    """Per bin (a feature's bits from ``shift`` up) the minimum of its features' low 58 bits, densified."""
    mins = np.full(len(ids), _EMPTY, dtype=np.uint64)
    np.minimum.at(mins, (features >> shift).astype(np.intp), features & _LOW_MASK)
    filled = np.flatnonzero(mins != _EMPTY)
    if len(filled) < len(ids):
        mins = _densify(mins, filled, ids)
    return mins


def _index_bits(words: U64Array) -> int:
    if not len(words):
        return 0
    # Word hashes are already uniform 64-bit values: they are the features themselves.
    bits = (_mix(_bin_minima(words, _BIN_SHIFT, _BIN_IDS) ^ _BIN_IDS) < _ONE_THRESHOLD_U64).astype(np.uint8)
    return int(np.packbits(bits, bitorder="little").view("<u8")[0])


def _verify_sketch(words: U64Array) -> bytes:
    """2-bit MinHash of the word-bigram set (a lone word stands for itself), packed 4 bins a byte."""
    if not len(words):
        return bytes(VERIFY_BYTES)
    pairs = words[:-1] * _M1 + words[1:] if len(words) > 1 else words
    mins = _bin_minima(_mix(pairs ^ _VERIFY_SEED), _VERIFY_SHIFT, _VERIFY_IDS)
    values = (_mix(mins ^ _VERIFY_IDS) >> np.uint64(62)).astype(np.uint8).reshape(-1, 4)
    packed = values[:, 0] | values[:, 1] << 2 | values[:, 2] << 4 | values[:, 3] << 6
    return packed.tobytes()


def sketches(text: str) -> tuple[int, bytes]:
    """The ``index`` and ``verify`` parts of the fingerprint of ``text``."""
    words = _word_hashes(text)
    return _index_bits(words), _verify_sketch(words)
