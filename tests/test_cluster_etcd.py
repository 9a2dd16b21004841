"""The etcd membership backend against a real etcd (a private one on loopback, see conftest)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from types import SimpleNamespace
from unittest.mock import MagicMock, patch

import aetcd
import pytest

from polecat.clock import SYSTEM_CLOCK
from polecat.cluster.aetcd_client import AetcdClient
from polecat.cluster.auth import hmac_signer, hmac_verifier
from polecat.cluster.etcd import EtcdMembership, KeyEvent, Orphans, members_prefix, owner_key
from polecat.cluster.member_records import MemberRecords
from polecat.cluster.membership import Member
from polecat.cluster.ownership import Release
from polecat.cluster.ring import Ring
from polecat.frontier.slices import SLICES
from polecat.testing.cluster import MemoryEtcd
from polecat.testing.etcd import EtcdServer
from polecat.testing.fakes import FakeClock
from polecat.testing.virtual_time import run_virtual
from tests.async_helpers import ends_when_cancelled

TTL = 2
LEAVER_TTL = 90
"""The lease of the node that leaves gracefully: past the test's own time limit."""
RECORDS = MemberRecords("t", hmac_signer("the secret of the membership tests"),
                        hmac_verifier("the secret of the membership tests"))


class Cuttable(AetcdClient):
    """A real client that can be cut off from etcd: every call then fails, as across a partition."""

    cut = False

    def _check(self) -> None:
        if self.cut:
            raise ConnectionError("cut off from etcd")

    async def keepalive(self, lease: int) -> bool:
        self._check()
        return await super().keepalive(lease)

    async def get_prefix(self, prefix: str) -> tuple[dict[str, bytes], int]:
        self._check()
        return await super().get_prefix(prefix)

    async def get_prefix_leased(self, prefix: str) -> tuple[dict[str, tuple[bytes, int]], int]:
        self._check()
        return await super().get_prefix_leased(prefix)

    async def watch_prefix(self, prefix: str, start_revision: int) -> AsyncIterator[KeyEvent]:
        self._check()
        async for event in super().watch_prefix(prefix, start_revision):
            self._check()
            yield event


async def _until(cond: Callable[[], bool], limit: float, what: str) -> float:
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < limit, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def _node(etcd: EtcdServer, name: str, released: list[frozenset[int]] | None = None,
                ttl: int = TTL) -> EtcdMembership:
    async def on_release(slices: frozenset[int]) -> None:
        if released is not None:
            released.append(slices)

    node = EtcdMembership(Cuttable(etcd.endpoint), "t", Member(name, f"http://127.0.0.{len(name)}:1"),
                          records=RECORDS, ttl=ttl, on_release=on_release)
    await node.start()
    return node


def _settled(nodes: list[EtcdMembership], ids: list[str]) -> Callable[[], bool]:
    ring = Ring(ids)
    return lambda: all(n.leasable() == ring.slices_of(n.self_id) for n in nodes)


def _disjoint(nodes: list[EtcdMembership]) -> bool:
    leased = [n.leasable() for n in nodes]
    return sum(map(len, leased)) == len(frozenset().union(*leased))


async def test_join_and_graceful_leave_move_slices_by_the_ring(etcd_server: EtcdServer) -> None:
    async with asyncio.timeout(30):
        await _join_leave(etcd_server)


async def _join_leave(etcd_server: EtcdServer) -> None:
    released: list[frozenset[int]] = []
    a = await _node(etcd_server, "a")
    # b's lease outlives the test: were its slices taken over by the lease's expiry rather than by its
    # graceful leave, the wait below would time out (a count of seconds a loaded machine cannot break).
    b = await _node(etcd_server, "b", released, ttl=LEAVER_TTL)
    try:
        await _until(_settled([a, b], ["a", "b"]), 15, "a and b to split the slices")
        assert [m.id for m in a.members()] == ["a", "b"] == [m.id for m in b.members()]
        probe = AetcdClient(etcd_server.endpoint)
        kvs, _ = await probe.get_prefix("/t/owner/")
        ring = Ring(["a", "b"])
        assert len(kvs) == SLICES
        assert all(kvs[owner_key("t", s)].decode() == ring.owner(s) for s in range(SLICES))

        views = a.changes()
        assert [m.id for m in await anext(views)] == ["a", "b"]
        c = await _node(etcd_server, "c")
        assert [m.id for m in await asyncio.wait_for(anext(views), 5)] == ["a", "b", "c"]
        while not _settled([a, b, c], ["a", "b", "c"])():
            assert _disjoint([a, b, c])
            await asyncio.sleep(0.01)

        await b.close()  # graceful: exports (on_release) its slices, deletes its keys, revokes its lease
        # b handed over everything it held: to c on the join, the rest on leaving.
        assert frozenset().union(*released) == Ring(["a", "b"]).slices_of("b")
        await _until(_settled([a, c], ["a", "c"]), LEAVER_TTL / 3, "a and c to take over b's slices")
        kvs, _ = await probe.get_prefix("/t/")
        assert "/t/members/b" not in kvs
        await probe.close()
        await c.close()
    finally:
        await a.close()


async def test_a_leave_whose_hand_over_outlasts_half_the_ttl_is_not_fenced_half_way(
        etcd_server: EtcdServer) -> None:
    """etcd rule 5: the lease is renewed until every slice is handed over, so a hand-over that waits
    longer than ``ttl / 2`` (requests in flight, a busy peer) is not fenced half-way (machine rule 8
    would abandon it, and its heirs would restore a rounds-old checkpoint); the member stays flagged
    leaving all that while."""
    async with asyncio.timeout(30):
        a = await _node(etcd_server, "a")
        seen: list[tuple[bool, bool]] = []

        async def slow_hand_over(slices: frozenset[int]) -> None:
            await asyncio.sleep(1.5 * TTL)  # three times the fence's ttl / 2
            record = (await b.registered()).get("b")
            seen.append((b.ownership.fenced(SYSTEM_CLOCK.boottime()), record is not None and record.leaving))

        b = EtcdMembership(Cuttable(etcd_server.endpoint), "t", Member("b", "http://127.0.0.2:1"),
                           records=RECORDS, ttl=TTL, on_release=slow_hand_over)
        await b.start()
        try:
            await _until(_settled([a, b], ["a", "b"]), 15, "a and b to split the slices")
            await b.close()
            assert seen == [(False, True)]
        finally:
            await a.close()


async def test_a_node_cut_off_fences_itself_and_its_slices_move_after_the_lease_expires(
        etcd_server: EtcdServer) -> None:
    a = await _node(etcd_server, "a")
    b = await _node(etcd_server, "b")
    try:
        await _until(_settled([a, b], ["a", "b"]), 15, "a and b to split the slices")
        assert isinstance(b._client, Cuttable)
        b._client.cut = True
        cut_at = time.monotonic()
        fenced_after = None
        while not _settled([a], ["a"])():
            assert _disjoint([a, b])
            if fenced_after is None and not b.leasable():
                fenced_after = time.monotonic() - cut_at
            assert time.monotonic() - cut_at < 4 * TTL, "a never took over b's slices"
            await asyncio.sleep(0.01)
        assert fenced_after is not None and fenced_after <= TTL / 2 + 0.1
        assert time.monotonic() - cut_at >= fenced_after
        b._client.cut = False  # back: b re-registers under a new lease and gets its share again
        await _until(_settled([a, b], ["a", "b"]), 15, "b to come back")
    finally:
        await b.close()
        await a.close()


async def test_etcd_frozen_every_node_stops_leasing_within_half_the_ttl(etcd_server: EtcdServer) -> None:
    a = await _node(etcd_server, "a")
    try:
        await _until(_settled([a], ["a"]), 15, "a to own every slice")
        etcd_server.pause()
        took = await _until(lambda: not a.leasable(), TTL, "a to fence itself")
        assert took <= TTL / 2 + 0.1
        etcd_server.resume()
        await _until(_settled([a], ["a"]), 15, "a to lease again once etcd is back")
    finally:
        etcd_server.resume()
        await a.close()


async def test_a_dead_first_endpoint_is_skipped(etcd_server: EtcdServer) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    client = AetcdClient([dead, etcd_server.endpoint], timeout=1)
    node = EtcdMembership(client, "t", Member("a", "http://127.0.0.1:1"), records=RECORDS, ttl=TTL)
    await node.start()
    try:
        await _until(_settled([node], ["a"]), 15, "a to own every slice through the second endpoint")
        assert client.endpoint == etcd_server.endpoint
    finally:
        await node.close()


class _FakeEtcd:
    """An aetcd.Client stand-in: each call fails while ``down``."""

    transactions = MagicMock()

    def __init__(self, down: bool) -> None:
        self.down, self.calls = down, 0

    def _call(self) -> None:
        self.calls += 1
        if self.down:
            raise ConnectionError("endpoint down")

    async def lease(self, ttl: int) -> SimpleNamespace:
        self._call()
        return SimpleNamespace(id=7)

    async def transaction(self, **_: object) -> tuple[bool, list[object]]:
        self._call()
        return True, []

    async def close(self) -> None:
        pass


async def test_repeatable_calls_try_every_endpoint_and_transactions_are_never_repeated() -> None:
    fakes = iter([_FakeEtcd(True), _FakeEtcd(False), _FakeEtcd(True), _FakeEtcd(False)])
    made: list[_FakeEtcd] = []

    def connect(self: AetcdClient) -> _FakeEtcd:
        made.append(next(fakes))
        return made[-1]

    with patch.object(AetcdClient, "_connect", connect):
        client = AetcdClient(["http://127.0.0.1:1", "http://127.0.0.1:2"])
        assert await client.grant(5) == 7  # the first endpoint fails, the second answers
        assert [f.calls for f in made] == [1, 1] and client.endpoint == "http://127.0.0.1:2"
        made[1].down = True
        with pytest.raises(ConnectionError):  # a claim that fails is not tried again here...
            await client.create_all({"/t/owner/0001": b"a"}, 7)
        assert made[1].calls == 2 and len(made) == 3  # ...but the next call goes to the next endpoint
        assert client.endpoint == "http://127.0.0.1:1"
        with pytest.raises(ConnectionError):  # that one is down too
            await client.create_all({"/t/owner/0001": b"a"}, 7)
        assert await client.create_all({"/t/owner/0001": b"a"}, 7)  # the state machine's retry
        assert [f.calls for f in made] == [1, 2, 1, 1]


async def test_a_cancelled_ownership_loop_ends_even_when_work_arrives_in_the_same_instant() -> None:
    """close() cancels the membership's loops. Work queued a few loop iterations before that cancel must
    not swallow it: ``asyncio.wait_for`` does on Python 3.11 (CPython gh-86296), and the loop then ran on
    after its node had closed (as the hand-off loop did: the worker shutdown hang)."""
    m = EtcdMembership(MagicMock(), "c", Member("n1", "127.0.0.1:1"), records=RECORDS)
    for k in range(6):  # how many loop iterations the cancel comes after the work
        task = asyncio.create_task(m._act_loop())
        try:
            for _ in range(5):
                await asyncio.sleep(0)  # parked, waiting for work
            m._queue([Release(frozenset())])  # nothing to export or delete: no client call
            assert await ends_when_cancelled(task, k), \
                f"the ownership loop ran on after its cancel ({k} iterations after the work)"
        finally:
            task.cancel()


async def test_a_machine_suspended_past_half_its_lease_wakes_fenced() -> None:
    """polecat/clock.py rule 4: lease times are read on a clock that counts suspension. A suspend stops
    the monotonic clock, not the etcd lease: the node must be fenced at once when it wakes, before any
    keepalive tells it the lease is gone."""
    clock = FakeClock()
    node = EtcdMembership(MemoryEtcd(), "t", Member("a", "http://127.0.0.1:1"), ttl=10, clock=clock,
                          records=RECORDS)
    await node.start()
    try:
        await _until(lambda: len(node.leasable()) == SLICES, 15, "a to own every slice")
        clock.suspend(10)  # the machine slept one whole lease: monotonic() did not move
        assert node.leasable() == frozenset() and node.ownership.fenced(clock.boottime())
        assert not node.ownership.fenced(clock.monotonic())  # what a monotonic clock would have said
    finally:
        await node.close()


class RecordWriteLost(MemoryEtcd):
    """Its next keepalive says the lease expired, and the member record written after that fails once
    (a write that timed out on a loaded machine, after the new lease was granted)."""

    expire = False
    lose_record = False

    async def keepalive(self, lease: int) -> bool:
        if self.expire:  # its keys die with it
            self.expire, self.lose_record = False, True
            self.keys = {k: held for k, held in self.keys.items() if held[1] != lease}
            return False
        return await super().keepalive(lease)

    async def put(self, key: str, value: bytes, lease: int) -> int:
        if self.lose_record and key.startswith(members_prefix("t")):
            self.lose_record = False
            raise TimeoutError
        return await super().put(key, value, lease)


async def test_a_re_registration_whose_record_write_failed_is_finished_at_the_next_renewal() -> None:
    """etcd rule 8: after its lease expired (the cut-off test's partition), a node was granted a new
    lease but its member record write failed. Its keepalives then succeeded, so it renewed a lease that
    no member record named for ever: a member to nobody, with no fencing token, it sent no hand-off,
    shipped no checkpoint and handed nothing over, and the URLs only it held were never fetched."""
    etcd = RecordWriteLost()
    node = EtcdMembership(etcd, "t", Member("a", "http://127.0.0.1:1"), ttl=1, records=RECORDS)
    await node.start()
    try:
        await _until(lambda: len(node.leasable()) == SLICES, 15, "a to own every slice")
        first = node.fence
        assert first is not None
        etcd.expire = True
        await _until(lambda: not etcd.expire and not etcd.lose_record, 15, "the expiry and the lost write")
        await _until(lambda: node.fence is not None, 15, "a's member record under its new lease")
        assert node.fence is not None and node.fence.lease > first.lease
        assert etcd.keys[members_prefix("t") + "a"][1] == node.fence.lease
        await _until(lambda: [m.id for m in node.members()] == ["a"] and len(node.leasable()) == SLICES, 15,
                     "a to be a member again and own every slice")
    finally:
        await node.close()


async def test_the_first_call_after_an_etcd_outage_goes_through(etcd_server: EtcdServer) -> None:
    """aetcd_client rule 8: etcd gone for 6 s, then back; meanwhile another connection of the same
    kind stays open and keeps trying (one given up whose close has not ended, as a node's watch's can
    be). The client's first call after etcd's return goes through. With gRPC's shared subchannels its
    new connection got the other's subchannel, whose reconnect backoff had grown to seconds, and failed
    at once with the outage's "Connection refused" for seconds after etcd was back."""
    given_up = AetcdClient(etcd_server.endpoint)._client  # used raw: it never moves to a new connection
    client = AetcdClient(etcd_server.endpoint)
    try:
        await given_up.get_prefix(b"/t/")
        lease = await client.grant(60)
        await asyncio.to_thread(etcd_server.halt)
        for _ in range(60):
            with contextlib.suppress(aetcd.exceptions.ConnectionFailedError):
                await given_up.get_prefix(b"/t/")
            await asyncio.sleep(0.1)
        with pytest.raises(aetcd.exceptions.ConnectionFailedError):
            await client.keepalive(lease)  # down: the client moves to a new connection (rule 2)
        await asyncio.to_thread(etcd_server.start)
        assert await client.keepalive(lease)
    finally:
        await client.close()
        await given_up.close()


class Outage(MemoryEtcd):
    """Keepalives get no answer while ``down``; :attr:`renewed` has the (loop) time of each one that
    went through."""

    down = False

    def __init__(self) -> None:
        super().__init__()
        self.renewed: list[float] = []

    async def keepalive(self, lease: int) -> bool:
        if self.down:
            raise ConnectionError("etcd is down")
        self.renewed.append(asyncio.get_running_loop().time())
        return await super().keepalive(lease)


class LoopClock:
    """A :class:`~polecat.clock.Clock` on the running loop's time (virtual under ``run_virtual``)."""

    def wall(self) -> float:
        return asyncio.get_running_loop().time()

    monotonic = boottime = wall


def test_a_renewal_that_failed_is_tried_again_within_a_twelfth_of_the_lease(
        caplog: pytest.LogCaptureFixture) -> None:
    """etcd rule 9, on virtual time (no machine's load can move it): etcd gone for three leases, then
    back. The node's first renewal comes within ttl / 12 of etcd's return (it came up to ttl / 3 later,
    each try then waiting up to ttl / 3 more: a node on a loaded machine missed the lease a restarted
    etcd gives back, and re-registered); before the outage and after the return it renews every
    ttl / 3, and it says how many tries the outage cost."""
    ttl = 4

    async def outage() -> tuple[float, list[float]]:
        etcd = Outage()
        node = EtcdMembership(etcd, "t", Member("a", "http://127.0.0.1:1"), ttl=ttl, clock=LoopClock(),
                              records=RECORDS)
        await node.start()
        try:
            await asyncio.sleep(10)
            etcd.down = True
            await asyncio.sleep(3 * ttl)
            etcd.down = False
            back = asyncio.get_running_loop().time()
            await asyncio.sleep(ttl)
        finally:
            await node.close()
        return back, etcd.renewed

    with caplog.at_level(logging.INFO, logger="polecat.cluster.etcd"):
        back, renewed = run_virtual(outage())
    before = [t for t in renewed if t < back]
    after = [t for t in renewed if t >= back]
    assert after[0] - back <= ttl / 12 + 1e-6
    assert [b - a for a, b in itertools.pairwise(before)] == pytest.approx([ttl / 3] * (len(before) - 1))
    assert [b - a for a, b in itertools.pairwise(after)] == pytest.approx([ttl / 3] * (len(after) - 1))
    assert len(after) >= 3
    failed = [r for r in caplog.records if "renewal failed: etcd is down" in r.getMessage()]
    assert len(failed) >= 3 * ttl / (ttl / 12) - 1  # a try every ttl / 12 while etcd was gone
    said = [r.getMessage() for r in caplog.records if "failed tries" in r.getMessage()]
    assert said == [f"etcd lease 1 renewed after {len(failed)} failed tries, "
                    f"{after[0] - before[-1]:.2f} s after its last renewal"]


async def test_a_leave_whose_release_fails_goes_on_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """etcd rule 6: a hand-over that fails at the leave (its receiver refused it, etcd went away) is
    logged at WARNING naming the step and counted; the leave still revokes the lease and ends."""
    async def on_release(slices: frozenset[int]) -> None:
        raise ConnectionError("the heir refused the bundle")

    etcd = MemoryEtcd()
    node = EtcdMembership(etcd, "t", Member("a", "http://127.0.0.1:1"), ttl=10, records=RECORDS,
                          on_release=on_release)
    await node.start()
    await _until(lambda: len(node.leasable()) == SLICES, 15, "a to own every slice")
    with caplog.at_level(logging.WARNING, logger="polecat.cluster.etcd"):
        await asyncio.wait_for(node.close(), 10)
    assert node.leave_failures == 1
    assert [r.getMessage() for r in caplog.records] == [
        f"leave of a: could not release {SLICES} slices: ConnectionError('the heir refused the bundle')"]
    kvs, _ = await etcd.get_prefix("/t/members/")
    assert kvs == {}  # the lease was revoked all the same


async def test_a_call_whose_connection_another_call_gave_up_fails_and_is_not_a_cancel(
        etcd_server: EtcdServer) -> None:
    """aetcd_client rule 6: gRPC cancels the calls in flight on a channel that is closed, and a call that
    failed elsewhere (the watch, at an etcd restart) closes the shared one. That reached the caller as a
    CancelledError its task never got: the renew loop, which takes every Exception as "not renewed",
    ended without a word and the node lost its lease with its event loop running (issue 32)."""
    client = AetcdClient(etcd_server.endpoint)
    lease = await client.grant(10)
    etcd_server.pause()  # the keepalive below hangs, as while etcd restarts
    try:
        renewing = asyncio.create_task(client.keepalive(lease))
        await asyncio.sleep(0.3)
        client._failed(client._client, ConnectionError("the watch broke"))  # what a concurrent call does
        # A CancelledError here (what rule 6 forbids) fails the test. Twice, in CI under load, the call
        # answered instead of failing (how, etcd being paused, is not known): an answer is no cancel.
        try:
            await asyncio.wait_for(renewing, 5)
        except ConnectionError as exc:
            assert "closed under it" in str(exc)
    finally:
        etcd_server.resume()
    assert await client.keepalive(lease)  # the next call goes through the new connection
    await client.close()


async def test_a_keepalive_stream_that_ends_with_no_answer_is_a_failed_call_not_an_expired_lease(
        etcd_server: EtcdServer) -> None:
    """aetcd_client rule 7: the other way gRPC ends a call on a connection closed under it is its stream
    ending with no answer; that read as "lease expired" and the node dropped every slice (a CI failure of
    the test above under load)."""
    client = AetcdClient(etcd_server.endpoint)
    lease = await client.grant(10)
    real = client._client

    class EndedStream:  # a connection whose keepalive stream gRPC ended with no reply
        async def refresh_lease(self, lease: int) -> None:
            return None

        async def close(self) -> None:
            pass

    client._client = EndedStream()  # type: ignore[assignment]
    with pytest.raises(ConnectionError, match="closed under it"):
        await client.keepalive(lease)
    assert client._client is not real  # the next call goes through a new connection
    await real.close()
    assert await client.keepalive(lease)
    await client.close()


async def test_the_renew_loop_outlives_a_connection_closed_under_its_keepalive(
        etcd_server: EtcdServer) -> None:
    node = await _node(etcd_server, "a")
    try:
        await _until(lambda: len(node.leasable()) == SLICES, 15, "a to own every slice")
        etcd_server.pause()
        await asyncio.sleep(TTL / 3 + 0.2)  # a keepalive is in flight, hanging
        client = node._client
        assert isinstance(client, AetcdClient)
        client._failed(client._client, ConnectionError("the watch broke"))
        await asyncio.sleep(0.5)
        etcd_server.resume()
        assert node._renewing is not None and not node._renewing.done()
        await _until(lambda: len(node.leasable()) == SLICES, 3 * TTL, "a renewal under the same lease")
    finally:
        etcd_server.resume()
        await node.close()


async def test_slices_a_leave_kept_are_recorded_and_restored_by_whoever_owns_them_next() -> None:
    """etcd rule 7 (ownership rule 12): b leaves alone, keeping every slice: its record outlives its
    lease. a, which never saw b, restores its share from b before claiming it, and takes what it won
    out of b's record; b started again takes the slices it wins out of its own record (its data dir
    has them), not before (a restart cut short must leave the record)."""
    etcd = MemoryEtcd()
    async def orphaned() -> Orphans:
        return Orphans(frozenset(range(SLICES)), 7)

    b = EtcdMembership(etcd, "t", Member("b", "http://127.0.0.1:2"), ttl=10, records=RECORDS,
                       orphaned=orphaned)
    await b.start()
    await _until(lambda: len(b.leasable()) == SLICES, 15, "b to own every slice")
    await asyncio.wait_for(b.close(), 10)
    kvs, _ = await etcd.get_prefix("/t/")
    assert list(kvs) == ["/t/orphans/b"] and Orphans.parse(kvs["/t/orphans/b"]) == Orphans(
        frozenset(range(SLICES)), 7)

    restored: list[dict[str, frozenset[int]]] = []

    async def on_restore(sources: Mapping[str, frozenset[int]]) -> None:
        restored.append(dict(sources))

    a = EtcdMembership(etcd, "t", Member("a", "http://127.0.0.1:1"), ttl=10, records=RECORDS,
                       on_restore=on_restore)
    await a.start()
    try:
        await _until(lambda: len(a.leasable()) == SLICES, 15, "a to own every slice")
        assert restored == [{"b": frozenset(range(SLICES))}]
        kvs, _ = await etcd.get_prefix("/t/orphans/")
        assert kvs == {}  # every slice restored and won: the record is gone
    finally:
        await a.close()
    await etcd.put("/t/orphans/b", Orphans(frozenset({1, 2}), 9).to_bytes(), 0)
    again = EtcdMembership(etcd, "t", Member("b", "http://127.0.0.1:2"), ttl=10, records=RECORDS)
    await again.start()
    try:
        assert again.own_orphans == {1, 2}  # kept in its rounds until it wins them
        await _until(lambda: len(again.leasable()) == SLICES, 15, "b to own every slice again")
        await _until(lambda: not again.own_orphans, 5, "b to take its slices out of its record")
        kvs, _ = await etcd.get_prefix("/t/orphans/")
        assert kvs == {}  # b is back with its data: nobody restores from its record
    finally:
        await again.close()


async def test_slices_a_registered_member_keeps_are_claimed_once_it_handed_them_over() -> None:
    """Ownership rule 13 (etcd rule 7): b is back with its data dir and its orphan record still names
    slices the Ring now gives to a. a claims the rest of its share, not those, until b hands them over
    and takes them out of its record (:meth:`EtcdMembership.handed_over`); a reads the record again
    while it waits, so the claim follows without a member list change."""
    etcd = MemoryEtcd()
    share_a = Ring(["a", "b"]).slices_of("a")
    kept = sorted(share_a)[:8]
    stale = await etcd.grant(10)  # a holder gone by the time a joins: b could not win these back
    for s in kept:
        await etcd.put(owner_key("t", s), b"z", stale)
    await etcd.put("/t/orphans/b", Orphans(frozenset(kept), 3).to_bytes(), 0)
    b = EtcdMembership(etcd, "t", Member("b", "http://127.0.0.1:2"), ttl=10, records=RECORDS)
    await b.start()
    a = EtcdMembership(etcd, "t", Member("a", "http://127.0.0.1:1"), ttl=10, records=RECORDS)
    try:
        await _until(lambda: len(b.leasable()) == SLICES - len(kept), 15, "b to own all but the kept")
        assert b.own_orphans == frozenset(kept)  # not won: still its to hand over
        await a.start()
        await b.resync()  # MemoryEtcd's watch is silent: b learns of a here
        await _until(lambda: a.leasable() == share_a - set(kept), 15, "a to own its share but the kept")
        await etcd.revoke(stale)  # nothing in etcd stops a claim of them now but rule 13
        assert a.ownership.kept(SYSTEM_CLOCK.boottime()) == frozenset(kept)
        await b.handed_over(frozenset(kept[:3]))
        assert b.own_orphans == frozenset(kept[3:])
        await _until(lambda: a.leasable() == share_a - set(kept[3:]), 15, "a to claim the three handed over")
        assert a.ownership.kept(SYSTEM_CLOCK.boottime()) == frozenset(kept[3:])
        await b.handed_over(frozenset(kept[3:]))
        await _until(lambda: a.leasable() == share_a, 15, "a to claim the rest")
        kvs, _ = await etcd.get_prefix("/t/orphans/")
        assert kvs == {}  # b handed every recorded slice over: its record is gone
    finally:
        await a.close()
        await b.close()
