"""Which page requisites the frontier queues (polecat/frontier/requisites.py rules 1-6), sans-IO, on LMDB
and on the in-memory fake."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from polecat.cluster.ring import Ring
from polecat.config import Config, ScopeConfig
from polecat.frontier.keys import op_key
from polecat.frontier.requisites import KIND, stored_type
from polecat.frontier.routing import Routing
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.writes import Put
from tests.frontier_helpers import Rig, canon

pytestmark = pytest.mark.usefixtures("frontier_backend")

PAGE = canon("http://site.test/docs/page.html")
LOCAL = [canon(f"http://site.test/img/{n}.png") for n in range(4)]
CDN = [canon(f"http://cdn.test/lib/{n}.js") for n in range(3)]


def rig(tmp_path: Path, **scope: Any) -> Rig:
    cfg = Config(scope=replace(ScopeConfig(), mode="host", requisites=True, max_depth=2, **scope))
    r = Rig(tmp_path, cfg=cfg)
    r.frontier.add_seed(PAGE, 0.0)
    return r


def rejected(r: Rig) -> dict[str, int]:
    return dict(r.frontier.stats(0.0).rejected)


def test_requisites_pass_the_scope_mode_and_depth_that_bind_links(tmp_path: Path) -> None:
    r = rig(tmp_path)
    assert r.frontier.admit(CDN, 1, 0.5, 0.0).accepted == 0  # as links: another host, out of scope
    got = r.frontier.admit_requisites(LOCAL + CDN, 9, 0.5, 0.0)  # deeper than max_depth too
    assert got.accepted == len(LOCAL) + len(CDN) and got.outbox == {}
    assert all(r.frontier.is_requisite(u) for u in LOCAL + CDN) and not r.frontier.is_requisite(PAGE)
    assert r.frontier.admit([canon("http://site.test/deep.html")], 9, 0.5, 0.0).accepted == 0
    assert rejected(r) == {"out_of_scope": len(CDN), "too_deep": 1}


def test_requisite_hosts_scope_keeps_them_to_the_scope(tmp_path: Path) -> None:
    r = rig(tmp_path, requisite_hosts="scope")
    assert r.frontier.admit_requisites(LOCAL + CDN, 1, 0.5, 0.0).accepted == len(LOCAL)
    assert r.frontier.admit_requisites([canon("http://site.test/late.png")], 3, 0.5, 0.0).accepted == 0
    assert rejected(r) == {"out_of_scope": len(CDN), "too_deep": 1}


def test_blocks_deny_and_url_length_bind_requisites(tmp_path: Path) -> None:
    r = rig(tmp_path, deny=(r"/2\.png$",), block=("cdn.test",), max_url_length=64)
    r.frontier.block("cdn.test")
    long_url = canon("http://site.test/" + "x" * 80 + ".png")
    assert r.frontier.admit_requisites([*LOCAL, *CDN, long_url], 1, 0.5, 0.0).accepted == len(LOCAL) - 1
    assert rejected(r) == {"denied": 1, "blocked": len(CDN), "url_too_long": 1}


def test_each_requisite_is_queued_once_and_seen_ones_spend_no_cap(tmp_path: Path) -> None:
    r = rig(tmp_path, max_requisites_per_host=len(LOCAL))
    assert r.frontier.admit_requisites(LOCAL, 1, 0.5, 0.0).accepted == len(LOCAL)
    for _ in range(3):  # every page of a site names the same stylesheet and logo
        assert r.frontier.admit_requisites(LOCAL, 1, 0.5, 0.0).accepted == 0
    assert r.frontier.admit_requisites([canon("http://site.test/img/new.png")], 1, 0.5, 0.0).accepted == 0
    assert r.frontier.admit_requisites(CDN, 1, 0.5, 0.0).accepted == len(CDN)  # another host's cap
    assert rejected(r) == {"requisite_host_cap": 1}


def test_page_and_crawl_caps(tmp_path: Path) -> None:
    r = rig(tmp_path, max_requisites_per_page=2, max_requisites=3)
    assert r.frontier.admit_requisites(LOCAL, 1, 0.5, 0.0).accepted == 2  # the first two, in order
    assert all(r.frontier.is_requisite(u) for u in LOCAL[:2])
    # Under the cap before its batch: one page may pass it by its own requisites (rule 4), never more.
    assert r.frontier.admit_requisites(CDN, 1, 0.5, 0.0).accepted == 2
    assert r.frontier.admit_requisites(LOCAL[2:], 1, 0.5, 0.0).accepted == 0
    assert rejected(r) == {"requisite_page_cap": 2 + 1, "requisite_cap": 2}


def test_another_owners_requisites_come_back_for_it(tmp_path: Path) -> None:
    ring = Ring(["w0", "w1", "w2"])
    urls = [canon(f"http://h{n}.test/style.css") for n in range(30)]
    r = rig(tmp_path)
    r.frontier.set_routing(Routing(ring, "w1"))
    got = r.frontier.admit_requisites(urls, 1, 0.5, 0.0)
    mine = [u for u in urls if ring.owner(slice_of(host_key(u))) == "w1"]
    assert 0 < got.accepted == len(mine) < len(urls)
    assert sorted(u for out in got.outbox.values() for u in out) == sorted(set(urls) - set(mine))


def test_requisite_types_are_stored_only_with_requisites_on() -> None:
    on, off = replace(ScopeConfig(), requisites=True), ScopeConfig()
    for mime in ("image/png", "image/svg+xml", "font/woff2", "text/css", "application/javascript",
                 "application/vnd.ms-fontobject"):
        assert stored_type(on, mime) and not stored_type(off, mime)
    assert not stored_type(on, "application/pdf") and not stored_type(on, "video/mp4")


def test_the_caps_hold_for_the_crawl_across_restarts(tmp_path: Path) -> None:
    """Rule 4: each host's count is kept at a commit, so a resumed crawl goes on from it; the URLs queued
    as requisites are this run's only."""
    r = rig(tmp_path, max_requisites_per_host=3, max_requisites=6)
    assert r.frontier.admit_requisites(LOCAL[:2] + CDN[:2], 1, 0.5, 0.0).accepted == 4
    r.raw.commit()
    r.crash()
    r.reopen(10.0)
    assert not r.frontier.is_requisite(LOCAL[0])
    assert r.frontier.admit_requisites(LOCAL[2:3], 1, 0.5, 10.0).accepted == 1  # the host's third
    assert r.frontier.admit_requisites(LOCAL[3:], 1, 0.5, 10.0).accepted == 0
    assert r.frontier.admit_requisites(CDN[2:], 1, 0.5, 10.0).accepted == 1  # the crawl's sixth
    assert r.frontier.admit_requisites([canon("http://cdn2.test/x.css")], 1, 0.5, 10.0).accepted == 0
    assert rejected(r) == {"requisite_host_cap": 1, "requisite_cap": 1}


def test_a_damaged_count_is_counted_from_zero(tmp_path: Path) -> None:
    r = rig(tmp_path, max_requisites_per_host=1)
    r.db.apply([Put("ops", op_key(KIND, host_key(LOCAL[0])), b"not a number")])
    r.raw.commit()
    r.crash()
    r.reopen(10.0)
    assert r.frontier.admit_requisites(LOCAL[:1], 1, 0.5, 10.0).accepted == 1
