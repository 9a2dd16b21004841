"""Page fingerprints: determinism, normalization, near-duplicate recall and false matches (small sizes;
the full bar is measured by benchmarks/bench_dedup.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from benchmarks.bench_dedup_corpus import Corpus
from polecat.dedup.simhash import hamming, simhash

corpus = Corpus(seed=1)


def test_deterministic_unsigned_64_bit() -> None:
    text = corpus.text(corpus.words(np.random.default_rng(0), 500))
    h = simhash(text)
    assert 0 <= h < 1 << 64
    assert simhash(text) == h
    assert h.bit_count() > 8  # not degenerate


def test_case_punctuation_and_spacing_do_not_matter() -> None:
    assert simhash("Hello, World! It's 2024.") == simhash("hello world\n\tit s 2024")
    assert simhash("hello world") != simhash("hello there")


def test_word_order_and_repeats_do_not_matter() -> None:
    # Features are the set of words: a page's fingerprint is about which words it uses.
    assert simhash("alpha beta gamma") == simhash("gamma alpha beta beta alpha")


def test_empty_and_short_texts() -> None:
    assert simhash("") == 0
    assert simhash("   ,,, ") == 0
    short = [simhash(f"word{i} other{i} more{i}") for i in range(50)]
    # Densified empty bins: distinct short texts are far apart, not collapsed onto one value.
    assert min(hamming(a, b) for a, b in itertools.combinations(short, 2)) > 3


def test_non_ascii_words() -> None:
    assert simhash("Ärger über Öl") == simhash("ärger ÜBER öl")
    assert simhash("日本語 テキスト") != simhash("中文 文本")


def test_hamming() -> None:
    assert hamming(0, 0) == 0
    assert hamming(0b1011, 0b0001) == 2
    assert hamming(0, (1 << 64) - 1) == 64


@pytest.mark.parametrize("fraction", [0.01, 0.03])
def test_near_duplicates_are_close(fraction: float) -> None:
    rng = np.random.default_rng(2)
    docs = [corpus.words(rng, 2_000) for _ in range(60)]
    distances = [
        hamming(simhash(corpus.text(d)), simhash(corpus.text(corpus.edit(rng, d, fraction)))) for d in docs
    ]
    assert np.mean(np.array(distances) <= 3) >= 0.9
    assert np.mean(distances) < 2.0


def test_unrelated_and_template_pages_are_far() -> None:
    rng = np.random.default_rng(3)
    unrelated = [simhash(corpus.text(corpus.words(rng, 2_000))) for _ in range(60)]
    template = corpus.words(rng, 500)
    templated = [simhash(corpus.text(corpus.templated(rng, template, 2_000))) for _ in range(60)]
    for group in (unrelated, templated):
        distances = [hamming(a, b) for a, b in itertools.combinations(group, 2)]
        assert min(distances) > 3
        assert np.mean(distances) > 12
