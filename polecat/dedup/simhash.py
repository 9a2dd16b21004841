"""Near-duplicate fingerprints of page text: 64 index bits to find candidates, a sketch to verify them.

Pages whose 64-bit ``index`` parts are within a few bits are candidates (the banded index in
:mod:`polecat.dedup.nearindex` finds them); a candidate is a near-duplicate only when the ``verify``
sketches agree too. The index part is a *one-permutation MinHash with one bit per bin* rather than
Charikar's SimHash, because SimHash cannot meet the bar (see benchmarks/README.md,
"Dedup"): its bits flip with probability ``angle / pi``, which grows like the *square root* of the
change, so 3 % of words changed already flips ~5-9 of 64 bits whatever the shingle size or weighting;
weighting by raw term frequency keeps edits small but makes every pair of English pages look alike
(their vectors are dominated by the same function words). A MinHash bit flips with probability
``2q(1-q) (1 - J)`` (``q``: the rate of 1 bits), linear in the Jaccard distance ``1 - J`` of the two
word sets: about 0.024 per bit for 3 % of words changed, 0.25-0.35 for unrelated pages or pages sharing
only a template.

Algorithm (numpy, no Python loop over words):

1. Words: lowercase, UTF-8, maximal runs of ``[a-z0-9]`` or non-ASCII bytes, each hashed to 64 bits.
2. Features: the *set* of words (1-word shingles, repeats ignored). Longer shingles make one changed word
   change several features, and set semantics make edits of frequent words free; both were measured.
3. One permutation: a 64-bit mix of each feature; its top 6 bits pick one of 64 bins, the minimum of the
   other bits in each bin is that bin's MinHash (equal in two pages with probability about J).
   An empty bin (short texts) borrows the minimum of the next non-empty bin, mixed with its own index
   ("rotation densification"), so a 5-word page still gets 64 independent bits.
4. Bit ``i`` is 1 when a mix of bin ``i``'s value falls below ``_ONE_RATE`` of the 64-bit range.

Those 64 bits only *find* candidates: a per-pair false match rate of ``P(distance <= 3)`` is about 1e-5 for
pages sharing half their words (boilerplate), 1 % for the word sets of unrelated pages drawn from a small
vocabulary, and every new page is compared with every stored one. So a :class:`Fingerprint` also carries
a *verification sketch*, computed from the same word hashes: a one-permutation MinHash of 512 bins over
the set of word *bigrams* (adjacent word pairs), 2 bits a bin (128 bytes). Bigrams tell apart pages that
use the same words in other orders: unrelated 35 KB pages drawn uniformly from 3,000 words have word sets
up to 84 % alike, too close to the ~94 % of a 3 % edit for any sketch of the word set, but share almost
no bigrams. And 2-bit values in 4x the bins of 8-bit ones separate high
similarities best per stored byte (b-bit MinHash). A bin's values differ with probability
``3/4 (1 - J2)`` (``J2``: bigram Jaccard similarity): about 40 of 512 bins for 3 % of words changed,
250+ for pages sharing half a template, 370 for unrelated pages. A candidate is a near-duplicate only when
at most :data:`VERIFY_MAX_DISTANCE` bins differ (benchmarks/README.md, "Dedup").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

U64Array = npt.NDArray[np.uint64]

_BINS = 64
_BIN_SHIFT = np.uint64(64 - 6)
_LOW_MASK = np.uint64((1 << 58) - 1)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_SEED = np.uint64(0x5BD1E9955BD1E995)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_EMPTY = np.iinfo(np.uint64).max
_ONE_RATE = 0.4
"""Probability of a 1 bit. Below 0.5 a changed bin flips its bit less often (``2q(1-q)``): 0.4 buys about
1.5 points of recall at 3 % of words changed, at ~1.8x the index candidates of uniform bits (bands of
biased bits collide more); unrelated pages stay ~18 bits apart (benchmarks/README.md, "Dedup")."""
_ONE_THRESHOLD = np.uint64(int(_ONE_RATE * 2**64))

_WORD_BYTE = np.zeros(256, dtype=np.int8)
_WORD_BYTE[np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", dtype=np.uint8)] = 1
_WORD_BYTE[0x80:] = 1
_R = np.uint64(0x9E3779B97F4A7C15)
_R_INVERSE = np.uint64(pow(0x9E3779B97F4A7C15, -1, 1 << 64))
_BIN_IDS = np.arange(_BINS, dtype=np.uint64)

VERIFY_BINS = 512
VERIFY_BYTES = VERIFY_BINS // 4
"""Length of :attr:`Fingerprint.verify`: 512 bins of 2 bits."""
VERIFY_MAX_DISTANCE = 80
"""Differing verification bins (of 512) still counted a near-duplicate: bigram similarity ``J2 >= 0.79``.
3 % of words changed in a 2,000-word page gives ``J2 ~ 0.89``, 40 bins (sd 6): misses below 1e-8. Pages
sharing a 75 % template sit at ~150 bins (sd 10), half a template at ~240; 90 % shared is a near-duplicate
by any measure of words (~65 bins)."""
_VERIFY_SHIFT = np.uint64(64 - 9)
_VERIFY_IDS = np.arange(VERIFY_BINS, dtype=np.uint64)
_VERIFY_STARTS = _VERIFY_IDS << _VERIFY_SHIFT
_VERIFY_SEED = np.uint64(0x243F6A8885A308D3)
_LOW_BIT_PAIRS = int.from_bytes(b"\x55" * VERIFY_BYTES, "little")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A page's near-duplicate fingerprint: ``index`` finds candidates, ``verify`` confirms them."""

    index: int
    """64-bit one-permutation MinHash bits of the word set (:func:`simhash`), compared by Hamming distance."""
    verify: bytes
    """:data:`VERIFY_BYTES`-byte 2-bit MinHash of the word-bigram set, compared by :func:`verify_distance`."""


def _mix(x: U64Array) -> U64Array:
    """splitmix64's finalizer: a bijection of uint64 whose output bits all depend on every input bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


class _Powers:
    """``R**(i+1)`` and ``R**-(i+1)`` mod 2**64 for ``i < n``, grown by doubling: two cumprods per page
    were a third of the hashing time."""

    def __init__(self) -> None:
        self.forward = self.inverse = np.zeros(0, dtype=np.uint64)

    def upto(self, n: int) -> tuple[U64Array, U64Array]:
        if n > len(self.forward):
            size = max(4096, 1 << (n - 1).bit_length())
            self.forward = cast(U64Array, np.cumprod(np.full(size, _R, dtype=np.uint64)))
            self.inverse = cast(U64Array, np.cumprod(np.full(size, _R_INVERSE, dtype=np.uint64)))
        return self.forward[:n], self.inverse[:n]


_POWERS = _Powers()


def _word_hashes(text: str) -> U64Array:
    """One 64-bit hash per word: a polynomial hash mod 2**64 of its bytes, then mixed.

    All words at once from prefix sums: with ``P[i] = sum(b[j] * R**(j+1) for j < i)`` the word
    ``b[s:e]`` hashes to ``(P[e] - P[s]) * R**-(s+1)`` (``R`` odd, so invertible mod 2**64).
    """
    data = np.frombuffer(text.lower().encode("utf-8", "surrogatepass"), dtype=np.uint8)
    edges = np.diff(_WORD_BYTE.take(data), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    powers, inverse = _POWERS.upto(len(data))
    prefix = np.zeros(len(data) + 1, dtype=np.uint64)
    np.cumsum((data + np.uint64(1)) * powers, out=prefix[1:])
    polynomial = cast(U64Array, (prefix[ends] - prefix[starts]) * inverse[starts])
    return _mix(polynomial ^ (ends - starts).astype(np.uint64))


def _densify(mins: U64Array, filled: npt.NDArray[np.intp], ids: U64Array) -> U64Array:
    """Fill each empty bin from the next non-empty one, mixed with its own index ("rotation")."""
    donor = filled[np.searchsorted(filled, np.arange(len(mins))) % len(filled)]
    return np.where(mins == _EMPTY, _mix(mins[donor] ^ ids * _GOLDEN), mins)


def _index_bits(words: U64Array) -> int:
    h = _mix(words ^ _SEED)
    mins = np.full(_BINS, _EMPTY, dtype=np.uint64)
    np.minimum.at(mins, (h >> _BIN_SHIFT).astype(np.intp), h & _LOW_MASK)
    filled = np.flatnonzero(mins != _EMPTY)
    if not len(filled):
        return 0
    if len(filled) < _BINS:
        mins = _densify(mins, filled, _BIN_IDS)
    bits = (_mix(mins ^ _BIN_IDS) < _ONE_THRESHOLD).astype(np.uint8)
    return int(np.packbits(bits, bitorder="little").view("<u8")[0])


def _verify_sketch(words: U64Array) -> bytes:
    """2-bit MinHash of the word-bigram set (a lone word stands for itself), packed 4 bins a byte."""
    if not len(words):
        return bytes(VERIFY_BYTES)
    pairs = words[:-1] * _M1 + words[1:] if len(words) > 1 else words
    # Sorted, the features group by bin (their top 9 bits) and each group starts with its minimum;
    # repeats need no removal (np.unique would cost 10x the sort).
    features = np.sort(_mix(pairs ^ _VERIFY_SEED))
    first = np.searchsorted(features, _VERIFY_STARTS)
    end = np.append(first[1:], len(features))
    mins = np.where(first < end, features[np.minimum(first, len(features) - 1)] & _LOW_MASK, _EMPTY)
    filled = np.flatnonzero(first < end)
    if len(filled) < VERIFY_BINS:
        mins = _densify(mins, filled, _VERIFY_IDS)
    values = (_mix(mins ^ _VERIFY_IDS) >> np.uint64(62)).astype(np.uint8).reshape(-1, 4)
    packed = values[:, 0] | values[:, 1] << 2 | values[:, 2] << 4 | values[:, 3] << 6
    return packed.tobytes()


def fingerprint(text: str) -> Fingerprint:
    """Both sketches of ``text`` from one pass of word hashing (algorithm in the module docstring).

    Text without words gets index 0 and an all-zero ``verify``: two such texts match each other.
    """
    words = _word_hashes(text)
    return Fingerprint(_index_bits(words), _verify_sketch(words))


def simhash(text: str) -> int:
    """The unsigned 64-bit index part of ``fingerprint(text)``."""
    return _index_bits(_word_hashes(text))


def verify_distance(a: bytes, b: bytes) -> int:
    """Number of the :data:`VERIFY_BINS` bins whose 2-bit values differ between two ``verify`` sketches."""
    x = int.from_bytes(a, "little") ^ int.from_bytes(b, "little")
    return ((x | x >> 1) & _LOW_BIT_PAIRS).bit_count()


def hamming(a: int, b: int) -> int:
    """Number of differing bits of two fingerprints."""
    return (a ^ b).bit_count()
