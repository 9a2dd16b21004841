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

Algorithm (numpy in polecat/dedup/minhash_numpy.py, the specification: no Python loop over words but for
words over 16 bytes; the native kernel polecat/dedup/_minhash.c computes the same bits in one pass, and
:func:`fingerprint` uses it when :func:`polecat.native.load` gives it):

1. Words: lowercase, UTF-8, maximal runs of ``[a-z0-9]`` or non-ASCII bytes. A word of at most 16 bytes
   hashes to 64 bits from its first and last 8 bytes (read straight from the text, masked to its length)
   and its length, which together are the whole word; a longer word (rare in text, but a CJK run has no
   spaces) hashes with xxh3. Each pass goes over the bytes once or over the words: the earlier polynomial
   hash of every byte (a sequential 64-bit prefix sum) took 60 % of the fingerprint. Changing the word
   hash changed every fingerprint: :data:`FORMAT` is recorded with the near-duplicate index.
2. Features: the *set* of words (1-word shingles, repeats ignored). Longer shingles make one changed word
   change several features, and set semantics make edits of frequent words free; both were measured.
3. One permutation: a word hash's top 6 bits pick one of 64 bins, the minimum of its other bits in each
   bin is that bin's MinHash (equal in two pages with probability about J).
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

from collections.abc import Callable
from dataclasses import dataclass

from polecat import native

FORMAT = 3
"""Version of the fingerprints, kept in the frontier's schema as ``near_index``: a data dir whose stored
fingerprints were computed another way is refused at open (2: polynomial word hash, 3: head+tail)."""

_BINS = 64
_ONE_RATE = 0.4
"""Probability of a 1 bit. Below 0.5 a changed bin flips its bit less often (``2q(1-q)``): 0.4 buys about
1.5 points of recall at 3 % of words changed, at ~1.8x the index candidates of uniform bits (bands of
biased bits collide more); unrelated pages stay ~18 bits apart (benchmarks/README.md, "Dedup")."""
_ONE_THRESHOLD = int(_ONE_RATE * 2**64)

VERIFY_BINS = 512
VERIFY_BYTES = VERIFY_BINS // 4
"""Length of :attr:`Fingerprint.verify`: 512 bins of 2 bits."""
VERIFY_MAX_DISTANCE = 80
"""Differing verification bins (of 512) still counted a near-duplicate: bigram similarity ``J2 >= 0.79``.
3 % of words changed in a 2,000-word page gives ``J2 ~ 0.89``, 40 bins (sd 6): misses below 1e-8. Pages
sharing a 75 % template sit at ~150 bins (sd 10), half a template at ~240; 90 % shared is a near-duplicate
by any measure of words (~65 bins)."""
_LOW_BIT_PAIRS = int.from_bytes(b"\x55" * VERIFY_BYTES, "little")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A page's near-duplicate fingerprint: ``index`` finds candidates, ``verify`` confirms them."""

    index: int
    """64-bit one-permutation MinHash bits of the word set (:func:`minhash`), compared by Hamming distance."""
    verify: bytes
    """:data:`VERIFY_BYTES`-byte 2-bit MinHash of the word-bigram set, compared by :func:`verify_distance`."""


def python_fingerprint(text: str) -> Fingerprint:
    """:func:`fingerprint` in numpy (polecat/dedup/minhash_numpy.py, loaded on the first call so that a
    process with the native kernel never loads numpy): the specification of the kernel, and its
    fallback."""
    from polecat.dedup.minhash_numpy import sketches

    return Fingerprint(*sketches(text))


_kernel = native.load("polecat.dedup._minhash")
_native_fingerprint: Callable[[str], tuple[int, bytes]] | None = (
    None if _kernel is None else _kernel.fingerprint
)


def fingerprint(text: str) -> Fingerprint:
    """Both sketches of ``text`` from one pass of word hashing (algorithm in the module docstring).

    Text without words gets index 0 and an all-zero ``verify``: two such texts match each other.
    """
    if _native_fingerprint is None:
        return python_fingerprint(text)
    return Fingerprint(*_native_fingerprint(text))


def minhash(text: str) -> int:
    """The unsigned 64-bit index part of ``fingerprint(text)``."""
    return fingerprint(text).index


def verify_distance(a: bytes, b: bytes) -> int:
    """Number of the :data:`VERIFY_BINS` bins whose 2-bit values differ between two ``verify`` sketches."""
    x = int.from_bytes(a, "little") ^ int.from_bytes(b, "little")
    return ((x | x >> 1) & _LOW_BIT_PAIRS).bit_count()


def hamming(a: int, b: int) -> int:
    """Number of differing bits of two fingerprints."""
    return (a ^ b).bit_count()
