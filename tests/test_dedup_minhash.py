"""Page fingerprints (index bits and verification sketch): determinism, normalization, near-duplicate
recall and false matches (small sizes; the full bar is measured by benchmarks/bench_dedup.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from benchmarks.bench_dedup_corpus import Corpus
from polecat.dedup.minhash import (
    VERIFY_BINS,
    VERIFY_BYTES,
    VERIFY_MAX_DISTANCE,
    Fingerprint,
    fingerprint,
    hamming,
    minhash,
    verify_distance,
)

corpus = Corpus(seed=1)


def test_deterministic_unsigned_64_bit() -> None:
    text = corpus.text(corpus.words(np.random.default_rng(0), 500))
    h = minhash(text)
    assert 0 <= h < 1 << 64
    assert minhash(text) == h
    assert h.bit_count() > 8  # not degenerate


def test_case_punctuation_and_spacing_do_not_matter() -> None:
    assert minhash("Hello, World! It's 2024.") == minhash("hello world\n\tit s 2024")
    assert minhash("hello world") != minhash("hello there")


def test_word_order_and_repeats_do_not_matter() -> None:
    # Features are the set of words: a page's fingerprint is about which words it uses.
    assert minhash("alpha beta gamma") == minhash("gamma alpha beta beta alpha")


def test_empty_and_short_texts() -> None:
    assert minhash("") == 0
    assert minhash("   ,,, ") == 0
    short = [minhash(f"word{i} other{i} more{i}") for i in range(50)]
    # Densified empty bins: distinct short texts are far apart, not collapsed onto one value.
    assert min(hamming(a, b) for a, b in itertools.combinations(short, 2)) > 3


def test_non_ascii_words() -> None:
    assert minhash("Ärger über Öl") == minhash("ärger ÜBER öl")
    assert minhash("日本語 テキスト") != minhash("中文 文本")


def test_hamming() -> None:
    assert hamming(0, 0) == 0
    assert hamming(0b1011, 0b0001) == 2
    assert hamming(0, (1 << 64) - 1) == 64


@pytest.mark.parametrize("fraction", [0.01, 0.03])
def test_near_duplicates_are_close(fraction: float) -> None:
    rng = np.random.default_rng(2)
    docs = [corpus.words(rng, 2_000) for _ in range(60)]
    distances = [
        hamming(minhash(corpus.text(d)), minhash(corpus.text(corpus.edit(rng, d, fraction)))) for d in docs
    ]
    assert np.mean(np.array(distances) <= 3) >= 0.9
    assert np.mean(distances) < 2.0


def test_unrelated_and_template_pages_are_far() -> None:
    rng = np.random.default_rng(3)
    unrelated = [minhash(corpus.text(corpus.words(rng, 2_000))) for _ in range(60)]
    template = corpus.words(rng, 500)
    templated = [minhash(corpus.text(corpus.templated(rng, template, 2_000))) for _ in range(60)]
    for group in (unrelated, templated):
        distances = [hamming(a, b) for a, b in itertools.combinations(group, 2)]
        assert min(distances) > 3
        assert np.mean(distances) > 12


def test_fingerprint_parts() -> None:
    text = corpus.text(corpus.words(np.random.default_rng(4), 800))
    fp = fingerprint(text)
    assert fp == fingerprint(text)
    assert fp.index == minhash(text)
    assert len(fp.verify) == VERIFY_BYTES
    assert fingerprint("") == Fingerprint(0, bytes(VERIFY_BYTES))
    assert fingerprint("one").verify != fingerprint("two").verify
    assert fingerprint("Hello, World!") == fingerprint("hello world")


def test_verify_sketch_sees_word_order() -> None:
    # The index part is the word set; the verification sketch is over adjacent word pairs.
    a, b = fingerprint("alpha beta gamma delta"), fingerprint("delta gamma beta alpha")
    assert a.index == b.index
    assert verify_distance(a.verify, b.verify) > VERIFY_MAX_DISTANCE


def test_verify_distance() -> None:
    zero = bytes(VERIFY_BYTES)
    assert verify_distance(zero, zero) == 0
    assert verify_distance(zero, b"\xff" * VERIFY_BYTES) == VERIFY_BINS
    assert verify_distance(zero, b"\x01\x02\x03" + bytes(VERIFY_BYTES - 3)) == 3  # one bin per pair
    assert verify_distance(zero, b"\x30" + bytes(VERIFY_BYTES - 1)) == 1


def _accepted(a: Fingerprint, b: Fingerprint) -> bool:
    return hamming(a.index, b.index) <= 3 and verify_distance(a.verify, b.verify) <= VERIFY_MAX_DISTANCE


def test_near_duplicates_pass_verification() -> None:
    rng = np.random.default_rng(5)
    docs = [corpus.words(rng, 2_000) for _ in range(60)]
    pairs = [(fingerprint(corpus.text(d)), fingerprint(corpus.text(corpus.edit(rng, d, 0.03)))) for d in docs]
    distances = np.array([verify_distance(a.verify, b.verify) for a, b in pairs])
    # Verification must cost (almost) no recall: a 3 % edit sits far below the threshold.
    assert distances.max() < VERIFY_MAX_DISTANCE
    assert distances.mean() < VERIFY_MAX_DISTANCE * 0.6
    assert np.mean([_accepted(a, b) for a, b in pairs]) >= 0.9


def test_uniform_vocabulary_pages_are_not_near_duplicates() -> None:
    """Unrelated pages drawn uniformly from 3,000 words share ~70 % of their word sets, so their index
    parts are often within 3 bits; the bigram sketch still tells them apart."""
    small = Corpus(seed=6, vocab_size=3_000, zipf=0.0)
    rng = np.random.default_rng(6)
    fps = [fingerprint(small.text(small.words(rng, 5_000))) for _ in range(80)]
    pairs = list(itertools.combinations(fps, 2))
    assert sum(hamming(a.index, b.index) <= 3 for a, b in pairs) > 0  # the index alone would collapse pages
    assert min(verify_distance(a.verify, b.verify) for a, b in pairs) > 2 * VERIFY_MAX_DISTANCE
    assert not any(_accepted(a, b) for a, b in pairs)


def test_template_pages_fail_verification() -> None:
    rng = np.random.default_rng(7)
    template = corpus.words(rng, 1_000)  # half of each page
    fps = [fingerprint(corpus.text(corpus.templated(rng, template, 2_000))) for _ in range(50)]
    distances = [verify_distance(a.verify, b.verify) for a, b in itertools.combinations(fps, 2)]
    assert min(distances) > 1.5 * VERIFY_MAX_DISTANCE
