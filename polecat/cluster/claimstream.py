"""Claim frames between nodes over one persistent stream per peer, instead of an HTTP request each.

A signed ``POST /handoff`` and its answer cost both ends ~200 us of CPU a frame more than a message
on a stream (benchmarks/bench_claim_stream.py), and aiohttp's request machinery was a third to over half
of what content claims added to a node (benchmarks/README.md, "Issue 35: claim frames over a stream
between nodes"). A node therefore also offers its claims receiver as a WebSocket on its
internal API, :data:`STREAM_PATH`: the same port, so no setting and no member record field says where
it is, and a peer of 0.3.0, which has no such route, is simply sent frames over HTTP as before.

Messages (binary, integers big-endian):

- request: u64 seq, 32-byte MAC, then the claim frame (polecat/cluster/claimwire.py, signed as on HTTP);
- reply: u64 seq, u8 status (:data:`~polecat.cluster.unixwire.STATUSES`), f64 retry-after, 32-byte MAC,
  then the detail in UTF-8 (at most :data:`~polecat.cluster.unixwire.MAX_DETAIL` bytes).

Rules:
1. The opening request is authenticated as every internal request is (polecat/cluster/auth.py rules 1,
   3: a proof for this route, receiver and length 0, its nonce accepted once; the wire check of
   polecat/processes/machine.py rule 9), else it is answered 401 (426) and counted. The receiver's first
   message is its acknowledgement of that proof (auth rule 4); the client sends nothing before it has
   checked it.
2. Each request's MAC is the HMAC, with the cluster secret, of the opening proof's nonce, the seq and
   the frame's fixed header (which holds its payload's checksum): a frame is bound to its connection and
   place, and seqs must increase, so a recorded request cannot be replayed on this or another stream. A
   request whose MAC does not verify or whose seq does not increase is refused, counted, and closes the
   stream; the frame's own signature is checked by the claims receiver as on HTTP (auth rule 2).
3. Each reply's MAC covers the nonce, the seq, the status and the retry-after: a client counts a frame
   delivered only on a reply that proves the secret (auth rule 4).
4. Delivery is claims rule 5's: every frame in flight on a stream that breaks, or whose reply does not
   come within the timeout, is answered ``Reply("error")`` (the stream is closed), so the claim code
   sends it again; a frame cut mid-message is never read, so nothing is taken twice for a break.
5. One stream per peer address, opened in the background by the first frame for it; until it is open,
   and for :data:`RECONNECT` seconds after a failure (doubling to :data:`RECONNECT_MAX`), frames go
   over ``fallback`` (HTTP): no frame waits for a connection. A peer that answers the opening with
   anything but a WebSocket (0.3.0: 404; another secret: 401) is sent frames over HTTP for
   :data:`PROBE_AGAIN` seconds before it is asked again (it may have been upgraded meanwhile).
6. Rule 4's timeout is one timer a stream, armed for the oldest frame in flight (frames are sent in seq
   order with the same timeout, so the oldest is due first) and moved on when it fires before that
   frame's deadline: not an ``asyncio.timeout`` a frame (a ``Timeout``, a timer handle and its
   rescheduling each), the same sweep as the workers' socket (polecat/cluster/unixwire.py rule 2).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from polecat.clock import SYSTEM_CLOCK, Clock
from polecat.cluster.auth import ACK_HEADER, AUTH_HEADER, RequestAuth, ack_proves, parse_proof, request_proof
from polecat.cluster.batch import HEADER_BYTES, MAX_BATCH_BYTES, Signer, Verifier
from polecat.cluster.receiver import Reply
from polecat.cluster.transport import Transport
from polecat.cluster.unixwire import MAX_DETAIL, STATUSES, detail_bytes, received_retry_after
from polecat.cluster.wire import RELEASE_HEADER, THIS, WIRE_HEADER, Wire
from polecat.frontier.bundle import Fence

log = logging.getLogger("polecat.claims")

STREAM_PATH = "/internal/claims"
"""The internal route that opens a claims stream (a WebSocket)."""
RECONNECT = 0.5
"""Seconds after a failed or broken stream before the next is opened (rule 5), doubling per failure."""
RECONNECT_MAX = 30.0
PROBE_AGAIN = 300.0
"""Seconds a peer that offered no stream is sent frames over HTTP before it is asked again (rule 5)."""
_REQUEST = struct.Struct(">Q32s")
_REPLY = struct.Struct(">QBd32s")
_STATUS = struct.Struct(">Bd")


class StreamError(Exception):
    """A request on a stream that the receiver refuses (rule 2), or a reply the client refuses (rule 3)."""


def _mac_text(kind: bytes, nonce: str, seq: int, tail: bytes) -> bytes:
    return b"polecat-claims-stream/1 " + kind + b" " + nonce.encode() + seq.to_bytes(8, "big") + tail


def encode_request(sign: Signer, nonce: str, seq: int, frame: bytes) -> bytes:
    """The request message carrying ``frame`` as the ``seq``-th of the stream opened with ``nonce``."""
    return _REQUEST.pack(seq, sign(_mac_text(b"req", nonce, seq, frame[:HEADER_BYTES]))) + frame


def open_request(verify: Verifier, nonce: str, after: int, message: bytes) -> tuple[int, bytes]:
    """The seq and frame of a request message whose seq must be above ``after`` (rule 2); raises
    :class:`StreamError` otherwise."""
    if len(message) < _REQUEST.size:
        raise StreamError(f"a request of {len(message)} bytes is shorter than its head")
    seq, mac = _REQUEST.unpack_from(message)
    frame = message[_REQUEST.size :]
    if not verify(_mac_text(b"req", nonce, seq, frame[:HEADER_BYTES]), mac):
        raise StreamError("a request's MAC does not verify (another secret, or not of this stream)")
    if seq <= after:
        raise StreamError(f"request seq {seq} after {after}: a replay")
    return seq, frame


def _reply_head(code: int, retry_after: float) -> bytes:
    """What a reply's MAC covers besides the nonce and seq (rule 3)."""
    return _STATUS.pack(code, retry_after)


def encode_reply(sign: Signer, nonce: str, seq: int, reply: Reply) -> bytes:
    """The reply message answering request ``seq`` with ``reply`` (rule 3)."""
    code = STATUSES.index(reply.status)
    mac = sign(_mac_text(b"reply", nonce, seq, _reply_head(code, reply.retry_after)))
    return _REPLY.pack(seq, code, reply.retry_after, mac) + detail_bytes(reply)


def open_reply(verify: Verifier, nonce: str, message: bytes) -> tuple[int, Reply]:
    """The seq and :class:`Reply` of a reply message; raises :class:`StreamError` when it does not prove
    the secret (rule 3) or is malformed."""
    if len(message) < _REPLY.size:
        raise StreamError(f"a reply of {len(message)} bytes is shorter than its head")
    seq, code, retry_after, mac = _REPLY.unpack_from(message)
    if code >= len(STATUSES) or not verify(_mac_text(b"reply", nonce, seq, _reply_head(code, retry_after)),
                                           mac):
        raise StreamError("a reply does not prove the cluster secret")
    detail = message[_REPLY.size :].decode("utf-8", "replace")
    return seq, Reply(STATUSES[code], received_retry_after(retry_after), detail)


class _Stream:
    """One open stream to a peer: requests pipelined, each answered by the reply of its seq."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, nonce: str, sign: Signer, verify: Verifier,
                 on_end: Callable[[_Stream], None], timeout: float) -> None:
        self._ws = ws
        self._timeout = timeout
        self._nonce = nonce
        self._sign = sign
        self._verify = verify
        self._seq = 0
        self._waiting: dict[int, tuple[asyncio.Future[Reply], float]] = {}
        """Seq -> the reply's future and its deadline (loop time), oldest first (rule 6)."""
        self._timer: asyncio.TimerHandle | None = None
        self._on_end = on_end
        self.open = True
        self._closing: asyncio.Future[bool] | None = None
        self._reader = asyncio.ensure_future(self._read())

    async def post(self, data: bytes) -> Reply:
        self._seq += 1
        seq = self._seq
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        deadline = loop.time() + self._timeout
        self._waiting[seq] = answer, deadline
        if self._timer is None:  # rule 6: else it is armed for an older frame, due first
            self._timer = loop.call_at(deadline, self._sweep)
        try:
            await self._ws.send_bytes(encode_request(self._sign, self._nonce, seq, data))
            reply: Reply = await answer  # answered by its reply, or "error" by end() (rules 4, 6)
            return reply
        except (aiohttp.ClientError, ConnectionError, OSError, RuntimeError) as exc:
            self.end(f"{type(exc).__name__} {exc}".strip())  # rule 4: the others in flight go again too
            return Reply("error", detail=f"claims stream: {type(exc).__name__} {exc}".strip())
        finally:
            self._waiting.pop(seq, None)

    def _sweep(self) -> None:
        """Rule 6: end the stream if its oldest frame in flight is past its deadline, else wait for that."""
        self._timer = None
        if not self.open or not self._waiting:
            return  # the next post arms it again
        loop = asyncio.get_running_loop()
        _, deadline = next(iter(self._waiting.values()))
        if deadline <= loop.time():
            self.end(f"TimeoutError: no reply within {self._timeout:g} s")
        else:
            self._timer = loop.call_at(deadline, self._sweep)

    async def _read(self) -> None:
        why = "the peer closed the stream"
        try:
            async for msg in self._ws:
                if msg.type != aiohttp.WSMsgType.BINARY:
                    why = f"the peer sent a {msg.type.name} message"
                    break
                seq, reply = open_reply(self._verify, self._nonce, msg.data)
                waiting = self._waiting.get(seq)
                if waiting is not None and not waiting[0].done():
                    waiting[0].set_result(reply)
        except StreamError as exc:
            why = str(exc)
            log.warning("content claims: %s: stream closed, its frames go again", why)
        except (ConnectionError, OSError) as exc:
            why = f"{type(exc).__name__} {exc}"
        self.end(why)

    def end(self, why: str) -> None:
        """Close the stream: every frame in flight is answered "error" (rule 4)."""
        if not self.open:
            return
        self.open = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for answer, _ in self._waiting.values():
            if not answer.done():
                answer.set_result(Reply("error", detail=f"claims stream ended: {why}"))
        self._on_end(self)
        self._closing = asyncio.ensure_future(self._ws.close())  # held: the loop keeps only weak references

    async def close(self) -> None:
        self.end("closing")
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        await self._ws.close()


class StreamTransport:
    """A :class:`~polecat.cluster.transport.Transport` for claim frames: the peer's stream where it
    offers one, ``fallback`` (the signed HTTP transport) otherwise (rules above). ``sign``, ``verify``,
    ``wire`` and ``fence`` as :class:`~polecat.cluster.transport.HttpTransport`'s: while ``fence`` reads
    None nothing is sent."""

    def __init__(self, fallback: Transport, *, sign: Signer, verify: Verifier, clock: Clock = SYSTEM_CLOCK,
                 wire: Wire = THIS, fence: Callable[[], Fence | None] | None = None,
                 timeout: float = 30.0) -> None:
        self._fallback = fallback
        self._sign = sign
        self._verify = verify
        self._clock = clock
        self._fence = fence
        self._timeout = timeout
        self._wire_headers = {WIRE_HEADER: wire.header, RELEASE_HEADER: wire.release}
        self._session: aiohttp.ClientSession | None = None
        self._streams: dict[str, _Stream] = {}
        self._opening: dict[str, asyncio.Task[None]] = {}
        self._not_before: dict[str, float] = {}
        """Address -> when a stream may be opened again (rule 5)."""
        self._failures: dict[str, int] = {}
        self.streamed = 0
        """Frames sent on streams (answered or not)."""
        self.fallbacks = 0
        """Frames sent over ``fallback``."""

    async def post(self, address: str, data: bytes) -> Reply:
        if self._fence is not None and self._fence() is None:
            return Reply("error", detail="not sent: this node is fenced (no lease to send under)")
        stream = self._streams.get(address)
        if stream is None:
            self._open_soon(address)
            self.fallbacks += 1
            return await self._fallback.post(address, data)
        self.streamed += 1
        return await stream.post(data)

    def _open_soon(self, address: str) -> None:
        if address in self._opening or not address.startswith(("http://", "https://")):
            return
        if self._clock.monotonic() < self._not_before.get(address, 0.0):
            return
        task = self._opening[address] = asyncio.ensure_future(self._open(address))
        task.add_done_callback(lambda _: self._opening.pop(address, None))

    async def _open(self, address: str) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        receiver = address.rstrip("/")
        proof = request_proof(self._sign, STREAM_PATH, receiver, 0, self._clock.wall())
        parsed = parse_proof(proof)
        assert not isinstance(parsed, str)
        ws: aiohttp.ClientWebSocketResponse | None = None
        try:
            async with asyncio.timeout(self._timeout):
                ws = await self._session.ws_connect(
                    receiver + STREAM_PATH, headers={AUTH_HEADER: proof, **self._wire_headers}, compress=0,
                    max_msg_size=MAX_BATCH_BYTES + _REPLY.size + MAX_DETAIL, autoping=True)
                hello = await ws.receive()
            if hello.type != aiohttp.WSMsgType.TEXT or not ack_proves(self._verify, STREAM_PATH, proof,
                                                                       hello.data):
                raise StreamError(f"{address} opened a claims stream without proving the cluster secret")
        except aiohttp.WSServerHandshakeError as exc:  # no stream there (0.3.0: 404), or 401/426
            self._not_before[address] = self._clock.monotonic() + PROBE_AGAIN
            log.info("content claims: %s offers no claims stream (HTTP %s): frames go over HTTP, asked again "
                     "in %.0f s", address, exc.status, PROBE_AGAIN)
            return
        except (StreamError, TimeoutError, aiohttp.ClientError, OSError) as exc:
            if ws is not None:
                await ws.close()
            self._failed(address, f"{type(exc).__name__} {exc}")
            return
        self._failures.pop(address, None)
        log.info("content claims: claims stream to %s open (%d frames sent over HTTP so far)", address,
                 self.fallbacks)
        self._streams[address] = _Stream(ws, parsed.nonce, self._sign, self._verify,
                                         lambda s: self._ended(address, s), self._timeout)

    def _ended(self, address: str, stream: _Stream) -> None:
        if self._streams.get(address) is stream:
            del self._streams[address]
            self._failed(address, "the stream ended")

    def _failed(self, address: str, why: str) -> None:
        """Rule 5: HTTP for a while, then a stream again."""
        n = self._failures[address] = self._failures.get(address, 0) + 1
        pause = min(RECONNECT * 2 ** min(n - 1, 16), RECONNECT_MAX)
        self._not_before[address] = self._clock.monotonic() + pause
        log.info("content claims: no claims stream to %s (%s): frames go over HTTP, again in %.1f s", address,
                 why, pause)

    async def close(self) -> None:
        """Close every stream (frames in flight are answered "error"); the fallback is its owner's."""
        for task in list(self._opening.values()):
            task.cancel()
        await asyncio.gather(*self._opening.values(), return_exceptions=True)
        streams = list(self._streams.values())
        self._streams.clear()
        for stream in streams:
            await stream.close()
        if self._session is not None:
            await self._session.close()


FrameHandler = Callable[[bytes], Awaitable[Reply]]


class StreamServer:
    """The receiving end of claims streams (rules 1-3), mounted at :data:`STREAM_PATH` by the node.
    ``refused`` counts openings and requests refused for their proof or MAC."""

    def __init__(self, auth: RequestAuth, sign: Signer, verify: Verifier, *, clock: Clock = SYSTEM_CLOCK,
                 on_refused: Callable[[], None] = lambda: None) -> None:
        self._auth = auth
        self._sign = sign
        self._verify = verify
        self._clock = clock
        self._on_refused = on_refused
        self._open: set[web.WebSocketResponse] = set()

    async def serve(self, request: web.Request, receive: FrameHandler, *,
                    head_check: Callable[[web.Request], None] = lambda _: None) -> web.StreamResponse:
        """Answer one opening request, then the stream's requests with ``receive`` until it ends."""
        value = request.headers.get(AUTH_HEADER, "")
        why = self._auth.check(STREAM_PATH, 0, value, self._clock.wall())
        if why is not None:
            self._on_refused()
            log.warning("refused %s from %s: %s", STREAM_PATH, request.remote, why)
            raise web.HTTPUnauthorized(text=why)
        head_check(request)
        proof = parse_proof(value)
        assert not isinstance(proof, str)
        ws = web.WebSocketResponse(compress=False, max_msg_size=MAX_BATCH_BYTES + _REQUEST.size)
        await ws.prepare(request)
        self._open.add(ws)
        try:
            await ws.send_str(self._auth.ack(STREAM_PATH, value).get(ACK_HEADER, ""))
            seq = 0
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.BINARY:
                    break
                try:
                    seq, frame = open_request(self._verify, proof.nonce, seq, msg.data)
                except StreamError as exc:
                    self._on_refused()
                    log.warning("refused a claims stream request from %s: %s; stream closed", request.remote,
                                exc)
                    break
                reply = await receive(frame)
                await ws.send_bytes(encode_reply(self._sign, proof.nonce, seq, reply))
        except (ConnectionError, OSError):
            pass  # the peer went away: what it had in flight it sends again (rule 4)
        finally:
            self._open.discard(ws)
            await ws.close()
        return ws

    async def close(self) -> None:
        """Close every open stream (the node stops): their clients send what is in flight again."""
        await asyncio.gather(*(ws.close() for ws in list(self._open)), return_exceptions=True)

