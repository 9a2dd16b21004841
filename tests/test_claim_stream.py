"""Claim frames between nodes on a stream (polecat/cluster/claimstream.py), over real loopback sockets:
delivery on one stream, a stream cut mid-frame (frames alone, and two members' claims), a peer of 0.3.0
without the stream, forged requests."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from polecat.cluster.auth import AUTH_HEADER, RequestAuth, hmac_signer, hmac_verifier, request_proof
from polecat.cluster.claimlink import ContentClaims
from polecat.cluster.claims import Claim
from polecat.cluster.claimstream import (
    RECONNECT,
    STREAM_PATH,
    FrameHandler,
    StreamServer,
    StreamTransport,
    encode_request,
    open_reply,
)
from polecat.cluster.claimwire import decode, encode_claims
from polecat.cluster.receiver import Reply
from polecat.cluster.ring import Ring
from polecat.cluster.transport import PATH, HttpTransport, read_body
from polecat.cluster.wire import RELEASE_HEADER, THIS, WIRE_HEADER
from polecat.store.base import FetchRecord
from polecat.testing.fakes import FakeClock, MemoryPageStore

SECRET = "stream-secret"
SIGN, VERIFY = hmac_signer(SECRET), hmac_verifier(SECRET)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _frame(seq: int) -> bytes:
    """A claim frame of member n1 naming one page, signed with the cluster secret."""
    claim = Claim(seq, hashlib.sha256(str(seq).encode()).digest(), f"http://a.test/{seq}", 1.0e9)
    return encode_claims("n1", [claim], SIGN)


class Member:
    """The receiving side of a node: ``POST /handoff`` as polecat/processes/machine.py answers claim frames,
    and, unless ``stream`` is False (a node of 0.3.0), the claims stream. ``got`` counts each claim seq
    taken, ``paths`` what it came by."""

    def __init__(self, clock: FakeClock, *, stream: bool = True) -> None:
        self.clock = clock
        self.frames: FrameHandler | None = None
        """What takes the frames (a member's ContentClaims.receive); None: they are counted in ``got``."""
        self.address = f"http://127.0.0.1:{_free_port()}"
        self.auth = RequestAuth(VERIFY, self.address, sign=SIGN)
        self.refused = 0
        self.server = StreamServer(self.auth, SIGN, VERIFY, clock=clock, on_refused=self._refused)
        self.stream = stream
        self.got: Counter[int] = Counter()
        self.paths: Counter[str] = Counter()
        self.openings = 0
        self.runner: web.AppRunner | None = None

    def _refused(self) -> None:
        self.refused += 1

    async def receive(self, data: bytes) -> Reply:
        if self.frames is not None:
            return await self.frames(data)
        frame = decode(data, VERIFY)  # the frame's own signature, as ContentClaims.receive checks it
        self.got.update(c.seq for c in frame.claims)
        return Reply("ok")

    async def _handoff(self, request: web.Request) -> web.Response:
        try:
            data = await read_body(request, 1 << 20, self.auth, self.clock)
        except web.HTTPUnauthorized:
            self.refused += 1
            raise
        self.paths["http"] += 1
        await self.receive(data)
        return web.Response(headers=self.auth.ack(PATH, request.headers.get(AUTH_HEADER, "")))

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        self.openings += 1

        async def counted(data: bytes) -> Reply:
            self.paths["stream"] += 1
            return await self.receive(data)

        return await self.server.serve(request, counted)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(PATH, self._handoff)
        if self.stream:
            app.router.add_get(STREAM_PATH, self._stream)
        app.on_shutdown.append(lambda _: self.server.close())
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", int(self.address.rsplit(":", 1)[1])).start()

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


class CuttingProxy:
    """A loopback TCP relay to ``upstream``; :meth:`cut_next` makes it forward half of the next chunk a
    client sends, then drop both connections (a peer or the network gone mid-frame)."""

    def __init__(self, upstream: str) -> None:
        self._host, port = upstream.removeprefix("http://").rsplit(":", 1)
        self._port = int(port)
        self._cut = False
        self.cuts = 0
        self._server: asyncio.AbstractServer | None = None
        self.address = ""

    def cut_next(self) -> None:
        self._cut = True

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.address = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self._host, self._port)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, cutting: bool) -> None:
            while data := await src.read(65536):
                if cutting and self._cut:
                    self._cut = False
                    self.cuts += 1
                    dst.write(data[: len(data) // 2])
                    await dst.drain()
                    for w in (writer, up_writer):
                        w.transport.abort()
                    return
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False),
                             return_exceptions=True)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()


@pytest.fixture
async def member() -> AsyncIterator[Member]:
    m = Member(FakeClock())
    await m.start()
    yield m
    await m.stop()


def _transport(clock: FakeClock,
               sign: Callable[[bytes], bytes] = SIGN) -> tuple[StreamTransport, HttpTransport]:
    """The stream transport and its fallback (which its owner closes)."""
    http = HttpTransport(sign=sign, verify=VERIFY, clock=clock)
    return StreamTransport(http, sign=sign, verify=VERIFY, clock=clock), http


async def _until(check: Callable[[], bool], send: Callable[[], Awaitable[object]]) -> None:
    """Send until ``check`` holds (a stream opens in the background, rule 5), for 10 s at most."""
    async with asyncio.timeout(10):
        while not check():
            await send()
            await asyncio.sleep(0.01)


async def test_frames_between_two_members_go_on_one_stream_each_taken_once(member: Member) -> None:
    t, http = _transport(member.clock)
    seqs = iter(range(1, 10_000))
    try:
        await _until(lambda: t.streamed > 0, lambda: t.post(member.address, _frame(next(seqs))))
        replies = await asyncio.gather(*(t.post(member.address, _frame(next(seqs))) for _ in range(200)))
    finally:
        await t.close()
        await http.close()
    assert {r.status for r in replies} == {"ok"}
    sent = next(seqs) - 1
    assert member.got == Counter(range(1, sent + 1))  # every frame once, on either path
    assert member.paths["stream"] >= 201 and member.openings == 1
    assert t.streamed + t.fallbacks == sent and member.refused == 0


async def test_a_frame_cut_mid_stream_goes_again_nothing_lost_or_taken_twice(member: Member) -> None:
    proxy = CuttingProxy(member.address)
    await proxy.start()
    # the proxy's address is not the one proofs name: the member checks proofs made for its own address
    member.auth.receiver = proxy.address
    clock = member.clock
    t, http = _transport(clock)
    seqs = iter(range(1, 10_000))
    try:
        await _until(lambda: t.streamed > 0, lambda: t.post(proxy.address, _frame(next(seqs))))
        before = next(seqs) - 1
        proxy.cut_next()
        cut = before + 1
        first = await t.post(proxy.address, _frame(cut))
        assert first.status == "error"  # claims rule 5: its claims go again
        assert member.got[cut] == 0
        again = await t.post(proxy.address, _frame(cut))  # over HTTP: the stream waits out RECONNECT
        assert again.status == "ok" and t.fallbacks > 0
        streamed = t.streamed
        clock.advance(RECONNECT)
        await _until(lambda: t.streamed > streamed, lambda: t.post(proxy.address, _frame(next(seqs))))
        last = next(seqs) - 1
    finally:
        await t.close()
        await http.close()
        await proxy.stop()
    assert member.got == Counter(range(1, last + 1))
    assert member.openings == 2 and member.refused == 0


async def test_a_peer_without_the_stream_is_sent_frames_over_http_and_asked_again_later() -> None:
    old = Member(FakeClock(), stream=False)  # a node of 0.3.0: GET /internal/claims is a 404
    await old.start()
    t, http = _transport(old.clock)
    try:
        replies = [await t.post(old.address, _frame(seq)) for seq in range(1, 6)]
        await asyncio.sleep(0.2)  # the probe's answer is in
        replies += [await t.post(old.address, _frame(seq)) for seq in range(6, 11)]
    finally:
        await t.close()
        await http.close()
        await old.stop()
    assert {r.status for r in replies} == {"ok"}
    assert old.got == Counter(range(1, 11)) and old.paths == Counter(http=10)
    assert t.streamed == 0 and t.fallbacks == 10


async def test_an_opening_without_the_secret_is_refused_counted_frames_go_over_http(member: Member) -> None:
    t, http = _transport(member.clock, sign=hmac_signer("another secret"))
    try:
        replies = [await t.post(member.address, _frame(seq)) for seq in range(1, 4)]
        await asyncio.sleep(0.2)
    finally:
        await t.close()
        await http.close()
    assert {r.status for r in replies} == {"unauthorized"}  # HTTP's 401: it does not share the secret
    assert member.openings == 1 and member.refused == 4 and not member.got


async def _open(member: Member,
                session: aiohttp.ClientSession) -> tuple[aiohttp.ClientWebSocketResponse, str]:
    """A stream opened by a member (its proof and acknowledgement), and the proof's nonce."""
    proof = request_proof(SIGN, STREAM_PATH, member.address, 0, member.clock.wall())
    ws = await session.ws_connect(member.address + STREAM_PATH, headers={
        AUTH_HEADER: proof, WIRE_HEADER: THIS.header, RELEASE_HEADER: THIS.release})
    hello = await ws.receive()
    assert hello.type == aiohttp.WSMsgType.TEXT
    return ws, proof.split(".")[2]


async def test_a_forged_or_replayed_request_is_refused_counted_and_closes_the_stream(member: Member) -> None:
    async with aiohttp.ClientSession() as session:
        ws, nonce = await _open(member, session)
        await ws.send_bytes(encode_request(hmac_signer("forger"), nonce, 1, _frame(1)))
        assert (await ws.receive()).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        assert member.refused == 1 and not member.got

        ws, nonce = await _open(member, session)
        request = encode_request(SIGN, nonce, 7, _frame(2))
        await ws.send_bytes(request)
        seq, reply = open_reply(VERIFY, nonce, (await ws.receive()).data)
        assert (seq, reply.status) == (7, "ok")
        await ws.send_bytes(request)  # the same request again: a replay
        assert (await ws.receive()).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        await ws.close()

        ws, nonce = await _open(member, session)  # a request recorded on one stream, sent on another
        await ws.send_bytes(request)
        assert (await ws.receive()).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        await ws.close()
    assert member.refused == 3 and member.got == Counter({2: 1})


async def test_two_members_claims_over_streams_cut_mid_frame_store_every_page_once() -> None:
    """Two members' content claims (polecat/cluster/claimlink.py) over real streams, each reached through
    a relay that cuts one frame in half once the streams carry them: every page held is stored, once,
    and every body at least once (claims rule 5 sends the cut frame's claims again)."""
    clock = FakeClock()
    names = ("w0", "w1")
    stores = {n: MemoryPageStore() for n in names}
    sides = {n: Member(clock) for n in names}
    proxies = {n: CuttingProxy(sides[n].address) for n in names}
    for n in names:
        await proxies[n].start()
        sides[n].auth.receiver = proxies[n].address  # the address its peer reaches it at names it
    addresses = {n: proxies[n].address for n in names}
    transports = {n: _transport(clock) for n in names}
    members = {n: ContentClaims(n, Ring(names).owner, transports[n][0], addresses, capacity=100, wait=2.0,
                                book_capacity=1000, sign=SIGN, verify=VERIFY) for n in names}
    for n in names:
        members[n].bind(stores[n])
        sides[n].frames = members[n].receive
        await sides[n].start()
    tasks = [asyncio.create_task(m.run()) for m in members.values()]

    async def commits() -> None:  # each member's store flushes, as its node's commits make them
        while True:
            await asyncio.sleep(0.05)
            for m in members.values():
                m.after_flush(m.before_flush())

    tasks.append(asyncio.create_task(commits()))

    async def fetch(pages: range) -> None:
        held = []
        for i in pages:
            body = f"<p>page {i}</p>".encode()
            for k, n in enumerate(names):
                record = FetchRecord.for_body(f"http://h{k}.test/{i}", body, fetched_at=1.8e9 + k,
                                              headers=(("Content-Type", "text/html"),))
                held.append(members[n].claim(record, body))
        async with asyncio.timeout(20):
            await asyncio.gather(*held)

    pages = 20
    try:
        await fetch(range(pages))
        async with asyncio.timeout(10):  # until both streams are open (rule 5: they open in the background)
            while not all(t.streamed for t, _ in transports.values()):
                await fetch(range(pages, pages + 1))
                pages += 1
        for proxy in proxies.values():
            proxy.cut_next()
        await fetch(range(pages, pages + 40))
        pages += 40
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for n in names:
            await members[n].close()
            await transports[n][0].close()
            await transports[n][1].close()
            await sides[n].stop()
            await proxies[n].stop()
    assert sum(p.cuts for p in proxies.values()) == 2
    urls = Counter(r.url for s in stores.values() for r in s.log)
    assert set(urls.values()) == {1} and len(urls) == 2 * pages  # every page held stored, once
    assert len({d for s in stores.values() for d in s.bodies}) == pages  # each text stored in full somewhere
    assert sum(m.stats().copies for m in members.values()) > 0
    assert all(side.refused == 0 for side in sides.values())


async def test_replies_that_do_not_come_end_the_stream_in_one_timer_not_one_a_frame(member: Member) -> None:
    """Rules 4 and 6: a peer that stops answering has every frame in flight answered "error" after the
    timeout, the stream closed; the frames in flight share one timer (an ``asyncio.timeout`` a frame
    armed 20)."""
    http = HttpTransport(sign=SIGN, verify=VERIFY, clock=member.clock)
    t = StreamTransport(http, sign=SIGN, verify=VERIFY, clock=member.clock, timeout=0.5)
    seqs = iter(range(1, 10_000))
    silent: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
    try:
        await _until(lambda: t.streamed > 0, lambda: t.post(member.address, _frame(next(seqs))))
        member.frames = lambda _: silent  # takes each frame, answers none
        over_http = t.fallbacks
        loop = asyncio.get_running_loop()
        armed = 0
        call_at = loop.call_at

        def counted(when: float, callback: Callable[..., object], *args: object,
                    context: object = None) -> asyncio.TimerHandle:
            nonlocal armed
            armed += 1
            return call_at(when, callback, *args, context=context)  # type: ignore[arg-type]

        loop.call_at = counted  # type: ignore[method-assign]
        try:
            async with asyncio.timeout(10):
                replies = await asyncio.gather(*(t.post(member.address, _frame(next(seqs)))
                                                 for _ in range(20)))
        finally:
            del loop.call_at  # type: ignore[method-assign]
        member.frames = None
        after = await t.post(member.address, _frame(next(seqs)))  # the stream is closed: over HTTP
    finally:
        silent.set_result(Reply("ok"))
        await t.close()
        await http.close()
    assert [r.status for r in replies] == ["error"] * 20
    assert t.streamed == 21 and after.status == "ok" and t.fallbacks == over_http + 1
    assert armed <= 2
