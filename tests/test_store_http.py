"""The internal page API against aiohttp's loopback test server and a real store."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from polecat.config import StoreConfig
from polecat.store.base import FetchRecord, PageStore, content_hash
from polecat.store.http import CONTENT_TYPE, decode_page, encode_page, page_routes
from polecat.store.segstore import open_store

BODY = b"<html>" + bytes(range(256)) * 40 + b"</html>"
REC = FetchRecord.for_body("http://p.test/a", BODY, fetched_at=1.7e9,
                           headers=(("Content-Type", "text/html"),))


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[TestClient[web.Request, web.Application], PageStore]]:
    store = open_store(tmp_path / "store", StoreConfig())
    app = web.Application()
    app.add_routes(page_routes(store))
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        yield client, store
    store.close()


def test_encode_decode_roundtrip_and_rejects_mismatch() -> None:
    assert decode_page(encode_page(REC, BODY)) == (REC, BODY)
    revisit = dataclasses.replace(REC, kind="revisit", duplicate_of="http://p.test/orig")
    assert decode_page(encode_page(revisit, None)) == (revisit, None)
    with pytest.raises(ValueError, match="content hash"):
        decode_page(encode_page(REC, BODY + b"x"))


async def test_put_is_idempotent_and_get_returns_the_body(
        api: tuple[TestClient[web.Request, web.Application], PageStore]) -> None:
    client, store = api
    headers = {"Content-Type": CONTENT_TYPE}
    r1 = await client.put("/internal/pages", data=encode_page(REC, BODY), headers=headers)
    assert r1.status == 201 and (await r1.json()) == {"hash": REC.content_hash.hex(), "created": True}
    r2 = await client.put("/internal/pages", data=encode_page(REC, BODY), headers=headers)
    assert r2.status == 200 and (await r2.json())["created"] is False
    assert store.stats().bodies == 1 and store.stats().pending_records == 0  # flushed before answering
    got = await client.get(f"/internal/pages/{REC.content_hash.hex()}")
    assert got.status == 200 and await got.read() == BODY


async def test_errors(api: tuple[TestClient[web.Request, web.Application], PageStore]) -> None:
    client, _ = api
    assert (await client.get("/internal/pages/xyz")).status == 400
    assert (await client.get(f"/internal/pages/{content_hash(b'none').hex()}")).status == 404
    bad = encode_page(REC, BODY)[:-1] + b"?"
    assert (await client.put("/internal/pages", data=bad)).status == 400
    assert (await client.put("/internal/pages", data=b"not json\n")).status == 400
