"""The node's internal page API, as aiohttp routes the operator API server mounts.

``PUT /internal/pages`` stores one fetch; its body is :func:`encode_page`'s output: one line of JSON (the
:class:`FetchRecord` fields, ``content_hash`` in hex, ``has_body``), a newline, then the raw page body.
The server checks the body against the declared hash and size, stores it (idempotent by hash), flushes
so the answer means durable, and replies ``201`` when new body bytes were written, ``200`` when the body
was already there, with ``{"hash": ..., "created": ...}``.

``GET /internal/pages/{hash}`` returns the verified body (``404`` unknown, ``400`` malformed hash,
``500`` when the stored copy is corrupt).

``GET /internal/pages/url/{key}`` (:func:`url_route`: the canonical URL in unpadded URL-safe base64, one
path segment, so the request's proof covers it) returns the body of the URL's newest fetch in this store,
its own hash in :data:`HASH_HEADER`; a fetch whose body another store holds (a revisit of a copy another
member stored first) is ``404`` with that hash in :data:`HASH_HEADER`, for the caller to ask for by hash;
a URL never fetched here is ``404`` without it.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from aiohttp import web

from polecat.errors import CorruptRecord, NotFound
from polecat.store.base import HASH_NAME, FetchRecord, PageStore, content_hash

MAX_PAGE_REQUEST = 64 * 1024 * 1024
CONTENT_TYPE = "application/x-polecat-page"
HASH_HEADER = "X-Polecat-Content-Hash"
"""The hash of the body a page route answers (or names, for a body held elsewhere)."""
URL_ROUTE = "/internal/pages/url/"


def url_route(url: str) -> str:
    """The route that asks a node for the body of ``url``'s newest fetch."""
    return URL_ROUTE + base64.urlsafe_b64encode(url.encode()).rstrip(b"=").decode()


def encode_page(record: FetchRecord, body: bytes | None) -> bytes:
    """The PUT request body for one fetch (what a peer node sends)."""
    meta = {
        "url": record.url, "fetched_at": record.fetched_at, "status": record.status,
        "headers": [list(h) for h in record.headers], "content_hash": record.content_hash.hex(),
        "size": record.size, "truncated": record.truncated, "duplicate_of": record.duplicate_of,
        "kind": record.kind, "has_body": body is not None,
    }
    return json.dumps(meta, separators=(",", ":")).encode() + b"\n" + (body or b"")


def decode_page(data: bytes, hash_name: str = HASH_NAME) -> tuple[FetchRecord, bytes | None]:
    """Inverse of :func:`encode_page`; ValueError on anything malformed or inconsistent, a body included
    that does not hash by ``hash_name`` (the receiving store's) to the declared hash."""
    head, sep, body = data.partition(b"\n")
    if not sep:
        raise ValueError("missing metadata line")
    meta: dict[str, Any] = json.loads(head)
    if meta.get("kind") not in ("response", "revisit"):
        raise ValueError(f"bad kind {meta.get('kind')!r}")
    record = FetchRecord(
        url=str(meta["url"]), fetched_at=float(meta["fetched_at"]), status=int(meta["status"]),
        headers=tuple((str(k), str(v)) for k, v in meta["headers"]),
        content_hash=bytes.fromhex(meta["content_hash"]), size=int(meta["size"]),
        truncated=bool(meta["truncated"]),
        duplicate_of=None if meta["duplicate_of"] is None else str(meta["duplicate_of"]),
        kind=meta["kind"],
    )
    if len(record.content_hash) != 32:
        raise ValueError("content_hash must be 32 bytes")
    if not meta["has_body"]:
        if body:
            raise ValueError("has_body is false but a body follows")
        return record, None
    if len(body) != record.size or content_hash(body, hash_name) != record.content_hash:
        raise ValueError(f"body does not match the declared size and content hash ({hash_name})")
    return record, body


def page_routes(store: PageStore) -> list[web.RouteDef]:
    """The internal page API routes over ``store``."""

    async def put_page(request: web.Request) -> web.Response:
        chunks: list[bytes] = []
        total = 0
        async for chunk in request.content.iter_chunked(1 << 16):
            total += len(chunk)
            if total > MAX_PAGE_REQUEST:
                raise web.HTTPRequestEntityTooLarge(max_size=MAX_PAGE_REQUEST, actual_size=total)
            chunks.append(chunk)
        try:
            record, body = decode_page(b"".join(chunks), store.hash_name)
        except (ValueError, KeyError, TypeError) as exc:
            raise web.HTTPBadRequest(text=f"bad page: {exc}") from exc
        created = store.put(record, body)
        store.flush()  # the answer promises durability: the sender may forget the page after it
        return web.json_response({"hash": record.content_hash.hex(), "created": created},
                                 status=201 if created else 200)

    async def get_page(request: web.Request) -> web.Response:
        try:
            digest = bytes.fromhex(request.match_info["hash"])
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise web.HTTPBadRequest(text="hash must be 64 hex digits")
        return _body(digest)

    async def get_page_by_url(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        try:
            url = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4)).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            raise web.HTTPBadRequest(text="the key is a URL in URL-safe base64") from exc
        fetches = store.history(url)
        if not fetches:
            raise web.HTTPNotFound(text=f"no stored page for {url}")
        return _body(max(fetches, key=lambda r: r.fetched_at).own_hash)

    def _body(digest: bytes) -> web.Response:
        try:
            body = store.get(digest)
        except NotFound as exc:
            raise web.HTTPNotFound(text=str(exc), headers={HASH_HEADER: digest.hex()}) from exc
        except CorruptRecord as exc:
            raise web.HTTPInternalServerError(text=f"stored copy is corrupt: {exc}") from exc
        return web.Response(body=body, content_type="application/octet-stream",
                            headers={HASH_HEADER: digest.hex()})

    return [web.put("/internal/pages", put_page), web.get("/internal/pages/{hash}", get_page),
            web.get(URL_ROUTE + "{key}", get_page_by_url)]
