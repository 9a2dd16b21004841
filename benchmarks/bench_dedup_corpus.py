"""Generated text for the near-duplicate tests and benchmark.

Words come from a synthetic 50,000-word vocabulary with Zipf frequencies (exponent 1.07, close to
English), in 12-word sentences. Near-duplicates replace a fraction of word positions by fresh draws;
template pages share a fixed block of words (navigation, footer) around unrelated content.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Ids = npt.NDArray[np.int64]


class Corpus:
    """A vocabulary and the ways to draw pages from it; deterministic for a given seed."""

    def __init__(self, seed: int = 0, vocab_size: int = 50_000, zipf: float = 1.07) -> None:
        rng = np.random.default_rng(seed)
        letters = list("abcdefghijklmnopqrstuvwxyz")
        vocab: dict[str, None] = {}
        while len(vocab) < vocab_size:
            vocab["".join(rng.choice(letters, int(rng.integers(2, 11))))] = None
        self.vocab = list(vocab)
        weights = 1.0 / np.arange(1, vocab_size + 1) ** zipf
        self._p = weights / weights.sum()

    def words(self, rng: np.random.Generator, n: int) -> Ids:
        return rng.choice(len(self.vocab), n, p=self._p)

    def edit(self, rng: np.random.Generator, ids: Ids, fraction: float) -> Ids:
        """A copy with ``fraction`` of the positions (at least one) replaced by fresh draws."""
        out = ids.copy()
        k = max(1, round(fraction * len(ids)))
        out[rng.choice(len(ids), k, replace=False)] = self.words(rng, k)
        return out

    def text(self, ids: Ids) -> str:
        words = [self.vocab[i] for i in ids]
        for i in range(0, len(words), 12):
            words[i] = words[i].capitalize()
            words[min(i + 11, len(words) - 1)] += "."
        return " ".join(words)

    def templated(self, rng: np.random.Generator, template: Ids, n: int) -> Ids:
        """``n`` words: the first half of ``template``, unrelated content, the second half."""
        half = len(template) // 2
        return np.concatenate([template[:half], self.words(rng, n - len(template)), template[half:]])
