"""The seeds batch path (frontier/intake.py rule 7, host_table.py rule 10, polecat/writes.py rule 5) writes
the rows the per-seed path wrote, a ``Put`` a row, and decides the same."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from frontier_helpers import Rig, canon
from hypothesis import example, given, settings
from hypothesis import strategies as st

from polecat.config import Config, FrontierConfig, ScopeConfig
from polecat.frontier.intake import ACCEPTED, SEEN, Intake
from polecat.frontier.keys import SEED_HOST, host_row, op_key, queue_key, ready_key, url_key
from polecat.frontier.politeness import HostState
from polecat.frontier.records import QueuedUrl, encode_host
from polecat.frontier.slices import SLICES, slice_of
from polecat.hosts import host_key
from polecat.writes import Decided, Put, PutRows, Write, expand

CFG = Config(scope=ScopeConfig(mode="host", max_url_length=40, max_queue_per_host=2),
             frontier=FrontierConfig(working_hosts=100))


def per_seed(intake: Intake, urls: list[str], now: float, importance: float) -> Decided[list[str]]:
    """``Intake.add_seeds`` as it was before the batch path (bdca80c): each seed's keys, rows and
    ``Put`` s made one at a time; the reference the batch path is held to (with the seed marks of
    intake.py rule 9: in the records that queue a seed, and after the batch in the others)."""
    table, db = intake._table, intake._db
    out: list[Write] = []
    answers: list[str] = []
    fresh: dict[str, int] = {}
    todo: list[tuple[int, str, HostState | None]] = []
    found: dict[str, HostState | None] = {}
    for url in urls:
        host = host_key(url)
        peeked = table.peek(host)
        found.setdefault(host, peeked)
        intake._scope.add_seed_host(host)
        reason = intake._refuse(url, host, peeked, 0, True)
        if reason is None and url in fresh:
            reason = SEEN
        elif reason is None:
            fresh[url] = len(answers)
            todo.append((len(answers), host, peeked))
        else:
            intake.rejected[reason] += 1
        answers.append(reason or ACCEPTED)
    keys = [url_key(url, host) for url, (_, host, _) in zip(fresh, todo, strict=True)]
    marks = intake._seen.mark_many(db.getter("seen"), keys) if keys else []
    cold: dict[str, list[str]] = {}
    for url, (i, host, peeked), key, new in zip(fresh, todo, keys, marks, strict=True):
        if not new:
            answers[i] = SEEN
            continue
        out.append(Put("seen", key, b""))
        if peeked is None and host not in table.hosts and (host in cold or not table.has_room(host)):
            cold.setdefault(host, []).append(url)
        else:
            held = table.held(host, peeked)
            held.seed = True
            table.enqueue(url, host, 0, importance, now, out, st=held, shape=False)
    for host, seeds in cold.items():
        num = table.new_num()
        out.append(Put("ready", ready_key(now, host), b""))
        for url in seeds:
            table.qseq += 1
            qkey = queue_key(host, num, importance, 0, table.qseq)
            out.append(Put("queue", qkey, QueuedUrl(url, 0, importance).encode(host)))
            table.count_band(qkey, 1)
        out.append(Put("hosts", host_row(host), encode_host(HostState(next_allowed=now, queued=len(seeds),
                                                                      num=num, seed=True))))
        if table.fenced:
            table.queued_in[slice_of(host)] += len(seeds)
        table.known_hosts += 1
        table.with_queue += 1
        table.queued += len(seeds)
        table.accepted += len(seeds)
        table.db.pending += len(seeds)
        table.cold_rows += 1
        table.cold_head = now if table.cold_head is None else min(table.cold_head, now)
    for host, peeked in found.items():
        if host not in cold:
            table.mark_seed(host, peeked, host_row(host), out)
    intake.seen_again += answers.count(SEEN)
    return Decided(answers, out)


def by_table(writes: list[Write]) -> dict[str, list[tuple[bytes, bytes]]]:
    """Each table's rows put, in order (what a decision leaves in its tables, however it groups them)."""
    rows: dict[str, list[tuple[bytes, bytes]]] = {}
    for w in expand(writes):
        assert isinstance(w, Put)  # a seeds batch deletes nothing
        rows.setdefault(w.table, []).append((w.key, w.value))
    return rows


TABLES = ("ops", "seen", "queue", "hosts", "ready", "resident")


def state(rig: Rig) -> tuple[object, ...]:
    """What a later decision reads: the tables, the table's counters and memory, the intake's counts."""
    table, intake = rig.raw._table, rig.raw._intake
    tables = {name: list(rig.db.items(name)) for name in TABLES}
    counters = (table.known_hosts, table.with_queue, table.queued, table.accepted, table.qseq, table.hseq,
                table.cold_rows, table.cold_head, rig.db.pending, dict(table.bands or {}))
    memory = {host: (st.queued, st.num, st.next_allowed, st.seed) for host, st in table.hosts.items()}
    return (tables, counters, memory, dict(intake.rejected), intake.seen_again, rig.seen.stats(),
            intake._scope._domains, list(table.queued_in))


BLOCKED = 90


def name(i: int) -> str:
    """Host ``i`` of the seeds drawn: blocked, a ``www.`` name (its domain is the rest: domain mode), or
    plain."""
    return "b.blocked.test" if i == BLOCKED else f"www.h{i}.t" if i % 5 == 0 else f"h{i}.t"


SEEDS = st.tuples(st.sampled_from(["http", "https"]), st.one_of(st.integers(0, 3), st.integers(74, BLOCKED)),
                  st.sampled_from(["/", "/a", "/b?q=1", "/" + "x" * 40])).map(
    lambda s: canon(f"{s[0]}://{name(s[1])}{s[2]}"))


@settings(max_examples=80, deadline=None)
@example(batches=[[canon("http://h88.t/"), canon("http://h88.t/a"), canon("https://h89.t/")]], importance=0.3,
         known=80, mode="host", blocks=True, fenced=False)  # a host new and filed cold with two seeds
@example(batches=[[canon("http://h88.t/"), canon("http://h88.t/a"), canon("https://h86.t/")]], importance=1.0,
         known=80, mode="host", blocks=False, fenced=True)  # the same with no block, a slice fenced
@example(batches=[[canon("http://h86.t/"), canon("https://h87.t/a"), canon("http://www.h85.t/")]] * 2,
         importance=1.0, known=80, mode="domain", blocks=False, fenced=False)  # rule 8: new hosts, filed cold
@example(batches=[[canon("http://h86.t/"), canon("https://h87.t/a"), canon("http://www.h85.t/")]],
         importance=0.3, known=60, mode="host", blocks=False, fenced=False)  # rule 8, memory with room
@example(batches=[[canon("http://h86.t/"), canon("http://h87.t/" + "x" * 40)]], importance=1.0, known=80,
         mode="host", blocks=False, fenced=False)  # rule 8 with a seed refused: h86 filed cold, h87 marked
@given(batches=st.lists(st.lists(SEEDS, max_size=14), min_size=1, max_size=4),
       importance=st.sampled_from([1.0, 0.3]), known=st.integers(60, 85),
       mode=st.sampled_from(["host", "domain"]), blocks=st.booleans(), fenced=st.booleans())
def test_the_batch_path_writes_and_decides_as_the_per_seed_path(batches: list[list[str]], importance: float,
                                                                 known: int, mode: str, blocks: bool,
                                                                 fenced: bool) -> None:
    """Known hosts (in memory and filed cold), a full host queue, duplicates in and across batches, too
    long and blocked URLs (and no block at all), new hosts before and past the working set's three
    quarters (75 of 100 here: host_table.py rule 10), an importance off the rank's grid, a fenced slice
    (the URLs queued per slice counted, host_table.py rule 9): the same answers, the same rows in each
    table, the same state (the seeds' domains in the scope, in domain mode)."""
    cfg = replace(CFG, scope=replace(CFG.scope, mode=mode))
    rigs = [Rig(Path("/nonexistent"), cfg=cfg, backend="memory") for _ in range(2)]
    for rig in rigs:
        if blocks:
            rig.frontier.block("*.blocked.test")
        if fenced:
            rig.frontier.set_owned(set(range(SLICES)) - {slice_of("h3.t"), slice_of("h89.t")}, 0.0)
        rig.frontier.add_seeds([canon(f"http://h{i}.t/") for i in range(known)] + [canon("http://h0.t/full")],
                               0.0)
        rig.frontier.commit()
    batch, single = rigs
    for n, urls in enumerate(batches):
        now = 1.0 + n
        got = batch.raw.add_seeds(urls, now, importance)
        want = per_seed(single.raw._intake, urls, now, importance)
        assert got.value == want.value
        assert by_table(got.writes) == by_table(want.writes)
        for rig, decided in ((batch, got), (single, want)):
            rig.db.apply(decided.writes)
        assert state(batch) == state(single)
        for rig in rigs:
            rig.frontier.commit()
        assert state(batch) == state(single)


def test_a_batch_of_new_hosts_is_decided_with_no_look_at_each_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """intake.py rule 8: a batch of hosts new to the table, none repeated, no block set, memory with room for
    5 new hosts (70 of the 75 a full working set is cut to: host_table.py rule 10): no seed asked whether it
    is refused or has room in memory, no seed-host row looked up, one lookup of each host's record; every
    seed accepted, the first 5 taken into memory and the others filed cold in one call, the rows those of
    the per-seed path."""
    rigs = [Rig(Path("/nonexistent"), cfg=CFG, backend="memory") for _ in range(2)]
    for rig in rigs:
        rig.frontier.add_seeds([canon(f"http://h{i}.t/") for i in range(70)], 0.0)
        rig.frontier.commit()
    batch, single = rigs
    urls = [canon(f"http://n{i}.t/") for i in range(50)]
    want = per_seed(single.raw._intake, urls, 1.0, 1.0)
    intake, table = batch.raw._intake, batch.raw._table
    looks: Counter[str] = Counter()

    def counted(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            looks[name] += 1
            return call(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(intake, "_refuse", counted("refuse", intake._refuse))
    monkeypatch.setattr(table, "has_room", counted("has_room", table.has_room))
    monkeypatch.setattr(table, "enqueue", counted("enqueue", table.enqueue))
    monkeypatch.setattr(table, "enqueue_cold", counted("enqueue_cold", table.enqueue_cold))
    getter = batch.db.getter
    monkeypatch.setattr(batch.db, "getter", lambda name: counted(name, getter(name)))
    got = batch.raw.add_seeds(urls, 1.0)
    assert got.value == [ACCEPTED] * 50
    assert by_table(got.writes) == by_table(want.writes)
    assert looks == Counter({"hosts": 50, "enqueue": 5, "enqueue_cold": 1})
    assert len(table.hosts) == 75


def test_put_rows_are_their_puts_in_order() -> None:
    """writes.py rule 5: a ``PutRows`` is its rows' ``Put`` s, where it stands among the other writes."""
    writes: list[Write] = [Put("ops", b"a", b""), PutRows("queue", [b"k1", b"k2"], [b"v1", b"v2"]),
                           Put("meta", b"m", b"1")]
    assert list(expand(writes)) == [Put("ops", b"a", b""), Put("queue", b"k1", b"v1"),
                                    Put("queue", b"k2", b"v2"), Put("meta", b"m", b"1")]


def test_seed_hosts_are_marked_in_their_records_and_a_resume_writes_no_mark_again() -> None:
    """intake.py rule 9: a seed's host is marked in its record, no ``ops`` row; the host of a refused seed
    has no record, and keeps a ``seedhost`` row instead (host_table.py rule 26: not a host this frontier
    knows); the seeds of a resume, their hosts marked already, write no row; the scope (host mode) holds
    both hosts, in memory or not."""
    rig = Rig(Path("/nonexistent"), cfg=CFG, backend="memory")
    urls = [canon("http://h1.t/"), canon("http://h2.t/" + "x" * 40)]  # the second too long: refused
    first = rig.frontier.add_seeds(urls, 0.0)
    assert first == [ACCEPTED, "url_too_long"]
    rig.frontier.commit()
    table = rig.raw._table
    st = table.peek("h1.t")
    assert st is not None and st.seed and st.queued == 1
    assert table.peek("h2.t") is None and table.known_hosts == 1
    assert [bytes(k) for k, _ in rig.db.items("ops")] == [op_key(SEED_HOST, "h2.t")]
    rig.raw._table.forget(["h1.t"])  # out of memory: the scope reads its row
    assert "h1.t" in rig.raw._intake._scope._hosts and "h2.t" in rig.raw._intake._scope._hosts
    assert "h3.t" not in rig.raw._intake._scope._hosts
    again = rig.raw.add_seeds(urls, 1.0)
    assert again.value == [SEEN, "url_too_long"]
    assert "hosts" not in by_table(again.writes) and "ops" not in by_table(again.writes)


def test_another_members_seed_host_is_kept_by_a_row_not_counted_as_a_host() -> None:
    """host_table.py rule 26: a seed host another member queues (a ``--workers N`` crawl's, each worker
    learns every seed host) gets a ``seedhost`` row here, written once, and no record: it is no host this
    frontier knows (``scope.max_hosts``, ``polecat status``, which sums the workers' counts)."""
    rig = Rig(Path("/nonexistent"), cfg=CFG, backend="memory")
    first = rig.raw.add_scope_host("other.t")
    assert first == [Put("ops", op_key(SEED_HOST, "other.t"), b"")]
    rig.db.apply(first)
    assert rig.raw.add_scope_host("other.t") == []
    table = rig.raw._table
    assert table.peek("other.t") is None and table.known_hosts == 0 and list(rig.db.items("hosts")) == []
    assert table.is_seed("other.t") and not table.is_seed("else.t")
    assert rig.frontier.add(canon("http://other.t/a"), 1, 0.5, 1.0) == ACCEPTED
    st = table.peek("other.t")  # the host now queued: a record of its own, the row still marks it
    assert st is not None and table.known_hosts == 1 and table.is_seed("other.t")
