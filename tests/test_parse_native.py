"""The native extraction kernel (polecat/parse/_extract.c) reads every page as the Python path does."""

from __future__ import annotations

import logging
import os
import resource
import subprocess
import sys
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.corpora import docs_corpus, real_corpus, small_corpus
from polecat.parse import html
from polecat.parse.charset import decode_html
from polecat.parse.guard import bound_body, bound_html
from polecat.parse.html_native import Kernel
from polecat.testing.hostile_pages import PAGES

kernel = html._kernel
needs_kernel = pytest.mark.skipif(kernel.extract is None and not os.environ.get("POLECAT_REQUIRE_NATIVE"),
                                  reason="the native extraction kernel is not built")


def native(page: str, url: str = "http://a.test/d/", agent_token: str = "polecat") -> html.ParsedPage:
    """The kernel's answer, never the fallback: an ExtractError fails the test."""
    assert kernel.extract is not None, "the native kernel did not bind or failed its self-test"
    return html._page(url, agent_token, *kernel.extract(page))


def same(page: str, url: str = "http://a.test/d/", agent_token: str = "polecat") -> None:
    assert native(page, url, agent_token) == html.parse_html_python(page, url, agent_token=agent_token)


_WS = " \t\n\r\x0b\x0c\x1c\x85\xa0\u2003\u3000"
_PIECES = [*_WS, *"ab<>&;#\"'=/x", "é", "\u0130", "\u212a", "\ud800", "\x00", "&amp;", "&nbsp;", "&#0;",
           "&#xD800;", "&#x85;", "汉", "\U0001f600"]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=12).map("".join)
_TAGS = ("a", "area", "base", "link", "meta", "title", "script", "style", "noscript", "template", "p", "div",
         "b", "svg", "math", "table", "tr", "td", "select", "option", "textarea", "body", "head", "html",
         "frameset", "frame", "iframe", "br", "img", "A", "TITLE", "foreignObject", "desc", "mi", "plaintext")
_VALUES = st.one_of(_TEXT, st.sampled_from((
    "", " ", " /x ", "/x", "/y?q#f", "javascript:x", "  JavaScript:x", "\tmailto:m", "tel:1", "data:,",
    "nofollow", "NoFollow next", "a\u00a0nofollow", "no\u212aollow", "canonical", "Canonical stylesheet",
    "canonİcal", "robots", " ROBOTS ", "polecat", "none", "noindex, nofollow", "NOINDEX", "http://[::bad",
    "//other.test/p", "\u2003/ws\u2003", "/é", "x" * 30)))
_ATTR_NAMES = ("href", "HREF", "rel", "Rel", "name", "content", "xlink:href", "id", "hre")
_USED = {"a": ("href", "rel"), "area": ("href", "rel"), "base": ("href",), "link": ("rel", "href"),
         "meta": ("name", "content")}
"""The attributes each element is read for: drawn more often on it."""
_LIKELY = {"href": ("/p", "/q", "/p#f"), "rel": ("nofollow", "canonical", "x NOFOLLOW"),
           "name": ("robots", "polecat", " ROBOTS "),
           "content": ("noindex", "nofollow", "none", "NoIndex, x")}


@st.composite
def _attr(draw: st.DrawFn, name: str) -> str:
    if draw(st.integers(0, 5)) == 0:
        return f" {name}"  # no value
    value = draw(st.sampled_from(_LIKELY.get(name, ("/p",))) | _VALUES)
    quote = draw(st.sampled_from(('"', "'", "")))
    if quote == "":
        value = "".join(c for c in value if c not in " \t\n\r\x0c>\"'=<`") or "v"
    else:
        value = value.replace(quote, "")
    return f" {name}={quote}{value}{quote}"


@st.composite
def _token(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 9))
    tag = draw(st.sampled_from(_TAGS))
    if kind <= 3:
        tag = draw(st.sampled_from((*_USED, *_USED, tag)))
        names = [n for n in _USED.get(tag.lower(), ()) if draw(st.integers(0, 4))]
        names += draw(st.lists(st.sampled_from(_ATTR_NAMES), max_size=2))
        attrs = "".join(draw(_attr(n)) for n in draw(st.permutations(names)))
        return f"<{tag}{attrs}{draw(st.sampled_from(('>', '/>', ' >')))}"
    if kind <= 5:
        return f"</{tag}>"
    if kind == 6:
        return draw(st.sampled_from(("<!-- c -->", "<![CDATA[cd<a href=/cd>]]>", "<!doctype html>", "<!--",
                                     "<?pi x?>", "</>", "<", "&")))
    return draw(_TEXT)


@needs_kernel
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_token(), max_size=40), st.sampled_from(("polecat", "robots", "otherbot")))
def test_generated_html_reads_the_same(tokens: list[str], agent_token: str) -> None:
    same("".join(tokens), agent_token=agent_token)


@needs_kernel
def test_the_self_test_pages_and_edge_cases_read_the_same() -> None:
    from polecat.parse.html_native import SELF_TEST_PAGES

    for page in (*SELF_TEST_PAGES, "<a href=' \t\n\x0b\x0c\x1c\x1d\x1e\x1f\x85 \xa0 javascript:x'>",
                 "<a href='\u2003\u2003\u2003\u2003\u2003\u2003\u2003\u2003\u2003\u2003\u2003\u2003x'>",
                 "<a href='            '>", "<title>\u2003</title><title>b</title>",
                 "<a href=" + "x" * 100_000):
        same(page)


@needs_kernel
def test_benchmark_corpora_read_the_same() -> None:
    # Every page of the doc web (all packages installed) and the nodejs API docs, and 500 pages of the
    # generated web: `python -m benchmarks.check_native_parse` checks all 10,000 of those.
    corpora = [small_corpus(500), real_corpus(), docs_corpus()]
    checked = 0
    for corpus in corpora:
        if corpus is None:
            continue
        for body, url in zip(corpus.bodies, corpus.urls, strict=True):
            page = body.decode("utf-8", "replace")
            same(page, url)
            if page.encode() == body:  # well-formed UTF-8: what the pipeline parses undecoded
                assert html.parse_html(body, url) == html.parse_html(page, url), url
            checked += 1
    assert checked >= 500


@needs_kernel
def test_utf8_bytes_are_parsed_as_they_are() -> None:
    assert kernel.extract is not None
    assert kernel.extract(b"<a href=/y>y</a>")[:3] == (("/y",), "", "y")
    page = "<title>t\u00e9</title><a href='/\u00e9'>\u00e9t\u00e9</a>"
    assert kernel.extract(page.encode()) == kernel.extract(page)
    with pytest.raises(TypeError, match="html must be a str or UTF-8 bytes"):
        kernel.extract(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="html must be a str or UTF-8 bytes"):
        kernel.extract(bytearray(b"<p>"))  # type: ignore[arg-type]


@needs_kernel
@pytest.mark.parametrize("name", sorted(PAGES))
def test_hostile_pages_after_the_guard_read_the_same(name: str) -> None:
    head, cut = bound_body(PAGES[name](2 * 2**20))
    same(bound_html(decode_html(head, None), cut=cut).html, "http://h.test/")


@needs_kernel
def test_ten_thousand_parses_do_not_grow_memory() -> None:
    page = small_corpus(1).bodies[0].decode()
    for _ in range(500):
        native(page)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(10_000):
        native(page)
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 16 * 1024, grown_kb  # a leaked document would be ~1 MB a parse


@needs_kernel
def test_rule_7_pages_are_parsed_into_the_thread_s_kept_document_with_no_pages_faulted_in() -> None:
    """_extract.c rule 7, in a child process with glibc's mmap threshold fixed as a TLS crawl fixes it
    (polecat/fetch/pool.py rule 13) and no free chunk in the heap big enough for lexbor's 320 KiB token
    arenas: a new document a page mapped them afresh and faulted their pages in (3 faults a page when
    measured); the kept document faults nothing in once the first pages are done."""
    script = ("import resource\n"
              "from benchmarks.corpora import small_corpus\n"
              "from polecat.fetch.pool import fix_mmap_threshold\n"
              "from polecat.parse import html\n"
              "if not fix_mmap_threshold(): raise SystemExit('not glibc')\n"
              "page = small_corpus(1).bodies[0].decode()\n"
              "heap = [bytes(200_000) for _ in range(50)]  # under the threshold: the heap's free chunks\n"
              "for _ in range(50): html._kernel.extract(page)\n"
              "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
              "for _ in range(500): html._kernel.extract(page)\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    if run.stderr.strip().endswith("not glibc"):
        pytest.skip("glibc's mmap threshold only")
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) < 50, run.stdout  # 500 pages


def test_a_page_the_kernel_cannot_do_falls_back_and_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    class Refused(Exception):
        pass

    def refuse(page: str | bytes) -> object:
        raise Refused("text that is not UTF-8")

    k = Kernel(None)
    k.extract, k.error = refuse, Refused
    saved = html._kernel
    html._kernel = k
    try:
        with caplog.at_level(logging.WARNING, logger="polecat"):
            pages = [html.parse_html('<a href="/x">x</a>', "http://a.test/") for _ in range(2)]
            pages.append(html.parse_html(b'<a href="/x">x</a>', "http://a.test/"))
    finally:
        html._kernel = saved
    assert all(p.links == ("/x",) for p in pages) and k.fallbacks == 3
    assert sum("Python path used" in r.message for r in caplog.records) == 1


def test_a_binding_failure_or_a_difference_leaves_the_python_path(caplog: pytest.LogCaptureFixture) -> None:
    class BindError(Exception):
        pass

    def bind(path: str) -> None:
        raise BindError("lexbor symbol lxb_x is missing")

    with caplog.at_level(logging.WARNING, logger="polecat"):
        unbound = Kernel(SimpleNamespace(bind=bind, ExtractError=BindError))  # type: ignore[arg-type]
        differing = Kernel(SimpleNamespace(bind=lambda p: None, extract=len, ExtractError=BindError))  # type: ignore[arg-type]
        differing.verify(lambda page: "title" if page else None)
    assert unbound.extract is None and differing.extract is None
    assert [r.message.split(":")[0] for r in caplog.records] == [
        "native HTML extraction unavailable (lexbor symbol lxb_x is missing)",
        "native HTML extraction disabled"]


def test_bind_refuses_a_library_without_lexbor_and_pure_python_skips_the_kernel() -> None:
    # In a child process: a failed bind() leaves that process's kernel unusable.
    script = ("import polecat.parse.html as h, polecat.native as n\n"
              "m = n.load('polecat.parse._extract')\n"
              "print(h._kernel.extract is None)\n"
              "for path in ('/nonexistent/lexbor.so', getattr(m, '__file__', '')):\n"
              "    try: m.bind(path)\n"
              "    except m.ExtractError as e: print(e)\n")
    pure = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "POLECAT_PURE_PYTHON": "1"})
    assert pure.stdout.splitlines()[0] == "True"
    if kernel.extract is None:
        return
    env = {k: v for k, v in os.environ.items() if k != "POLECAT_PURE_PYTHON"}
    bound = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                           env=env, check=True)
    lines = bound.stdout.splitlines()
    assert lines[0] == "False" and lines[1].startswith("dlopen: "), bound.stdout
    assert lines[2] == "lexbor symbol lxb_html_document_create is missing", bound.stdout
