"""Smoke test of benchmarks/bench_requisites.py on a tiny doc site whose page names a stylesheet on another
host (as real doc sites name a web font): the crawls fetch the site's own requisites and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_requisites import main


def test_bench_requisites_fetches_the_sites_requisites_and_asks_for_no_other_host(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "index.html").write_text(
        '<html><head><link rel=stylesheet href="style.css">'
        '<link rel=stylesheet href="http://fonts.offsite.test/css?family=x"></head>'
        '<body><a href="sub/a.html">a</a><img src="logo.png"></body></html>')
    (docs / "sub" / "a.html").write_text('<p><a href="../index.html">up</a></p>')
    (docs / "style.css").write_text("p { background: url(bg.png) }")
    (docs / "logo.png").write_bytes(b"PNG")
    (docs / "bg.png").write_bytes(b"PNG2")
    main([str(docs), "--rate", "50"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    without, with_ = (next(r for r in lines if r.get("requisites") is flag) for flag in (False, True))
    assert (without["requests"], without["requisite_requests"]) == (2, 0)
    # style.css, its url(bg.png) and logo.png; the offsite stylesheet is not fetched, its name not asked
    assert (with_["requests"], with_["requisite_requests"], with_["requisites_stored"]) == (5, 3, 3)
    assert with_["responses_wrong"] == 0 and with_["urls_asked_twice"] == 0
    assert without["names_asked"] == with_["names_asked"] == []
