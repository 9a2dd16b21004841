"""Link, meta-robots and text extraction."""

from __future__ import annotations

from polecat.parse.html import parse_html

PAGE = """<!doctype html><html><head><title> The  Title </title>
<base href="/docs/">
<link rel="canonical" href="https://a.test/docs/canonical">
<link rel="stylesheet" href="/style.css">
</head><body>
<p>Hello <b>world</b></p>
<a href="page1">one</a>
<a href="page1">one again</a>
<a href="https://b.test/x" rel="external nofollow">nofollowed</a>
<a href="javascript:void(0)">js</a><a href="mailto:me@a.test">mail</a><a href="data:text/plain,x">data</a>
<a href=" tel:123 ">tel</a><a href="">empty</a><a>no href</a>
<map><area href="/area-target" alt="x"></map>
<script>var hidden = "script text";</script><style>.x{}</style>
<a href="../up#frag">up</a>
</body></html>"""


def test_links_base_and_skips() -> None:
    p = parse_html(PAGE, "https://a.test/index.html")
    assert p.base == "https://a.test/docs/"
    assert p.links == ("page1", "/area-target", "../up#frag")
    assert p.canonical == "https://a.test/docs/canonical"
    assert not p.nofollow and not p.noindex
    assert p.title == "The  Title"


def test_text_excludes_scripts_and_styles() -> None:
    p = parse_html(PAGE, "https://a.test/")
    assert p.text.split()[:5] == ["Hello", "world", "one", "one", "again"]
    assert "script" not in p.text and ".x{}" not in p.text and "\n" not in p.text


def test_meta_robots_nofollow_and_noindex() -> None:
    html = ('<html><head><meta name="ROBOTS" content="NoIndex, nofollow"></head>'
            '<body><a href="/x">x</a></body>')
    p = parse_html(html, "http://a.test/")
    assert p.nofollow and p.noindex and p.links == ()
    none = parse_html('<meta name="polecat" content="none"><a href="/x">x</a>', "http://a.test/")
    assert none.nofollow and none.noindex
    other_bot = parse_html('<meta name="otherbot" content="nofollow"><a href="/x">x</a>', "http://a.test/")
    assert not other_bot.nofollow and other_bot.links == ("/x",)


def test_bad_base_is_ignored_and_garbage_does_not_raise() -> None:
    p = parse_html('<base href="http://[::bad"><a href="x">x</a>', "http://a.test/dir/")
    assert p.base == "http://a.test/dir/"
    for garbage in ("", "<<<>>>", "\x00\x01<a href='\x00'>", "<a href=" + "x" * 100_000):
        parse_html(garbage, "http://a.test/")
