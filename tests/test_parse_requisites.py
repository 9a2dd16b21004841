"""Page requisites read out of HTML (polecat/parse/requisites.py) and CSS (polecat/parse/css.py), within
their bounds, and in linear time on hostile stylesheets."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.parse.css import MAX_CSS_CHARS, MAX_CSS_URLS, css_links, stylesheet_links
from polecat.parse.guard import MAX_HREF_CHARS
from polecat.parse.requisites import MAX_REQUISITES, page_requisites, srcset_urls

PAGE = """<!doctype html><html><head>
<link rel="Shortcut Icon" href="/favicon.ico"><link rel=stylesheet href=" css/site.css ">
<link rel=alternate href=/feed.xml><link rel=canonical href=/canon><link rel=preload href=/f.woff2 as=font>
<style>@import "print.css" print; h1 { background: URL( 'h1.png' ) } /* url(commented.png) */</style>
<script src=/js/app.js></script><script>var s = "<img src=/in-script.png>";</script>
</head><body style="background:url(body.png)">
<img src=logo.png srcset="logo-2x.png 2x, logo-3x.png 3x"><img src="data:image/png;base64,AAAA">
<picture><source srcset="hero.webp 1x, hero@2x.webp 2x"><img src=hero.jpg></picture>
<video poster=poster.jpg></video><a href=/next.html><img src=logo.png></a><img src="#frag">
</body></html>"""


def test_page_requisites_in_document_order_without_links_or_skipped_schemes() -> None:
    got = page_requisites(PAGE)
    assert got.urls == ("/favicon.ico", "css/site.css", "/f.woff2", "print.css", "h1.png", "/js/app.js",
                        "body.png", "logo.png", "logo-2x.png", "logo-3x.png", "hero.webp", "hero@2x.webp",
                        "hero.jpg", "poster.jpg")
    assert not got.cut


def test_embedded_objects_legacy_backgrounds_and_svg_images_but_not_media_or_frames() -> None:
    html = ("<body background=bg.gif><table><tr><td background=' cell.png '>x</td></tr></table>"
            "<input type=IMAGE src=go.png><input type=text src=no.png><embed src=e.svg><object data=o.svg>"
            "</object><video src=v.mp4 poster=p.jpg><source src=s.mp4><track src=t.vtt></video>"
            "<audio src=a.mp3></audio><svg><image href=i1.png /><image xlink:href=i2.png /></svg>"
            "<iframe src=f.html></iframe><frameset><frame src=g.html></frameset>")
    assert page_requisites(html).urls == ("bg.gif", "cell.png", "go.png", "e.svg", "o.svg", "p.jpg", "t.vtt",
                                          "i1.png", "i2.png")


@pytest.mark.parametrize(("value", "urls"), [
    ("a.png", ["a.png"]),
    ("a.png 1x, b.png 2x", ["a.png", "b.png"]),
    ("a.png 100w,b.png 200w", ["a.png", "b.png"]),
    ("c,d.png 1x, e.png", ["c,d.png", "e.png"]),  # a comma inside a URL is the URL's (the standard)
    ("f.png,, g.png", ["f.png", "g.png"]),  # trailing commas end a candidate without descriptors
    ("h.png 1x (a,b), i.png", ["h.png", "i.png"]),  # a comma in parentheses is the descriptor's
    ("  ,  ", []),
    ("", []),
])
def test_srcset_candidates_split_as_the_standard_does(value: str, urls: list[str]) -> None:
    assert srcset_urls(value) == urls


def test_css_references_urls_and_imports_not_comments_data_or_fragments() -> None:
    css = ("@charset 'utf-8'; @IMPORT url(\"base.css\"); @import 'theme.css' screen;\n"
           "/* url(gone.png) */ body { background: url( tile.png ) } .a { mask: url(#clip) }\n"
           ".b { background: url(data:image/png;base64,AAAA) } .c { src: url('f.woff2') format('woff2') }\n"
           ".d { background: url(tile.png) } .e { background: url() }")
    assert css_links(css).urls == ("base.css", "theme.css", "tile.png", "f.woff2")


def test_an_unterminated_comment_ends_the_scan() -> None:
    assert css_links("a { b: url(one.png) } /* c { d: url(two.png) }").urls == ("one.png",)


def test_stylesheet_bytes_are_decoded_with_their_charset_or_as_utf8() -> None:
    assert stylesheet_links("a{b:url(caf\u00e9.png)}".encode("latin-1"), "latin-1").urls == ("caf\u00e9.png",)
    assert stylesheet_links(b"a{b:url(x.png)}", "no-such-charset").urls == ("x.png",)
    assert stylesheet_links(b"\xff\xfe a{b:url(y.png)}", None).urls == ("y.png",)


def test_css_bounds_cut_and_say_so() -> None:
    many = "".join(f"a{{b:url(i{n}.png)}}" for n in range(MAX_CSS_URLS + 5))
    got = css_links(many)
    assert len(got.urls) == MAX_CSS_URLS and got.cut
    long_ref = css_links(f"a{{b:url({'x' * (MAX_HREF_CHARS + 1)})}} c{{d:url(ok.png)}}")
    assert long_ref.urls == ("ok.png",) and long_ref.cut
    late = css_links(" " * MAX_CSS_CHARS + "a{b:url(late.png)}")
    assert late.urls == () and late.cut
    body = b"a{b:url(early.png)}" + b" " * (MAX_CSS_CHARS * 4)
    assert stylesheet_links(body, None).cut


def test_page_requisites_are_bounded() -> None:
    html = "".join(f"<img src=i{n}.png>" for n in range(MAX_REQUISITES + 10))
    got = page_requisites(html)
    assert len(got.urls) == MAX_REQUISITES and got.cut


@pytest.mark.parametrize("hostile", [
    "url(" * 150_000,
    'url("' * 120_000,
    "url('" * 60_000 + 'url("' * 60_000,
    "/*" * 250_000,
    "@import " + " " * 500_000,
    "url( " * 100_000,
    "a{b:url(" + "(" * 500_000,
])
def test_hostile_stylesheets_are_scanned_in_linear_time(hostile: str) -> None:
    """A quadratic scan of these ~500 KB takes minutes; the linear one takes milliseconds. The bound is
    loose enough for a loaded machine and still far below any quadratic scan's time."""
    started = time.process_time()
    got = css_links(hostile)
    assert time.process_time() - started < 5.0
    assert len(got.urls) <= MAX_CSS_URLS


def test_hostile_srcset_is_linear() -> None:
    started = time.process_time()
    assert len(srcset_urls("a " + "(," * 300_000)) == 1
    assert srcset_urls(", " * 300_000) == []
    assert time.process_time() - started < 5.0


CSS_PIECES = st.sampled_from(["url(", "url(\"", "url('", ")", "\"", "'", "/*", "*/", "@import ", "@IMPORT",
                              " ", "\n", "a.png", "#x", "data:x", "(", ",", "\\", "\u00e9", "\x00"])


@given(st.lists(CSS_PIECES, max_size=60).map("".join))
def test_any_stylesheet_gives_bounded_references(css: str) -> None:
    got = css_links(css)
    assert len(got.urls) <= MAX_CSS_URLS and len(set(got.urls)) == len(got.urls)
    assert all(ref and ref == ref.strip() and len(ref) <= MAX_HREF_CHARS and not ref.startswith("#")
               for ref in got.urls)


@given(st.lists(st.sampled_from(["<img src=", "<img srcset='", "<style>", "</style>", "<link rel=icon href=",
                                 "<div style='", "url(", "a.png", " 2x, ", "'", ">", "<script src=", "\x00"]),
                max_size=40).map("".join))
def test_any_document_gives_bounded_requisites(html: str) -> None:
    got = page_requisites(html)
    assert len(got.urls) <= MAX_REQUISITES and all(len(ref) <= MAX_HREF_CHARS for ref in got.urls)
