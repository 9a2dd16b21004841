"""64-bit near-duplicate fingerprints of page text, compared by Hamming distance.

Pages whose fingerprints are within distance 3 are near-duplicates (the banded index in
:mod:`polecat.dedup.nearindex` finds them). The fingerprint is a *one-permutation MinHash with one bit
per bin* rather than Charikar's SimHash, because SimHash cannot meet the bar (see benchmarks/README.md,
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
"""

from __future__ import annotations

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


def _mix(x: U64Array) -> U64Array:
    """splitmix64's finalizer: a bijection of uint64 whose output bits all depend on every input bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _word_hashes(text: str) -> U64Array:
    """One 64-bit hash per word: a polynomial hash mod 2**64 of its bytes, then mixed.

    All words at once from prefix sums: with ``P[i] = sum(b[j] * R**(j+1) for j < i)`` the word
    ``b[s:e]`` hashes to ``(P[e] - P[s]) * R**-(s+1)`` (``R`` odd, so invertible mod 2**64).
    """
    data = np.frombuffer(text.lower().encode("utf-8", "surrogatepass"), dtype=np.uint8)
    edges = np.diff(_WORD_BYTE[data], prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    powers = np.cumprod(np.full(len(data), _R, dtype=np.uint64))
    prefix = np.zeros(len(data) + 1, dtype=np.uint64)
    np.cumsum((data + np.uint64(1)) * powers, out=prefix[1:])
    inverse = np.cumprod(np.full(len(data), _R_INVERSE, dtype=np.uint64))[starts]
    polynomial = cast(U64Array, (prefix[ends] - prefix[starts]) * inverse)
    return _mix(polynomial ^ (ends - starts).astype(np.uint64))


def simhash(text: str) -> int:
    """The unsigned 64-bit fingerprint of ``text`` (algorithm in the module docstring)."""
    h = _mix(_word_hashes(text) ^ _SEED)
    mins = np.full(_BINS, _EMPTY, dtype=np.uint64)
    np.minimum.at(mins, (h >> _BIN_SHIFT).astype(np.intp), h & _LOW_MASK)
    filled = np.flatnonzero(mins != _EMPTY)
    if len(filled) < _BINS:
        if not len(filled):
            return 0
        donor = filled[np.searchsorted(filled, np.arange(_BINS)) % len(filled)]
        mins = np.where(mins == _EMPTY, _mix(mins[donor] ^ _BIN_IDS * _GOLDEN), mins)
    bits = (_mix(mins ^ _BIN_IDS) < _ONE_THRESHOLD).astype(np.uint8)
    return int(np.packbits(bits, bitorder="little").view("<u8")[0])


def hamming(a: int, b: int) -> int:
    """Number of differing bits of two fingerprints."""
    return (a ^ b).bit_count()
