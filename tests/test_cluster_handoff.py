"""Hand-off units: the batch codec, the LMDB outbox and the sender's state machine (no sockets)."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polecat.cluster.batch import (
    Batch,
    HandoffError,
    HandoffUrl,
    decode_batch,
    decode_urls,
    encode_batch,
    encode_urls,
)
from polecat.cluster.handoff import Handoff
from polecat.cluster.link import ClusterLink
from polecat.cluster.membership import Member
from polecat.cluster.outbox import Outbox
from polecat.cluster.receiver import HandoffReceiver, Inbox, Reply
from polecat.cluster.ring import Ring
from polecat.cluster.sender import HandoffSender, Send
from polecat.frontier.slices import slice_of
from polecat.hosts import host_key
from polecat.testing.cluster import FakeMembership, FakeTransport
from tests.async_helpers import ends_when_cancelled
from tests.frontier_helpers import Rig

urls_st = st.lists(st.builds(HandoffUrl, st.text(min_size=1, max_size=80), st.integers(0, 60),
                             st.floats(0, 1e6, allow_nan=False), st.integers(0, 20), st.booleans()),
                   max_size=50)


@given(st.text(min_size=1, max_size=20), st.integers(0, 2**63), urls_st)
def test_batch_round_trips(sender: str, seq: int, urls: list[HandoffUrl]) -> None:
    batch = decode_batch(encode_batch(sender, seq, encode_urls(urls)))
    assert (batch.sender, batch.seq, list(batch.urls)) == (sender, seq, urls)


def test_a_seed_mark_is_a_fifth_item_and_an_entry_of_another_length_is_refused() -> None:
    plain, seed = HandoffUrl("http://a.test/", 1, 0.5), HandoffUrl("http://a.test/", 0, 1.0, seed=True)
    assert msgpack.unpackb(encode_urls([plain, seed])) == [["http://a.test/", 1, 0.5, 0],
                                                           ["http://a.test/", 0, 1.0, 0, 1]]
    for bad in ([["http://a.test/", 1, 0.5]], [["http://a.test/", 1, 0.5, 0, 1, 1]]):
        with pytest.raises(HandoffError, match="does not decode"):
            decode_batch(encode_batch("w0", 1, msgpack.packb(bad)))


def test_a_requisite_mark_is_a_fifth_item_2_and_entries_of_0_2_0_read_as_before() -> None:
    """A requisite is marked ``2``; a release before requisites reads that as no mark (``seed == [1]``), so
    its owner takes the URL for a discovered link; an outbox or batch of 0.2.0 (no mark) reads the same."""
    requisite = HandoffUrl("http://cdn.test/a.png", 3, 0.5, 1, requisite=True)
    assert msgpack.unpackb(encode_urls([requisite])) == [["http://cdn.test/a.png", 3, 0.5, 1, 2]]
    assert decode_urls(encode_urls([requisite])) == (requisite,)
    old = decode_urls(msgpack.packb([["http://a.test/", 1, 0.5, 0], ["http://a.test/s", 0, 1.0, 0, 1]]))
    assert old == (HandoffUrl("http://a.test/", 1, 0.5), HandoffUrl("http://a.test/s", 0, 1.0, seed=True))


def test_batch_refuses_corruption_truncation_version_and_bad_signature() -> None:
    data = encode_batch("w0", 7, encode_urls([HandoffUrl("http://a.test/", 1, 0.5)]))
    flipped = bytearray(data)
    flipped[-3] ^= 0x40
    with pytest.raises(HandoffError, match="checksum"):
        decode_batch(bytes(flipped))
    with pytest.raises(HandoffError, match="header says"):
        decode_batch(data[:-1])
    with pytest.raises(HandoffError, match="shorter"):
        decode_batch(data[:5])
    with pytest.raises(HandoffError, match="magic"):
        decode_batch(b"XXXX" + data[4:])
    with pytest.raises(HandoffError, match="version 9"):
        decode_batch(data[:4] + b"\x09" + data[5:])
    # The signature slot: a signed batch verifies, a tampered or unsigned one does not.
    key = b"secret"

    def sign(b: bytes) -> bytes:
        return key + struct.pack(">I", len(b))

    def verify(b: bytes, sig: bytes) -> bool:
        return sig == sign(b)

    signed = encode_batch("w0", 7, encode_urls([HandoffUrl("http://a.test/", 1, 0.5)]), sign)
    assert decode_batch(signed, verify).seq == 7
    with pytest.raises(HandoffError, match="signature"):
        decode_batch(data, verify)


def test_batch_refuses_a_well_framed_payload_of_the_wrong_shape() -> None:
    import msgpack
    import xxhash

    payload = msgpack.packb(["w0", "not-a-seq", [["u", 1, 1.0, 0]]])
    header = struct.pack(">4sBBIQ", b"PCHB", 1, 0, len(payload), xxhash.xxh3_64_intdigest(payload))
    with pytest.raises(HandoffError, match="wrong type"):
        decode_batch(header + payload)
    payload = msgpack.packb(["w0", 1, [["u", 1]]])
    header = struct.pack(">4sBBIQ", b"PCHB", 1, 0, len(payload), xxhash.xxh3_64_intdigest(payload))
    with pytest.raises(HandoffError, match="does not decode"):
        decode_batch(header + payload)


def _urls(n: int, tag: str = "") -> list[HandoffUrl]:
    return [HandoffUrl(f"http://h.test/{tag}{i}", 1, 1.0) for i in range(n)]


def test_outbox_seals_batches_keeps_them_until_acked_and_survives_reopen(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "ob", batch_urls=10)
    assert box.put("w1", _urls(25)) == [1, 2]  # 25 staged: two full batches and 5 left over
    assert box.backlog() == 25
    assert box.commit() == [("w1", 3)]  # commit seals the rest
    assert box.pending() == {"w1": [1, 2, 3]}
    assert len(decode_batch(encode_batch("w0", 3, box.read("w1", 3))).urls) == 5
    assert box.ack("w1", 1) == 10
    box.put("w2", _urls(3))
    box.close()  # the ack and the staged w2 URLs were not committed: both are replayed
    box = Outbox(tmp_path / "ob", batch_urls=10)
    assert box.pending() == {"w1": [1, 2, 3]}
    assert box.ack("w1", 1) == 10
    box.commit()
    box.close()
    box = Outbox(tmp_path / "ob", batch_urls=10)
    assert box.pending() == {"w1": [2, 3]}
    assert box.put("w1", _urls(10, "x")) == [4]  # numbering continues after what is pending
    box.close()


def test_sender_orders_windows_and_never_forgets_an_unacked_batch() -> None:
    s = HandoffSender(window=2, base_backoff=1.0, max_backoff=4.0)
    for seq in (1, 2, 3):
        s.queued("a", seq)
    s.queued("b", 1)
    plan = s.next(0.0)
    assert set(plan.sends) == {Send("a", 1), Send("a", 2), Send("b", 1)}
    assert s.next(0.0).sends == ()  # window full for a, b's only batch in flight
    s.acked("a", 1)
    assert s.next(0.0).sends == (Send("a", 3),)
    # Failures back off exponentially and keep the batch; busy waits the receiver's delay.
    s.failed("a", 2, 0.0)
    s.failed("a", 3, 0.0)
    assert s.next(0.5).sends == () and s.next(0.5).wake_at == 2.0
    assert s.next(2.0).sends == (Send("a", 2), Send("a", 3))
    s.failed("a", 2, 2.0)
    s.failed("a", 3, 2.0)
    s.failed("b", 1, 0.0)  # b waits 1 s, a (4 failures) the 4 s cap
    plan = s.next(2.0)
    assert plan.sends == (Send("b", 1),) and plan.wake_at == 6.0
    s.busy("b", 1, 2.0, retry_after=0.3)
    assert s.next(2.1).sends == ()
    assert Send("b", 1) in s.next(2.3).sends
    assert s.backlog() == 3
    s.acked("a", 2)
    s.acked("a", 3)
    s.acked("b", 1)
    assert s.backlog() == 0 and s.next(100.0) == type(s.next(0.0))((), None)


def test_inbox_refuses_what_does_not_fit_but_never_starves_a_big_batch() -> None:
    box = Inbox(capacity=100)
    assert box.offer(60)
    assert not box.offer(50)
    assert box.offer(40)
    box.release(100)
    assert box.offer(500)  # larger than the capacity, let in because the inbox is empty
    assert not box.offer(1)
    assert box.refused == 2


class _NoTransport:
    async def post(self, address: str, data: bytes) -> Reply:
        raise AssertionError("nothing is sent in this test")

    async def close(self) -> None:
        pass


def test_link_routes_each_url_to_its_slice_owner_and_bounds_the_backlog(tmp_path: Path) -> None:
    members = [Member(f"w{k}", f"unix:/tmp/w{k}.sock") for k in range(3)]
    box = Outbox(tmp_path / "ob", batch_urls=1000)
    receiver = HandoffReceiver(_never_called)
    link = ClusterLink(FakeMembership("w1", members), Handoff("w1", box, _NoTransport(), {}), receiver,
                       max_backlog=10)
    ring = Ring(["w0", "w1", "w2"])
    urls = [f"http://h{i}.test/p" for i in range(40)]
    mine = link.route(urls, 2, 0.5, 1)
    assert mine == [u for u in urls if ring.owner(slice_of(host_key(u))) == "w1"]
    assert all(link.owns(u) for u in mine)
    others = len(urls) - len(mine)
    assert 0 < len(mine) < len(urls) and link.routed_out == others
    sealed = dict(box.seal_all())
    assert set(sealed) == {"w0", "w2"}  # staged per owner, never for itself
    for peer, seq in sealed.items():
        got = decode_urls(box.read(peer, seq))
        assert {u.url for u in got} == {u for u in urls if ring.owner(slice_of(host_key(u))) == peer}
        assert all((u.depth, u.importance, u.hops) == (2, 0.5, 1) for u in got)
    assert link.backlogged() and link.stats().lease_pauses == 1  # more than 10 URLs unacknowledged
    assert not link.quiet(frontier_idle=True)  # URLs still owed to others: not quiet
    box.close()


def test_a_bound_frontier_admits_by_the_links_latest_ring(tmp_path: Path) -> None:
    members = [Member(f"w{k}", f"unix:/tmp/w{k}.sock") for k in range(3)]
    box = Outbox(tmp_path / "ob", batch_urls=1000)
    link = ClusterLink(FakeMembership("w1", members), Handoff("w1", box, _NoTransport(), {}),
                       HandoffReceiver(_never_called), max_backlog=10**6)
    rig = Rig(tmp_path)
    link.bind(rig.raw)
    urls = [f"http://h{i}.test/p" for i in range(40)]
    admission = rig.frontier.admit(urls, 1, 1.0, 0.0)
    link.stage(admission, 1, 1.0)
    assert admission.accepted == sum(link.owns(u) for u in urls) == rig.frontier.queued
    assert link.routed_out == len(urls) - admission.accepted and set(box.seal_all()) == {("w0", 1), ("w2", 1)}
    link.set_members([members[1]])  # alone: every slice is w1's, and the frontier follows
    assert rig.frontier.admit(urls, 1, 1.0, 0.0).accepted == len(urls) - admission.accepted
    box.close()


async def _never_called(batch: Batch) -> None:
    raise AssertionError(batch)


def test_urls_owed_to_a_member_that_left_go_to_the_new_owners_durably(tmp_path: Path) -> None:
    members = [Member(f"w{k}", f"unix:/tmp/w{k}.sock") for k in range(3)]
    box = Outbox(tmp_path / "ob", batch_urls=8)
    handoff = Handoff("w1", box, _NoTransport(), {})
    link = ClusterLink(FakeMembership("w1", members), handoff, HandoffReceiver(_never_called),
                       max_backlog=10**6)
    urls = [f"http://h{i}.test/p" for i in range(60)]
    link.route(urls, 1, 1.0)
    handoff.commit()  # sealed batches for w0 and w2
    link.route([f"http://h{i}.test/q" for i in range(60)], 1, 1.0)  # and some only staged
    both = urls + [u.replace("/p", "/q") for u in urls]
    owed_w2 = sum(link.ring.owner(slice_of(host_key(u))) == "w2" for u in both)
    assert owed_w2 > 0 and "w2" in box.peers()

    link.set_members([m for m in members if m.id != "w2"])  # w2 leaves: its URLs go to w0 or stay here
    kept: list[str] = []
    moved = handoff.reroute("w2", lambda got: kept.extend(
        url for u in got for url in link.route([u.url], u.depth, u.importance, u.hops)))
    handoff.commit()
    assert moved == owed_w2 and 0 < len(kept) < moved  # some of w2's URLs are w1's own now
    assert "w2" not in box.peers() and "w2" not in box.pending()
    box.close()
    reopened = Outbox(tmp_path / "ob", batch_urls=8)  # durable: w2 owes nothing after a restart either
    assert "w2" not in reopened.pending() and set(reopened.pending()) == {"w0"}
    reopened.close()


async def test_a_cancelled_handoff_loop_ends_even_when_woken_in_the_same_instant(tmp_path: Path) -> None:
    """The worker stops its sending loop by cancelling it. A wake-up (the node's final checkpoint commits
    the outbox) that lands a few loop iterations before the cancel must not swallow it: on Python 3.11
    ``asyncio.wait_for`` did, while a peer's back-off timer was pending, and the loop then waited for
    ever (the rare worker shutdown hang)."""
    for k in range(6):  # how many loop iterations the cancel comes after the wake-up
        box = Outbox(tmp_path / f"ob{k}", batch_urls=1)
        h = Handoff("w0", box, FakeTransport(Reply("error", detail="refused")), {"w1": "unix:/nowhere"})
        h.stage("w1", [HandoffUrl("http://a.test/", 0, 1.0)])
        h.commit()
        task = asyncio.create_task(h.run())
        try:
            for _ in range(20):  # the send fails and the loop parks again, waiting with a back-off timer
                await asyncio.sleep(0)
            assert h.sender.failing("w1")
            h.commit()
            assert await ends_when_cancelled(task, k), \
                f"the hand-off loop ran on after its cancel ({k} iterations after a wake-up)"
        finally:
            task.cancel()
            box.close()


async def test_a_batch_acknowledged_with_a_round_is_held_until_that_checkpoint_then_dropped(
        tmp_path: Path) -> None:
    box = Outbox(tmp_path / "ob", batch_urls=10)
    transport = FakeTransport(Reply("ok", round=3))  # committed; checkpoint round 3 will hold it
    handoff = Handoff("a", box, transport, {"b": "http://b", "c": "http://c"})
    handoff.stage("b", _urls(15))
    handoff.stage("c", _urls(5, "c"))
    handoff.commit()
    sender = asyncio.create_task(handoff.run())
    try:
        assert await handoff.settled(5.0)  # every sealed batch acknowledged: held, not pending
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
    assert transport.posts == {"http://b": 2, "http://c": 1}
    assert box.pending() == {} and box.held_peers() == {"b", "c"}
    assert handoff.backlog() == 0  # held batches do not slow the node (rule 3 of link.py)
    handoff.commit()
    box.close()
    box = Outbox(tmp_path / "ob", batch_urls=10)  # held survives a restart, and is not sent again
    handoff = Handoff("a", box, _NoTransport(), {})
    assert box.pending() == {} and box.held_peers() == {"b", "c"}
    assert box.put("b", _urls(10)) == [3]  # numbering goes on after the held batches
    box.commit()
    box.ack("b", 3)
    assert handoff.release("b", 2) == 0  # b's checkpoint has not reached round 3 yet
    assert handoff.release("b", 3) == 2 and box.held_peers() == {"c"}
    got: list[HandoffUrl] = []
    assert handoff.reroute_held("c", got.extend) == 5  # c died before its checkpoint held them
    assert got == _urls(5, "c") and box.peers() == set()
    handoff.commit()
    box.close()
    box = Outbox(tmp_path / "ob", batch_urls=10)
    assert box.peers() == set() and box.pending() == {}
    box.close()


async def test_settled_is_false_while_a_receiver_does_not_answer(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "ob", batch_urls=10)
    handoff = Handoff("a", box, _NoTransport(), {})  # never run: nothing is acknowledged
    assert await handoff.settled(0.05)  # nothing sealed: settled at once
    handoff.stage("b", _urls(3))
    handoff.commit()
    assert not await handoff.settled(0.05)
    box.close()
