"""The native fingerprint kernel (polecat/dedup/_minhash.c) gives exactly the numpy specification's
Fingerprint (minhash.python_fingerprint) on generated Unicode text and on the benchmark corpora."""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.corpora import Corpus, docs_corpus, real_corpus, small_corpus
from polecat.dedup import minhash
from polecat.dedup.minhash import Fingerprint, python_fingerprint
from polecat.parse.charset import decode_html
from polecat.parse.html import parse_html
from tests.native_helpers import kernel


def _kernel() -> ModuleType:
    return kernel("polecat.dedup._minhash")


def native_fingerprint(text: str) -> Fingerprint:
    return Fingerprint(*_kernel().fingerprint(text))


# Characters that stress the word rule and the lowercasing: case mappings that change length (U+0130 lowers
# to two code points), to ASCII (the Kelvin sign lowers to 'k'), final sigma, ligatures, CJK,
# surrogates (encoded with surrogatepass), separators, digits and both ASCII cases.
TRICKY = ("aZ09 .,-_\t\n"
          "\u0130\u0131\u03a3\u03c3\u03c2\u1e9e\u00df\u212a\u212b\ufb03\u01c5"  # I, sigma, sharp s, ...
          "\u65e5\u672c\ud55c\u00c0\u00c9\u00e9\u00fc\u0301\u200b"  # CJK, Hangul, accents, combining, ZWSP
          "\ud800\udfff\U0001f600\x80\xff")
tricky_text = st.text(alphabet=st.sampled_from(TRICKY), max_size=300)
any_text = st.text(alphabet=st.characters(exclude_categories=()), max_size=300)
ascii_text = st.text(alphabet=st.characters(max_codepoint=127), max_size=2_000)


@settings(max_examples=400)
@given(st.one_of(tricky_text, any_text, ascii_text))
def test_identical_on_generated_text(text: str) -> None:
    assert native_fingerprint(text) == python_fingerprint(text)


@settings(max_examples=100)
@given(st.lists(st.one_of(st.text(alphabet="aB9", min_size=1, max_size=40),
                          st.text(alphabet="日本é", min_size=1, max_size=20)), max_size=60),
       st.sampled_from([" ", "-", "\n", ", "]))
def test_identical_on_words_of_every_length(words: list[str], sep: str) -> None:
    """Words of 1-40 bytes cross the head/tail (<= 8, <= 16) and xxh3 (> 16) cases and chunk edges."""
    text = sep.join(words)
    assert native_fingerprint(text) == python_fingerprint(text)


@pytest.mark.parametrize("text", [
    "", "a", " ", "...", "one", "İ", "Σ", "x" * 16, "x" * 17, "X" * 64, "y" * 65, "a " * 32, "ab" * 32 + " c",
    "word " * 200_000, " ".join(f"w{i}" for i in range(200_000)), "日本" * 100_000, "\ud800" * 1_000,
])
def test_identical_on_edge_cases(text: str) -> None:
    assert native_fingerprint(text) == python_fingerprint(text)


def test_lowering_is_str_lower_for_every_code_point() -> None:
    """Rule 1's per-code-point table gives text.lower() as UTF-8 for all of Unicode, surrogates and the
    length-changing mappings included; a text with U+03A3 (final sigma) is left to lower()."""
    lowered = _kernel().lowered
    for start in range(0, 0x110000, 4096):
        text = "".join(chr(c) for c in range(start, min(start + 4096, 0x110000)) if c != 0x3A3)
        assert lowered(text) == text.lower().encode("utf-8", "surrogatepass"), hex(start)
    assert lowered("ab\u03a3") is None
    astral = "\U00010400\U0001f600" * 500  # 4 bytes a code point: past the buffer's first 3 each
    assert lowered(astral) == astral.lower().encode()
    assert native_fingerprint("\u039f\u0394\u039f\u03a3 \u03a3\u039f\u03a6\u0399\u0391") == \
        python_fingerprint("\u039f\u0394\u039f\u03a3 \u03a3\u039f\u03a6\u0399\u0391")


def test_str_subclass_lower_is_called() -> None:
    class Shouting(str):
        def lower(self) -> str:
            return "overridden words"

    assert native_fingerprint(Shouting("ABC")) == python_fingerprint(Shouting("ABC"))
    assert native_fingerprint(Shouting("ABC")) == python_fingerprint("overridden words")


def test_rejects_non_str() -> None:
    with pytest.raises(TypeError, match="needs a str"):
        _kernel().fingerprint(b"bytes")


def test_constants_match_the_specification() -> None:
    assert int(minhash._ONE_THRESHOLD) == _kernel().ONE_THRESHOLD


def test_fingerprint_dispatches_to_the_kernel() -> None:
    if os.environ.get("POLECAT_PURE_PYTHON") == "1":
        assert minhash._native_fingerprint is None
    else:
        assert minhash._native_fingerprint is _kernel().fingerprint


def _texts(corpus: Corpus) -> list[str]:
    return [parse_html(decode_html(body, "utf-8"), url).text for body, url in
            zip(corpus.bodies, corpus.urls, strict=True)]


@pytest.mark.parametrize("load", [lambda: small_corpus(200), real_corpus, docs_corpus],
                         ids=["small", "real", "docs"])
def test_identical_on_the_benchmark_corpora(load: Callable[[], Corpus | None]) -> None:
    corpus = load()
    if corpus is None:
        pytest.skip("the corpus's Debian documentation packages are not installed")
    _kernel()
    mismatched = [url for url, text in zip(corpus.urls, _texts(corpus), strict=True)
                  if native_fingerprint(text) != python_fingerprint(text)]
    assert mismatched == []
