"""Hand-off between machines is signed: a forged, re-keyed or unsigned batch is refused (401) and changes
nothing; a batch signed with the shared secret is delivered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import xxhash
from aiohttp import web

from polecat.cluster.auth import hmac_signer, hmac_verifier
from polecat.cluster.batch import (
    HandoffError,
    HandoffUrl,
    SignatureError,
    decode_batch,
    encode_batch,
    encode_urls,
    fence_header,
    read_fence_header,
)
from polecat.cluster.handoff import Handoff
from polecat.cluster.outbox import Outbox
from polecat.cluster.receiver import HandoffReceiver
from polecat.cluster.transport import HttpTransport, serve
from polecat.frontier.bundle import Fence
from tests.test_cluster_transport import SlowFrontier, _free_port

SECRET = "correct horse battery staple 42"
URLS = encode_urls([HandoffUrl("http://a.test/", 1, 0.5)])


def _forged(signed: bytes) -> bytes:
    """``signed`` with its payload changed and its checksum fixed up: only the signature can tell."""
    sig_len = signed[5]
    head, payload = signed[: 18 + sig_len], bytearray(signed[18 + sig_len :])
    payload[-2] ^= 0x01
    checksum = xxhash.xxh3_64_intdigest(bytes(payload)).to_bytes(8, "big")
    return head[:10] + checksum + head[18:] + bytes(payload)


def test_only_the_shared_secret_signs_a_batch_that_verifies() -> None:
    verify = hmac_verifier(SECRET)
    signed = encode_batch("n1", 3, URLS, hmac_signer(SECRET))
    assert decode_batch(signed, verify).urls[0].url == "http://a.test/"
    with pytest.raises(SignatureError, match="missing"):
        decode_batch(encode_batch("n1", 3, URLS), verify)
    with pytest.raises(SignatureError, match="does not verify"):
        decode_batch(encode_batch("n1", 3, URLS, hmac_signer("another secret of some length")), verify)
    with pytest.raises(SignatureError, match="does not verify"):
        decode_batch(_forged(signed), verify)
    assert decode_batch(_forged(signed)).seq == 3  # the forgery is a well-formed frame otherwise


def test_a_batch_fencing_token_verifies_only_with_its_fields_and_its_batch() -> None:
    """batch.py: the token travels in a header, bound by the secret to its three fields and its frame."""
    sign, verify = hmac_signer(SECRET), hmac_verifier(SECRET)
    frame = encode_batch("n1", 3, URLS, sign)
    token = Fence("n1", 0x2A, 9)
    value = fence_header(sign, token, frame)
    assert read_fence_header(value, frame, verify) == token
    with pytest.raises(SignatureError):  # another batch
        read_fence_header(value, encode_batch("n1", 4, URLS, sign), verify)
    with pytest.raises(SignatureError):  # another revision, same HMAC
        read_fence_header(value.replace(" 9 ", " 10 "), frame, verify)
    with pytest.raises(SignatureError):  # another secret
        read_fence_header(fence_header(hmac_signer("another secret of some length"), token, frame), frame,
                          verify)
    for bad in ("", "n1 2a 9", "n1 zz 9 00", "n1 2a 9 nothex", "n1 2a 9 00 extra", "n" * 300 + " 2a 9 00"):
        with pytest.raises(HandoffError):
            read_fence_header(bad, frame, verify)


async def test_the_receiver_answers_401_to_bad_signatures_and_queues_nothing(tmp_path: Path) -> None:
    address = f"http://127.0.0.1:{_free_port()}"
    frontier = SlowFrontier(0.0)
    receiver = HandoffReceiver(frontier.sink, verify=hmac_verifier(SECRET))
    runner = await serve(receiver, address, verify=hmac_verifier(SECRET))
    stranger = HttpTransport()  # its requests' heads prove nothing: no body is read (auth rule 1)
    transport = HttpTransport(sign=hmac_signer(SECRET))
    box = Outbox(tmp_path / "ob", batch_urls=10)
    handoff = Handoff("n1", box, transport, {"n2": address}, sign=hmac_signer(SECRET))
    task = asyncio.create_task(handoff.run())
    try:
        for frame in (encode_batch("n1", 1, URLS), encode_batch("n1", 2, URLS, hmac_signer("x" * 32)),
                      _forged(encode_batch("n1", 3, URLS, hmac_signer(SECRET)))):
            reply = await transport.post(address, frame)
            assert reply.status == "unauthorized" and "401" in reply.detail
        reply = await stranger.post(address, encode_batch("n1", 4, URLS, hmac_signer(SECRET)))
        assert reply.status == "unauthorized" and "X-Polecat-Auth" in reply.detail
        assert receiver.unauthorized == 4 and receiver.batches == 0 and not frontier.received

        handoff.stage("n2", [HandoffUrl(f"http://b.test/{i}", 1, 1.0) for i in range(25)])
        async with asyncio.timeout(10):
            await handoff.drain()
        assert len(frontier.received) == 25 and receiver.batches == 3
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await transport.close()
        await stranger.close()
        await runner.cleanup()
        box.close()


async def test_a_200_counts_only_with_an_acknowledgement_that_proves_the_secret(tmp_path: Path) -> None:
    """auth rule 4: a listener that is not a member cannot make a sender drop a batch by answering 200."""

    async def yes(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/handoff", yes)
    impostor = web.AppRunner(app)
    await impostor.setup()
    fake = f"http://127.0.0.1:{_free_port()}"
    await web.TCPSite(impostor, "127.0.0.1", int(fake.rsplit(":", 1)[1])).start()
    real = f"http://127.0.0.1:{_free_port()}"
    frontier = SlowFrontier(0.0)
    runner = await serve(HandoffReceiver(frontier.sink, verify=hmac_verifier(SECRET)), real,
                         verify=hmac_verifier(SECRET), sign=hmac_signer(SECRET))
    transport = HttpTransport(sign=hmac_signer(SECRET), verify=hmac_verifier(SECRET))
    try:
        reply = await transport.post(fake, encode_batch("n1", 1, URLS, hmac_signer(SECRET)))
        assert reply.status == "error" and "X-Polecat-Ack" in reply.detail
        assert (await transport.post(real, encode_batch("n1", 2, URLS, hmac_signer(SECRET)))).status == "ok"
        assert len(frontier.received) == 1
    finally:
        await transport.close()
        await runner.cleanup()
        await impostor.cleanup()
