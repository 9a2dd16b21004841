"""The native parse guard (polecat/parse/_guard.c) returns exactly what the Python rules of
polecat/parse/guard.py return (the specification): rule by rule on generated markup built to hit their
edges, through bound_html (where the Python path also has its SHALLOW_TAGS gate and numpy prefilter), on
the hostile page classes and on every page of the benchmark corpora."""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from benchmarks.corpora import Corpus, docs_corpus, real_corpus, small_corpus
from polecat.parse import guard
from polecat.parse.charset import decode_html
from polecat.parse.guard import MAX_ATTRS, MAX_DEPTH, SHALLOW_TAGS, Bounded, bound_body, bound_html
from polecat.testing.hostile_pages import PAGES
from tests.native_helpers import kernel
from tests.test_parse_depth_bound import PIECES as DEPTH_PIECES


def _kernel() -> ModuleType:
    return kernel("polecat.parse._guard")


@contextmanager
def _limits(depth: int = MAX_DEPTH, attrs: int = MAX_ATTRS) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(guard, "MAX_DEPTH", depth)
        mp.setattr(guard, "MAX_ATTRS", attrs)
        yield


def same_depth(html: str, limit: int = MAX_DEPTH) -> None:
    with _limits(depth=limit):
        expected = guard._too_deep(html)
    assert _kernel().too_deep(html, limit, 0) == expected, html[:2000]


def same_attrs(html: str, limit: int = MAX_ATTRS) -> None:
    with _limits(attrs=limit):
        expected = guard._too_many_attrs(html)
    assert _kernel().too_many_attrs(html, limit) == expected, html[:2000]


def pure_and_native(html: str, cut: bool = False) -> tuple[Bounded, Bounded]:
    _kernel()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(guard, "_NATIVE", None)
        pure = bound_html(html, cut=cut)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(guard, "_NATIVE", _kernel())
        native = bound_html(html, cut=cut)
    return pure, native


# Rule 2: the depth scan's edges beyond the depth bound's pieces: comments (empty, unclosed), every
# raw-text element with and without its end tag (in the case variants re.IGNORECASE takes: U+0130,
# U+0131 for "i", U+017F for "s"), plaintext, names past 8 characters, flat names in any case, names
# that lower to flat ones (the Kelvin sign), 2- and 4-byte characters.
RAW_PIECES = [
    "<!-->", "<!--x", "<!--->", "--", "->", "<!", "<!-", "<xmp>", "</XMP>", "<iframe>", "</iframe",
    "<noembed>", "</noembed>", "<noframes>", "</NoFrames>", "<TEXTAREA>", "</textarea ", "<title >",
    "</TITLE>",
    "<PLAINTEXT>", "<plaintexts>", "<plaintex>", "</scr\u0130pt>", "</scr\u0131pt>", "</\u017fcript>",
    "</\u017ftyle>", "</t\u0131tle>", "</scrpt>", "<option>", "<LI>", "<colgroup>", "</COLGROUP>",
    "<optgroup>", "<blockquote>", "</BLOCKQUOTE>", "<CustomElement>", "</customelement>", "<LIN\u212a>",
    "<a\u212a>", "</a\u212a>", "</ak>", "<\u212a>", "\U0001f600", "<a\U0001f600>", "</A\U0001F600>",
    "<x\u2028>", "</x\u2028", "<div\x85>", "<svg/>", "</svg>", "<a/b>", "\u0100",
]
depth_pieces = st.sampled_from(DEPTH_PIECES + RAW_PIECES)


@settings(max_examples=1500, deadline=None)
@given(pieces=st.lists(depth_pieces, max_size=80), limit=st.integers(0, 6))
@example(pieces=["<a\u212a>", "<lin\u212a>", "</ak>", "<div>"], limit=1)
@example(pieces=["<script>", "<div>", "</scr\u0130pt>", "<div>", "<div>"], limit=1)
@example(pieces=["<style>", "</\u017ftyle>", "<div>", "<div>"], limit=1)
@example(pieces=["<!-->", "<div>", "<div>", "-->", "<div>"], limit=1)
@example(pieces=["<plaintext>", "<div>", "<div>"], limit=1)
def test_depth_rule_on_generated_markup(pieces: list[str], limit: int) -> None:
    same_depth("".join(pieces), limit)


@settings(max_examples=300, deadline=None)
@given(runs=st.lists(st.tuples(depth_pieces, st.integers(1, 300)), max_size=8))
def test_depth_rule_around_max_depth(runs: list[tuple[str, int]]) -> None:
    """Runs of a piece (nesting, flat elements, stray end tags) around MAX_DEPTH itself."""
    same_depth("".join(piece * count for piece, count in runs))


@pytest.mark.parametrize("html", [
    "<div>" * MAX_DEPTH, "<div>" * (MAX_DEPTH + 1), "<div>" * MAX_DEPTH + "<br><p><li>" * 9 + "<span>",
    "<span>" * MAX_DEPTH + "</x>" * 1000 + "<b>", "<div></div>" * 5000 + "<i>" * 300,
    "<" + "q" * 100_000 + ">" + "</" + "Q" * 100_000 + ">" + "<i>" * 300,
    "".join(f"<n{i}>" for i in range(MAX_DEPTH)) + "".join(f"</N{i}>" for i in range(MAX_DEPTH)) + "<a>",
    "".join(f"<long-name-{i}>" for i in range(MAX_DEPTH + 1)),
    "".join(f"<n{i}></n{i}>" for i in range(100_000)) + "<a>" * 300,  # names come and go: the table empties
])
def test_depth_rule_edge_pages(html: str) -> None:
    same_depth(html)


# Rule 3: tags with 250-260 attributes in every spelling (separators: space, "/", none, Unicode
# whitespace; values: none, unquoted, quoted holding "<x", ">" or the other quote, unclosed), after
# short tags whose quoted values hide "<x" and long ones.
SEPARATORS = [" ", "/", "\t", " / ", "\u3000", "\xa0", "\x1c", "\u2028", "", "\n\n"]
VALUES = ["", "=v", '="v"', "='v'", '="<x y>"', "='>'", "=\"'\"", '= "q"', "=", "=<x", '="unclosed',
          "='unclosed", '="a b" ', "=\U0001f600"]
NAMES = ["a", "b1", "\xe9", "\u65e5", "x-y", "<x", "'q", '"q']


@st.composite
def long_tags(draw: st.DrawFn) -> str:
    # One random stream per tag: 250-260 draws each through hypothesis made the test ten times slower.
    rnd = draw(st.randoms(use_true_random=False))
    seps = rnd.sample(SEPARATORS, rnd.randint(1, 3))  # a few spellings per tag, mixed
    attrs = [rnd.choice(NAMES) + rnd.choice(VALUES) + rnd.choice(seps) for _ in range(rnd.randint(250, 260))]
    head = draw(st.sampled_from(["<div ", "<I ", "<a\u3000", "<x/", "<b"]))
    return head + "".join(attrs) + draw(st.sampled_from([">", "", "/>", '"']))


ATTR_PIECES = [
    '<a title="<x ', '">', "<p class='", "'>", "<br>", "text ", ">", '"', "'", "<", "<x", "</a>",
    "<!--", "-->", " a=b", "x" * 70, '"' + "y" * 70 + '"', "\u3000", "\U0001f600", "=", "/",
]


@settings(max_examples=75, deadline=None)
@given(st.lists(st.one_of(long_tags(), st.sampled_from(ATTR_PIECES)), min_size=1, max_size=6))
def test_attribute_rule_on_generated_tags(parts: list[str]) -> None:
    same_attrs("".join(parts))


@settings(max_examples=750, deadline=None)
@given(pieces=st.lists(st.sampled_from([*ATTR_PIECES, " b", "='<x'", "<i "]), max_size=60),
       limit=st.integers(0, 12))
def test_attribute_rule_at_small_limits(pieces: list[str], limit: int) -> None:
    """The prefilter is the same at any limit, so small ones reach the count's edges with short pages."""
    same_attrs("".join(pieces), limit)


@pytest.mark.parametrize("html", [
    "<a" * 224 + ">", ("<a" * 224 + ">") * 50, "<a " + "b " * 300, '<i title="' + "<b " * 300 + '">',
    "<a" + ('"' + "y" * 100 + '"') * 7 + ">", '<a "' + "x " * 600, "<div " + " ".join(["a"] * 257),
    "<div " + "/".join(["a"] * 257) + ">", "<div " + "".join(['a=""'] * 257) + ">",
])
@pytest.mark.parametrize("limit", [0, MAX_ATTRS])
def test_attribute_rule_edge_pages(html: str, limit: int) -> None:
    same_attrs(html, limit)


def test_remembered_quote_searches_answer_only_their_own_span() -> None:
    """"<a" looks for the quote after position 9 first; "<b", inside its value, then for the one after
    8, which is 8 itself (an empty value), not the answer remembered for 9."""
    same_attrs('<a "<b ""' + "y" * 400 + '">', 0)


@settings(max_examples=100, deadline=None)
@given(pieces=st.lists(st.one_of(depth_pieces, long_tags()), max_size=12),
       nesting=st.integers(MAX_DEPTH - 5, MAX_DEPTH + 5),
       pad=st.sampled_from(["<br>", "< ", "<p>x</p>", "<!---->"]), before=st.booleans(), cut=st.booleans())
def test_bound_html_is_the_same_on_both_paths(pieces: list[str], nesting: int, pad: str, before: bool,
                                              cut: bool) -> None:
    """Pages past the SHALLOW_TAGS gate, where the pure path runs the numpy prefilter and the kernel not."""
    body = "".join(pieces) + "<div>" * nesting + "".join(pieces)
    padding = pad * (SHALLOW_TAGS // pad.count("<") + 1)
    html = padding + body if before else body + padding
    pure, native = pure_and_native(html, cut)
    assert pure == native


@pytest.mark.parametrize("hidden", ["< ", "<!--<-->", "<script><</script>", "<br>"])
@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_the_shallow_tags_gate_is_the_same(hidden: str, extra: int) -> None:
    """A deep page is cut only past SHALLOW_TAGS "<", wherever they are (in comments, scripts, text)."""
    deep = "<div>" * (MAX_DEPTH + 1)
    html = deep + hidden * ((SHALLOW_TAGS - deep.count("<") + extra) // hidden.count("<"))
    pure, native = pure_and_native(html)
    assert pure == native
    assert (native.cut == "depth") == (html.count("<") > SHALLOW_TAGS)


@pytest.mark.parametrize("filler", ["\u013c", "\U0001003c", "\xe9", "\u3000"])
@pytest.mark.parametrize("offset", range(9))
def test_every_character_position_of_wide_strings(filler: str, offset: int) -> None:
    """"<" is found in every lane of the 8-byte words 2- and 4-byte strings are searched by (fillers
    whose low bits are "<" included)."""
    html = filler * offset + ("<div>" + filler) * 3 + "<a " + "b " * 300 + filler
    same_depth(html, 2)
    same_attrs(html, 5)
    assert _kernel().too_deep(html, 2, html.count("<") - 1) is not None
    assert _kernel().too_deep(html, 2, html.count("<")) is None


def test_the_kernel_has_the_guards_names() -> None:
    assert _kernel().FLAT == guard._FLAT and _kernel().RAW == guard._RAW


def test_bad_arguments_are_errors() -> None:
    kernel = _kernel()
    with pytest.raises(TypeError):
        kernel.too_deep(b"<div>", 3, 0)
    with pytest.raises(ValueError, match="limit"):
        kernel.too_many_attrs("<div>", -1)
    with pytest.raises(TypeError):
        kernel.too_deep("<div>")


def test_bound_html_dispatches_to_the_kernel() -> None:
    if os.environ.get("POLECAT_PURE_PYTHON") == "1":
        assert guard._NATIVE is None
    else:
        assert guard._NATIVE is _kernel()


@pytest.mark.parametrize("name", sorted(PAGES))
def test_hostile_classes_are_the_same_and_fast(name: str) -> None:
    body = PAGES[name](10 * 2**20)
    for size in (2**20, len(body)):  # the pure path at 1 MiB, the kernel at the body cap as well
        html = body[:size].decode("utf-8", "replace")
        start = time.process_time()
        native = (_kernel().too_many_attrs(html, MAX_ATTRS), _kernel().too_deep(html, MAX_DEPTH, 0))
        assert time.process_time() - start < 0.5, (name, size)
        if size == 2**20:
            assert native == (guard._too_many_attrs(html), guard._too_deep(html))


def _pages(corpus: Corpus) -> Iterator[tuple[str, bytes, str]]:
    for url, body in zip(corpus.urls, corpus.bodies, strict=True):
        head, _ = bound_body(body)
        yield url, head, decode_html(head, "utf-8")


@pytest.mark.parametrize("load", [lambda: small_corpus(400), real_corpus, docs_corpus],
                         ids=["small", "real", "docs"])
def test_the_same_on_the_benchmark_corpora(load: Callable[[], Corpus | None]) -> None:
    """Both paths agree on every page, and every page the rules leave whole is told so from its bytes by
    whole_utf8 (none needs its text decoded)."""
    corpus = load()
    if corpus is None:
        pytest.skip("the corpus's Debian documentation packages are not installed")
    kernel = _kernel()
    differ, undecided = [], []
    for url, head, html in _pages(corpus):
        pure, native = pure_and_native(html)
        rules = (kernel.too_many_attrs(html, MAX_ATTRS), kernel.too_deep(html, MAX_DEPTH, 0))
        if pure != native or rules != (guard._too_many_attrs(html), guard._too_deep(html)):
            differ.append(url)
        told = kernel.whole_utf8(head, MAX_ATTRS, MAX_DEPTH, SHALLOW_TAGS)
        if not _decodes(head):  # a page in another charset
            assert not told, url
        elif native.cut is None and not told:
            undecided.append(url)
        elif native.cut is not None:
            assert not told, url
    assert differ == []
    assert undecided == []


def test_names_held_as_str_are_released() -> None:
    """Long and non-ASCII names are held as str while open; none outlives the call, whichever way the
    scan ends (a cut, the end of the page)."""
    kernel = _kernel()
    names = "".join(f"<name-\xe9{i}>" for i in range(MAX_DEPTH + 1))
    ends = "".join(f"<long-name-{i}></long-name-{i}>" for i in range(2000))
    kernel.too_deep(names, MAX_DEPTH, 0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20):
            assert kernel.too_deep(names, MAX_DEPTH, 0) is not None
            assert kernel.too_deep(ends + names[:-20], MAX_DEPTH, 0) is None
        assert tracemalloc.get_traced_memory()[0] - before < 10_000
    finally:
        tracemalloc.stop()


# whole_utf8: the rules over UTF-8 bytes. Sound everywhere (True only where the text is cut by neither
# rule), exact on ASCII (where no character can make the bytes undecided), and False for any bytes
# Python's strict decoder refuses.
def _decodes(data: bytes) -> bool:
    """Whether Python's strict decoder takes ``data``."""
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def sound_utf8(html: str, attrs: int = MAX_ATTRS, depth: int = MAX_DEPTH, shallow: int = 0) -> None:
    kernel = _kernel()
    data = html.encode("utf-8", "surrogatepass")
    whole = kernel.whole_utf8(data, attrs, depth, shallow)
    text_whole = kernel.too_many_attrs(html, attrs) is None and kernel.too_deep(html, depth, shallow) is None
    if whole:
        assert text_whole, html[:2000]
    if html.isascii():
        assert whole == text_whole, html[:2000]
    if not _decodes(data):
        assert not whole


@settings(max_examples=500, deadline=None)
@given(pieces=st.lists(depth_pieces, max_size=80), limit=st.integers(0, 6))
def test_whole_utf8_depth_on_generated_markup(pieces: list[str], limit: int) -> None:
    sound_utf8("".join(pieces), depth=limit)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(long_tags(), st.sampled_from(ATTR_PIECES)), min_size=1, max_size=6))
def test_whole_utf8_attributes_on_generated_tags(parts: list[str]) -> None:
    sound_utf8("".join(parts))


@settings(max_examples=800, deadline=None)
@given(pieces=st.lists(st.sampled_from([*ATTR_PIECES, " b", "='<x'", "<i ", "\xe9", "\u3000 ", "\xa0"]),
                       max_size=60),
       limit=st.integers(0, 12), depth=st.integers(0, 6))
def test_whole_utf8_at_small_limits(pieces: list[str], limit: int, depth: int) -> None:
    """Runs counted in characters, not bytes: "x" * 70 and "\xe9" * 40 are two items and one."""
    sound_utf8("".join(pieces), attrs=limit, depth=depth)


@pytest.mark.parametrize("html", [
    "<a " + "\xe9" * 63 + '"q"' * 7 + ">",  # 64 bytes but 63 characters: one item, so 8, a long tag
    "<a " + "\xe9" * 64 + '"q"' * 6 + ">",  # 128 bytes, 64 characters: 7 items, no long tag
    "<a b=" + "\xe9" * 30 + " c d e f g h i j k l m n o p q r s t u v w x y z" * 30 + ">",
    '<a title="\xe9" ' + "b " * 300 + ">", "<div>" * 300, "<d\xe9v>" * 300,
    "<script></scr\u0130pt>" + "<i>" * 300,
])
@pytest.mark.parametrize("limit", [0, 3, MAX_ATTRS])
def test_whole_utf8_edge_pages(html: str, limit: int) -> None:
    sound_utf8(html, attrs=limit, depth=limit)


@given(st.binary(max_size=200))
def test_whole_utf8_takes_what_the_strict_decoder_takes(data: bytes) -> None:
    data = data.replace(b"<", b"")  # no tags: only the UTF-8 check decides
    assert _kernel().whole_utf8(data, MAX_ATTRS, MAX_DEPTH, 0) == _decodes(data)


@pytest.mark.parametrize("data", [
    b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
    b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\x80",
    b"\xe2\x82", b"abcdefg\xe2\x82", b"\xf0\x9f\x98", "\U0010ffff".encode(), "\ud7ff\ue000".encode(),
    "\u0800\u07ff".encode(), b"x" * 15 + "\U0001f600".encode(),
])
def test_whole_utf8_validation_edges(data: bytes) -> None:
    assert _kernel().whole_utf8(data, MAX_ATTRS, MAX_DEPTH, 0) == _decodes(data)
