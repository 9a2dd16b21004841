"""Slices move between frontiers whole: export, adopt, release, and routing before dedup (sans-IO)."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from polecat.cluster.ring import Ring
from polecat.config import Config, ScopeConfig
from polecat.errors import FrontierError
from polecat.frontier.bundle import BundleError, SliceBundle
from polecat.frontier.handover import RELEASING
from polecat.frontier.keys import GLOBAL, host_of_row, parse_wire_queue_key, refetch_key
from polecat.frontier.records import Lease, QueuedUrl, UrlRecord, Wait, decode_host
from polecat.frontier.refetch import request_refetch
from polecat.frontier.slices import SLICES, slice_of, slice_prefix
from polecat.writes import Delete, DeleteSlices, Put
from tests.frontier_helpers import Rig, canon, politeness, queued_urls_in

pytestmark = pytest.mark.usefixtures("frontier_backend")  # each test on LMDB and on the in-memory fake

CFG = Config(scope=ScopeConfig(mode="any"), politeness=politeness(rate=2.0))
HOSTS = [f"h{i}.test" for i in range(24)]


def crawl_some(rig: Rig, now: float, pages: int) -> float:
    """Seed every host with 5 URLs, then serve leases until ``pages`` pages were fetched."""
    for h in HOSTS:
        rig.frontier.add_seed(canon(f"http://{h}/"), now)
        rig.frontier.add_many([canon(f"http://{h}/p{i}") for i in range(4)], 1, 0.5, now)
    return serve(rig, now, pages)


def serve(rig: Rig, now: float, pages: int) -> float:
    """Serve leases (robots.txt with a Crawl-delay of 0.75 s) until ``pages`` pages were fetched."""
    fetched = 0
    while fetched < pages:
        got = rig.frontier.lease(now)
        if isinstance(got, Wait):
            assert got.until is not None
            now = got.until
            continue
        assert isinstance(got, Lease)
        if got.kind == "robots":
            rig.complete_robots(got, now, body=b"User-agent: *\nCrawl-delay: 0.75\n")
        else:
            rig.complete(got, now)
            fetched += 1
        now += 0.01
    return now


def drain(rig: Rig, now: float) -> tuple[list[str], float]:
    """Serve every lease until the frontier is idle; returns the page URLs fetched (and the time)."""
    urls: list[str] = []
    last: dict[str, float] = {}
    while True:
        got = rig.frontier.lease(now)
        if isinstance(got, Wait):
            if got.until is None:
                break
            now = got.until
            continue
        if not isinstance(got, Lease):
            break
        assert got.kind == "page", "adopted hosts keep their robots.txt answer"
        assert now >= got.not_before
        if got.host in last:
            assert now - last[got.host] >= 0.75 - 1e-9
        last[got.host] = now
        urls.append(got.url)
        rig.complete(got, now)
        now += 0.01
    return urls, now


def queued_urls(rig: Rig) -> set[str]:
    return set(queued_urls_in(rig.db.items("hosts"), rig.db.items("queue"), rig.raw._table.hosts))


def held(rig: Rig, slices: Iterable[int]) -> int:
    """Records of ``slices`` in the frontier's tables (cross-slice operator controls aside)."""
    return sum(1 for _, key, _ in rig.raw.export_slices(slices, 0.0).records() if not key.startswith(GLOBAL))


def test_round_trip_loses_nothing_fetches_nothing_twice(tmp_path: Path) -> None:
    a = Rig(tmp_path / "a", cfg=CFG)
    now = crawl_some(a, 1000.0, 30)
    before = queued_urls(a)
    assert len(before) == a.frontier.queued == 24 * 5 - 30
    ring = Ring(["a", "b"])
    moving = ring.slices_of("b")
    assert a.frontier.unowned_queued() == {}  # every slice is owned until set_owned
    a.frontier.set_owned(ring.slices_of("a"), now)
    strays = a.frontier.unowned_queued()
    assert set(strays) <= moving and sum(strays.values()) == sum(
        slice_of(canon(u).split("/")[2]) in moving for u in before) > 0
    assert a.frontier.in_flight_in(moving) == 0
    bundle = SliceBundle.read(io.BytesIO(a.frontier.export_slices(moving, now).to_bytes()))
    b = Rig(tmp_path / "b", cfg=CFG)
    b.frontier.set_owned(moving, now)
    adopt_at = now + 0.5
    report = b.frontier.adopt(bundle, adopt_at)
    moved = {u for u in before if slice_of(canon(u).split("/")[2]) in moving}
    assert report.queued == len(moved) > 0 and report.duplicates == 0
    assert held(a, moving) > 0
    decided = a.raw.release_slices(moving)  # a decision: nothing deleted yet
    # Handover rule 7: row by row, each slice ending with its DeleteSlices, the meta row last.
    assert {w.slices for w in decided if isinstance(w, DeleteSlices)} == {frozenset((s,)) for s in moving}
    assert decided[-1] == Delete("meta", RELEASING) and {
        w.table for w in decided if isinstance(w, Delete | Put)} <= {
        "refresh", "due", "fresh", "queue", "hosts", "urls", "priors", "robots", "ops", "claims", "meta"}
    assert held(a, moving) > 0
    a.db.apply(decided)
    assert held(a, moving) == 0 and a.frontier.unowned_queued() == {}
    assert queued_urls(a) == before - moved and queued_urls(b) == moved
    assert a.frontier.queued + b.frontier.queued == len(before)
    # The restart-spacing rule: no adopted host is asked before one interval after adoption.
    first = b.frontier.lease(adopt_at)
    assert isinstance(first, Wait) and first.until is not None and first.until >= adopt_at + 0.75
    fetched_b, _ = drain(b, adopt_at)
    fetched_a, _ = drain(a, now)
    assert sorted(fetched_a + fetched_b) == sorted(before)
    # B knows what A had finished in its slices: those URLs are not accepted again.
    done_on_a = [f"http://{h}/" for h in HOSTS if slice_of(h) in moving]
    for url in done_on_a:
        rec = b.frontier.url_record(canon(url))
        if rec is not None:
            assert b.frontier.add(canon(url), 1, 1.0, adopt_at) == "seen"
    b.frontier.commit()
    b.crash()
    b.reopen(adopt_at + 100)
    assert b.frontier.queued == 0


def test_adopt_skips_urls_already_queued_here(tmp_path: Path) -> None:
    a = Rig(tmp_path / "a", cfg=CFG)
    a.frontier.add_seed(canon("http://x.test/"), 0.0)
    a.frontier.add(canon("http://x.test/1"), 1, 1.0, 0.0)
    b = Rig(tmp_path / "b", cfg=CFG)
    b.frontier.add(canon("http://x.test/1"), 1, 1.0, 0.0)
    report = b.frontier.adopt(a.frontier.export_slices([slice_of("x.test")], 10.0), 10.0)
    assert (report.queued, report.duplicates) == (1, 1)
    assert b.frontier.queued == 2


def test_adopt_drops_urls_queued_here_that_the_exporter_finished(tmp_path: Path) -> None:
    """A node that joins queues its config seeds for the slices it will own; their owner may have
    fetched them long ago. The bundle's finished URLs are dropped from the adopter's queue (they were
    fetched twice in the join test); what the exporter did not finish stays queued, once."""
    a = Rig(tmp_path / "a", cfg=CFG)
    a.frontier.add_seed(canon("http://x.test/"), 0.0)
    a.frontier.add(canon("http://x.test/1"), 1, 1.0, 0.0)
    now = serve(a, 0.0, 1)  # robots.txt, then the seed (depth 0 goes first)
    b = Rig(tmp_path / "b", cfg=CFG)
    b.frontier.add_seed(canon("http://x.test/"), 0.0)  # the joining node's config seed
    b.frontier.add(canon("http://x.test/2"), 1, 1.0, 0.0)  # routed here already: not finished there
    report = b.frontier.adopt(a.frontier.export_slices([slice_of("x.test")], now), now + 1)
    assert (report.queued, report.duplicates) == (1, 1)
    assert b.frontier.queued == 2
    fetched, _ = drain(b, now + 1)
    assert sorted(fetched) == [canon("http://x.test/1"), canon("http://x.test/2")]


def test_release_refuses_while_a_lease_is_in_flight(tmp_path: Path) -> None:
    a = Rig(tmp_path, cfg=CFG)
    a.frontier.add_seed(canon("http://x.test/"), 0.0)
    lease = a.frontier.lease(0.0)
    assert isinstance(lease, Lease)
    with pytest.raises(FrontierError, match="in flight"):
        a.frontier.release_slices([slice_of("x.test")])
    a.complete_robots(lease, 0.0)
    assert held(a, [slice_of("x.test")]) > 0
    a.frontier.release_slices([slice_of("x.test")])
    assert held(a, [slice_of("x.test")]) == 0
    assert a.frontier.queued == 0 and a.frontier.host_state("x.test") is None


def test_a_url_queued_after_the_export_is_not_lost_by_the_release(tmp_path: Path) -> None:
    """handover rule 5: a hand-over exports, sends and awaits the adoption, then releases; a hand-off
    batch taken in meanwhile (a leaving node's peers route to it until it is gone) queued a URL in the
    slice that no bundle held, and the release deleted it: pages never fetched in the join-and-leave
    test. The release is refused until the slice is exported again, and the second bundle has it."""
    a = Rig(tmp_path / "a", cfg=CFG)
    s = slice_of("x.test")
    a.frontier.add_seed(canon("http://x.test/"), 0.0)
    a.frontier.add(canon("http://y.test/"), 1, 1.0, 0.0)  # another slice: not counted, not read
    first = a.frontier.export_slices([s], 1.0)
    assert a.frontier.queued_since_export([s]) == 0
    a.frontier.add(canon("http://x.test/late"), 1, 1.0, 1.0)  # while the bundle is on the wire
    assert a.frontier.queued_since_export([s]) == 1
    with pytest.raises(FrontierError, match="1 URLs queued since their export"):
        a.frontier.release_slices([s])
    assert canon("http://x.test/late") in queued_urls(a)
    b = Rig(tmp_path / "b", cfg=CFG)
    assert b.frontier.adopt(first, 2.0).queued == 1
    again = a.frontier.export_slices([s], 2.0)
    assert a.frontier.queued_since_export([s]) == 0
    report = b.frontier.adopt(again, 2.0)  # merged: the seed is not queued twice
    assert (report.queued, report.duplicates) == (1, 1)
    a.frontier.release_slices([s])
    assert queued_urls(b) == {canon("http://x.test/"), canon("http://x.test/late")}
    assert queued_urls(a) == {canon("http://y.test/")}


def test_a_slice_found_with_nothing_queued_since_its_export_is_not_read_again_by_its_release(
        tmp_path: Path) -> None:
    """handover rule 5: the hand-over asks whether URLs were queued in a chunk since its export, then
    releases it, which asks again; with URLs queued elsewhere meanwhile the first look reads the slice's
    queue rows, and finding none there moves its mark up, so the release reads them no more."""
    a = Rig(tmp_path / "a", cfg=CFG)
    s = slice_of("x.test")
    a.frontier.add_seed(canon("http://x.test/"), 0.0)
    a.frontier.export_slices([s], 1.0)
    a.frontier.add(canon("http://y.test/"), 1, 1.0, 1.0)  # another slice: the frontier's qseq moves
    handover = a.raw.queued_since_export.__self__
    reads: list[bytes] = []

    class Counted:
        def __init__(self, db: Any) -> None:
            self._db = db

        def items(self, table: str, prefix: bytes = b"") -> Any:
            if table == "queue":
                reads.append(prefix)
            return self._db.items(table, prefix)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._db, name)

    handover._db = Counted(handover._db)
    assert a.frontier.queued_since_export([s]) == 0 and reads == [slice_prefix(s)]
    assert a.frontier.queued_since_export([s]) == 0 and reads == [slice_prefix(s)]  # not read again


def test_a_bundle_adopted_during_a_hand_over_of_its_slice_is_not_released_unsent(tmp_path: Path) -> None:
    """handover rule 5: a node handing a slice on to a newer owner adopts, while that bundle is on the
    wire, the same slice from an older owner (whose view of the ring was older): the adopted URLs are
    queued after the export, so the release waits for a second export that carries them (the seed of
    a host never requested in a 3-node bench_claims run)."""
    old, mid, new = (Rig(tmp_path / n, cfg=CFG) for n in ("old", "mid", "new"))
    s = slice_of("x.test")
    old.frontier.add_seed(canon("http://x.test/"), 0.0)
    bundle = mid.frontier.export_slices([s], 1.0)  # mid hands the slice on, empty as yet
    mid.frontier.adopt(old.frontier.export_slices([s], 1.0), 1.0)
    assert mid.frontier.queued_since_export([s]) == 1
    new.frontier.adopt(bundle, 2.0)
    with pytest.raises(FrontierError, match="queued since their export"):
        mid.frontier.release_slices([s])
    new.frontier.adopt(mid.frontier.export_slices([s], 2.0), 2.0)
    mid.frontier.release_slices([s])
    assert queued_urls(new) == {canon("http://x.test/")} and queued_urls(mid) == set()


def test_an_export_is_stamped_with_the_callers_now_and_so_is_reproducible(tmp_path: Path) -> None:
    a = Rig(tmp_path, cfg=CFG)
    for i in range(20):
        a.frontier.add_seed(canon(f"http://h{i}.test/"), 0.0)
    raw = a.frontier.export_slices(range(SLICES), 1234.5).to_bytes()
    assert SliceBundle.read(io.BytesIO(raw)).created == 1234.5
    assert a.frontier.export_slices(range(SLICES), 1234.5).to_bytes() == raw  # nothing else reads a clock


def test_bundle_refuses_corruption_and_truncation(tmp_path: Path) -> None:
    a = Rig(tmp_path, cfg=CFG)
    for i in range(50):
        a.frontier.add_seed(canon(f"http://h{i}.test/"), 0.0)
    raw = a.frontier.export_slices(range(SLICES), 0.0).to_bytes()
    assert SliceBundle.read(io.BytesIO(raw)).records_count >= 150  # seed ops, hosts, queue, seen
    for bad in (raw[:-1], raw[: len(raw) // 2], raw[:40] + bytes([raw[40] ^ 0xFF]) + raw[41:],
                raw[:-3] + bytes([raw[-3] ^ 1]) + raw[-2:], b"XXXX" + raw[4:]):
        with pytest.raises(BundleError):
            SliceBundle.read(io.BytesIO(bad))


def test_fenced_slices_are_not_leased(tmp_path: Path) -> None:
    rig = Rig(tmp_path, cfg=CFG)
    for h in HOSTS:
        rig.frontier.add_seed(canon(f"http://{h}/"), 0.0)
    ring = Ring(["a", "b"])
    rig.frontier.set_owned(ring.slices_of("a"), 0.0)
    leased = set()
    while isinstance(got := rig.frontier.lease(0.0), Lease):
        leased.add(got.host)
    assert leased == {h for h in HOSTS if ring.owner(slice_of(h)) == "a"}
    rig.frontier.set_owned(range(SLICES), 0.0)
    while isinstance(got := rig.frontier.lease(0.0), Lease):
        leased.add(got.host)
    assert leased == set(HOSTS)


def test_a_lease_withdrawn_before_sending_keeps_its_url_and_its_host_leases_again_only_while_owned(
        tmp_path: Path) -> None:
    """A node that lost a host's slice between the lease and the send withdraws the lease
    (polecat/node/lease_runner.py rule 6): nothing is lost, nothing is leased for a slice not owned."""
    rig = Rig(tmp_path / "a", cfg=CFG)
    now = 1000.0
    rig.frontier.add_seed(canon("http://x.test/"), now)
    got = rig.frontier.lease(now)
    assert isinstance(got, Lease) and got.kind == "robots"
    rig.complete_robots(got, now, body=b"User-agent: *\n")
    page = rig.frontier.lease(now + 1)
    assert isinstance(page, Lease) and page.kind == "page"
    queued = queued_urls(rig)
    rig.frontier.set_owned(frozenset(range(SLICES)) - {slice_of("x.test")}, now + 1)  # the fence
    rig.frontier.withdraw(page)
    assert rig.frontier.in_flight_in([slice_of("x.test")]) == 0 and queued_urls(rig) == queued
    assert not isinstance(rig.frontier.lease(now + 5), Lease)  # not owned: not leased
    rig.frontier.set_owned(range(SLICES), now + 5)  # owned again (the slice came back)
    again = rig.frontier.lease(now + 5)
    assert isinstance(again, Lease) and again.url == page.url
    # leasing rule 8: refused while the frontier still counts its slice owned (the node's look at its
    # ownership is yet to come), the host waits until then, not leased again at once
    rig.frontier.withdraw(again, hold_until=now + 5.1)
    held = rig.frontier.lease(now + 5)
    assert isinstance(held, Wait) and held.until == pytest.approx(now + 5.1)
    assert isinstance(rig.frontier.lease(now + 5.1), Lease)


def test_a_restored_host_waits_from_the_hold_and_an_aborted_request_spaces_its_host(tmp_path: Path) -> None:
    """Ownership rule 11: a restore's hosts wait the old owner's abort bound, then their interval
    (``wait_from``). Lease runner rule 7: a request aborted in flight may have reached the server, so
    its host waits one interval from the abort; its URL stays queued."""
    a = Rig(tmp_path / "a", cfg=CFG)
    a.frontier.add_seed(canon("http://x.test/"), 0.0)
    bundle = a.frontier.export_slices([slice_of("x.test")], 0.0)
    b = Rig(tmp_path / "b", cfg=CFG)
    b.frontier.adopt(bundle, 10.0, wait_from=11.0)
    first = b.frontier.lease(10.0)
    assert isinstance(first, Wait) and first.until == pytest.approx(11.0 + 0.5)  # rate 2: 0.5 s
    robots = b.frontier.lease(11.5)
    assert isinstance(robots, Lease) and robots.kind == "robots"
    b.frontier.withdraw(robots, aborted_at=20.0)
    assert b.frontier.in_flight_in([slice_of("x.test")]) == 0 and b.frontier.queued == 1
    again = b.frontier.lease(20.0)
    assert isinstance(again, Wait) and again.until == pytest.approx(20.5)
    assert isinstance(b.frontier.lease(20.5), Lease)


def test_strays_are_counted_per_slice_as_urls_come_and_go_without_a_pass_over_the_hosts(
        tmp_path: Path) -> None:
    """host_table rule 9: what unowned_queued() reads is kept with every change of a queue, and
    counted afresh for the slices a change of the owned ones fences; it always equals a count of the
    queue table."""
    a = Rig(tmp_path / "a", cfg=CFG)
    now = crawl_some(a, 1000.0, 10)
    owned = Ring(["a", "b"]).slices_of("a")

    def counted() -> dict[int, int]:
        by_slice = Counter(slice_of(canon(u).split("/")[2]) for u in queued_urls(a))
        return {s: n for s, n in by_slice.items() if s not in owned}

    a.frontier.set_owned(owned, now)
    assert a.frontier.unowned_queued() == counted() != {}
    a.frontier.add_many([canon(f"http://{h}/later") for h in HOSTS], 1, 0.5, now)  # for both kinds
    assert a.frontier.unowned_queued() == counted()
    now = serve(a, now + 1, 6)  # the owned hosts' URLs are fetched
    assert a.frontier.unowned_queued() == counted()
    other = Rig(tmp_path / "b", cfg=CFG)  # a bundle of a slice not owned here comes in: more strays
    foreign = next(h for h in (f"x{i}.test" for i in range(100)) if slice_of(h) not in owned)
    other.frontier.add_seed(canon(f"http://{foreign}/"), now)
    a.frontier.adopt(other.frontier.export_slices([slice_of(foreign)], now), now)
    assert a.frontier.unowned_queued() == counted() and slice_of(foreign) in counted()
    gone = frozenset(counted())  # shipped away: released
    a.frontier.release_slices(gone)
    assert a.frontier.unowned_queued() == counted() == {}
    a.frontier.set_owned(range(SLICES), now)  # every slice owned: no strays, whatever is queued
    assert a.frontier.unowned_queued() == {}
    a.frontier.set_owned(owned, now)
    assert a.frontier.unowned_queued() == counted()
    now = serve(a, now + 1, 6)  # queues change while those slices stay fenced
    owned = frozenset(sorted(owned)[: len(owned) // 2])  # more fenced; the ones fenced before stay so
    a.frontier.set_owned(owned, now)
    assert a.frontier.unowned_queued() == counted()


def test_hosts_of_a_slice_gained_wait_the_hold_then_an_interval_and_the_others_do_not(tmp_path: Path) -> None:
    """Ownership rule 11 at a claim won: URLs of a slice not owned here a moment ago may be for a host
    its old owner was still talking to; hosts of slices owned all along are not held."""
    a = Rig(tmp_path / "a", cfg=CFG)
    gained, kept = "x.test", next(h for h in (f"k{i}.test" for i in range(100))
                                  if slice_of(h) != slice_of("x.test"))
    for host in (gained, kept):
        a.frontier.add_seed(canon(f"http://{host}/"), 0.0)
    a.frontier.set_owned(frozenset(range(SLICES)) - {slice_of(gained)}, 10.0, wait_from=10.0)
    first = a.frontier.lease(10.0)
    assert isinstance(first, Lease) and first.host == kept  # owned all along: not held
    assert isinstance(a.frontier.lease(10.0), Wait)  # the other is not owned
    a.frontier.set_owned(range(SLICES), 20.0, wait_from=21.0)  # gained, with a 1 s hold
    got = a.frontier.lease(20.0)
    assert isinstance(got, Wait) and got.until == pytest.approx(21.0 + 0.5)  # rate 2: 0.5 s
    later = a.frontier.lease(21.5)
    assert isinstance(later, Lease) and later.host == gained


def test_a_bundle_carries_rows_in_the_form_of_0_3_0_and_the_adopter_packs_them(tmp_path: Path) -> None:
    """Schema 4's compact rows (polecat/frontier/records.py) are converted at the bundle's edge
    (handover_ranges.py): a 0.3.0 node reads what this one exports, and this one stores what it adopts
    compact, so bundle version 1 and the wire stay as they were."""
    a = Rig(tmp_path / "a", cfg=CFG)
    now = crawl_some(a, 1000.0, 30)
    bundle = a.frontier.export_slices(range(SLICES), now)
    rows = [(table, key, value) for table, key, value in bundle.records() if table in ("queue", "urls")]
    assert {table for table, _, _ in rows} == {"queue", "urls"}
    for table, key, value in rows:
        if table == "queue":
            assert QueuedUrl.decode_v3(value).url.startswith(f"http://{parse_wire_queue_key(key)[0]}/")
        else:
            assert UrlRecord.decode(value).encode_v3() == bytes(value)  # a JSON list, as 0.3.0 wrote
    b = Rig(tmp_path / "b", cfg=CFG)
    b.frontier.adopt(bundle, now)
    assert queued_urls(b) == queued_urls(a)
    for _, value in b.db.items("urls"):
        assert value[0] == 1  # packed again


def hosts_in(s: int, n: int) -> list[str]:
    """``n`` host names of slice ``s``."""
    names: list[str] = []
    i = 0
    while len(names) < n:
        if slice_of(f"r{i}.test") == s:
            names.append(f"r{i}.test")
        i += 1
    return names


def slice_rows(rig: Rig, s: int) -> int:
    """Rows of slice ``s`` in the slice-keyed tables and its ``refresh`` range."""
    tables = ("queue", "hosts", "urls", "priors", "robots", "ops", "claims", "refresh", "seen")
    return sum(1 for table in tables for _ in rig.db.items(table, slice_prefix(s)))  # type: ignore[arg-type]


def fill_slice(rig: Rig, s: int, hosts: int, now: float) -> float:
    """Hosts of slice ``s`` with URLs queued and some fetched (refresh rows, URL records), committed."""
    for host in hosts_in(s, hosts):
        rig.frontier.add_seed(canon(f"http://{host}/"), now)
        rig.frontier.add_many([canon(f"http://{host}/p{i}") for i in range(4)], 1, 0.5, now)
    now = serve(rig, now, hosts * 2)
    rig.raw.commit()
    return now


def counters(rig: Rig) -> tuple[int, int, int]:
    return rig.raw.queued, rig.raw._table.known_hosts, rig.raw._table.fetched


def counters_without(rig: Rig, s: int) -> tuple[int, int, int]:
    """:func:`counters` less what the hosts of slice ``s`` count (read from memory and their records)."""
    states = {host_of_row(bytes(k)): decode_host(bytes(v)) for k, v in rig.db.items("hosts", slice_prefix(s))}
    states.update((h, st) for h, st in rig.raw._table.hosts.items() if slice_of(h) == s)
    queued, known, fetched = counters(rig)
    return (queued - sum(st.queued for st in states.values()), known - len(states),
            fetched - sum(st.fetched for st in states.values()))


def queued_urls_of(rig: Rig, s: int) -> set[str]:
    return {u for u in queued_urls(rig) if slice_of(u.split("/")[2]) == s}


@pytest.mark.parametrize("scale", [1, 10])
def test_a_release_step_deletes_at_most_its_budget_of_rows(tmp_path: Path, scale: int) -> None:
    """Handover rule 7: each step of a release deletes at most its budget of rows, whether the slice
    holds about one step's rows or ten; the loop gets a turn between two (the node), and together the
    steps delete every row of the slice and nothing of another."""
    budget = 40
    a = Rig(tmp_path, cfg=CFG)
    s, other = 7, 8
    now = fill_slice(a, s, 2 * scale, fill_slice(a, other, 2, 1000.0))
    kept = (slice_rows(a, other), counters_without(a, s))
    total = slice_rows(a, s)
    assert budget * scale // 2 <= total  # the slice is about ``scale`` steps' worth of rows
    a.raw.export_slices([s], now)
    release = a.db.applied(a.raw.begin_release([s]))
    steps: list[int] = []
    while True:
        step = release.step(budget)
        steps.append(sum(isinstance(w, Delete) for w in step.writes))
        a.db.apply(step.writes)
        if step.value:
            break
        assert len(steps) < 10 * total  # each step goes on: never stuck
    assert max(steps) <= budget and len(steps) >= total // budget
    assert slice_rows(a, s) == 0 and a.db.get("meta", RELEASING) is None
    assert (slice_rows(a, other), counters(a)) == kept
    assert a.raw.release_slices([s]) == [Put("meta", RELEASING, b"7"), DeleteSlices(frozenset((s,))),
                                         Delete("meta", RELEASING)]  # again: nothing left to delete


@pytest.mark.parametrize("cut", [0, 1, 3])
def test_a_release_cut_between_steps_is_finished_by_the_next_open(tmp_path: Path, cut: int) -> None:
    """Handover rule 7: a crash after ``cut`` committed steps of a release (the node commits between
    them) leaves the slice releasing; the open finishes the release, and every slice still owned, its
    counters included, is as it was."""
    a = Rig(tmp_path / "a", cfg=CFG)
    s, other = 7, 8
    now = fill_slice(a, s, 6, fill_slice(a, other, 3, 1000.0))
    kept = (queued_urls_of(a, other), slice_rows(a, other), counters_without(a, s))
    b = Rig(tmp_path / "b", cfg=CFG)
    b.frontier.adopt(a.frontier.export_slices([s], now), now)
    release = a.db.applied(a.raw.begin_release([s]))
    for _ in range(cut):
        assert not a.db.applied(release.step(10))
    a.raw.commit()
    a.crash()
    a.reopen(now)
    assert a.db.get("meta", RELEASING) is None and slice_rows(a, s) == 0
    assert not [h for h in a.raw._table.hosts if slice_of(h) == s]  # taken in by the open, then dropped
    assert (queued_urls(a), slice_rows(a, other), counters(a)) == kept
    a.raw.commit()
    a.crash()
    a.reopen(now)
    assert (queued_urls(a), slice_rows(a, other), counters(a)) == kept


def test_a_releasing_slice_takes_no_url_until_its_release_is_done(tmp_path: Path) -> None:
    """Handover rule 7: while a release is under way, a URL of its slice is refused with an error before
    anything changes (a hand-off batch is sent again), its bundle is not adopted and its due URLs stay
    due; once it is done, the URL is queued (a stray, shipped to its owner)."""
    a = Rig(tmp_path / "a", cfg=CFG)
    s = 7
    now = fill_slice(a, s, 2, 1000.0)
    host = hosts_in(s, 3)[2]
    bundle = a.frontier.export_slices([s], now)
    release = a.db.applied(a.raw.begin_release([s]))
    a.db.apply(release.step(10).writes)
    before = (queued_urls(a), counters(a))
    with pytest.raises(FrontierError, match="being released"):
        a.frontier.add(canon(f"http://{host}/x"), 1, 1.0, now)
    with pytest.raises(FrontierError, match="being released"):
        a.frontier.add_seeds([canon(f"http://{host}/")], now)
    with pytest.raises(FrontierError, match="being released"):
        a.frontier.add_many([canon(f"http://{host}/y")], 1, 1.0, now)
    with pytest.raises(FrontierError, match="being released"):
        a.frontier.adopt(bundle, now)
    with pytest.raises(FrontierError, match="being released already"):
        a.raw.begin_release([s])
    assert a.frontier.requeue_due(now + 10**9)[0] == 0
    assert (queued_urls(a), counters(a)) == before
    while not a.db.applied(release.step(10)):
        pass
    assert a.frontier.add(canon(f"http://{host}/x"), 1, 1.0, now) == "accepted"
    assert queued_urls(a) == {canon(f"http://{host}/x")}


def a_url_fetched_in(rig: Rig, s: int) -> str:
    return next(UrlRecord.decode(raw).url for _, raw in rig.db.items("urls", slice_prefix(s)))


def repair_asks_again(rig: Rig, url: str, now: float) -> None:
    """What ``polecat store repair`` does to a stopped node's frontier (refetch.py rule 1), then its open."""
    rig.raw.commit()
    rig.crash()
    if rig.backend == "memory":
        rig.memory.apply([Put("ops", refetch_key(url), url.encode())])
        rig.memory.commit()
    else:
        assert request_refetch(rig.path / "frontier", [url]) == 1
    rig.reopen(now)


ALL_BUT_7 = frozenset(range(SLICES)) - {7}


def slice_7_handed_over(tmp_path: Path) -> tuple[Rig, Rig, str, float]:
    """Rig ``a`` fetched pages of slice 7, rig ``b`` adopted it, ``a`` owns the others; and a URL of it
    ``a`` fetched."""
    a = Rig(tmp_path / "a", cfg=CFG)
    now = fill_slice(a, 7, 3, 1000.0)
    b = Rig(tmp_path / "b", cfg=CFG)
    b.frontier.adopt(a.frontier.export_slices([7], now), now)
    a.raw.set_owned(ALL_BUT_7, now)
    return a, b, a_url_fetched_in(a, 7), now


def test_a_refetch_request_for_a_url_of_a_slice_owned_elsewhere_goes_with_its_slice(tmp_path: Path) -> None:
    """Intake rule 5: a member's store repair asks again for a URL of a slice handed over since (its
    record is with the slice's owner now): the request is kept, its slice counts as a stray, the next
    hand-over carries it and the owner queues the URL again; the release here then drops it."""
    a, b, url, now = slice_7_handed_over(tmp_path)
    s = 7
    a.db.apply(a.raw.release_slices([s]))
    assert url not in queued_urls(b)
    repair_asks_again(a, url, now)
    a.raw.set_owned(ALL_BUT_7, now)
    assert a.raw.unowned_queued() == Counter({s: 1})  # a stray: the cluster hands its slice over
    a.raw.commit()
    a.crash()
    a.reopen(now)  # kept across a restart
    a.raw.set_owned(ALL_BUT_7, now)
    assert a.raw.unowned_queued() == Counter({s: 1})
    b.frontier.adopt(a.frontier.export_slices([s], now), now)
    assert url in queued_urls(b)  # the owner held its record: fetched again there
    a.db.apply(a.raw.release_slices([s]))
    assert a.raw.unowned_queued() == Counter()
    a.raw.commit()
    a.crash()
    a.reopen(now)
    a.raw.set_owned(ALL_BUT_7, now)
    assert a.raw.unowned_queued() == Counter() and a.db.get("ops", refetch_key(url)) is None


def test_a_refetch_request_found_by_an_open_that_finishes_a_release_goes_to_the_slices_owner(
        tmp_path: Path) -> None:
    """Intake rule 5 with handover rule 7: a repair ran while the node was down mid-release (its slice
    exported and adopted before, the request not in that bundle): the open finishes the release, which
    deletes the slice's ``ops`` rows, and the request is written again after it, a stray for the owner."""
    a, b, url, now = slice_7_handed_over(tmp_path)
    s = 7
    release = a.db.applied(a.raw.begin_release([s]))
    assert not a.db.applied(release.step(10))
    repair_asks_again(a, url, now)  # the open finishes the release
    assert a.db.get("meta", RELEASING) is None and a.db.get("ops", refetch_key(url)) is not None
    a.raw.set_owned(ALL_BUT_7, now)
    assert a.raw.unowned_queued() == Counter({s: 1})
    b.frontier.adopt(a.frontier.export_slices([s], now), now)
    assert url in queued_urls(b)


def test_a_refetch_request_for_a_url_queued_here_is_done_with_and_one_fetched_is_queued_again(
        tmp_path: Path) -> None:
    """Intake rule 5: a URL still queued (seen here, no record) is fetched anyway, so its request goes;
    a URL fetched here is queued again; neither is kept for another member."""
    a = Rig(tmp_path / "a", cfg=CFG)
    s = 7
    now = fill_slice(a, s, 3, 1000.0)
    fetched = a_url_fetched_in(a, s)
    waiting = sorted(queued_urls_of(a, s))[0]
    repair_asks_again(a, fetched, now)
    repair_asks_again(a, waiting, now)
    assert {fetched, waiting} <= queued_urls(a)
    assert a.db.get("ops", refetch_key(fetched)) is None and a.db.get("ops", refetch_key(waiting)) is None
    a.raw.set_owned(ALL_BUT_7, now)
    assert a.raw.unowned_queued() == Counter({s: len(queued_urls_of(a, s))})  # its queued URLs only
