"""The OpenAPI 3.1 document of the node's HTTP API, served at ``/openapi.json``.

tests/test_service_openapi.py sends real requests to every route and validates each answer (status
and JSON body) against this document, so it cannot drift from polecat/service/api.py.
"""

from __future__ import annotations

from typing import Any

JsonSchema = dict[str, Any]

_NUM: JsonSchema = {"type": "number"}
_INT: JsonSchema = {"type": "integer", "minimum": 0}
_STR: JsonSchema = {"type": "string"}
_BOOL: JsonSchema = {"type": "boolean"}
_NULLABLE_NUM: JsonSchema = {"type": ["number", "null"]}
_COUNTS: JsonSchema = {"type": "object", "additionalProperties": _INT}


def _obj(props: dict[str, JsonSchema], *, optional: tuple[str, ...] = ()) -> JsonSchema:
    return {"type": "object", "properties": props, "additionalProperties": False,
            "required": [k for k in props if k not in optional]}


def _list_of(item: JsonSchema) -> JsonSchema:
    return {"type": "array", "items": item}


def _json(schema: JsonSchema, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERROR = _obj({"error": _STR, "field": _STR}, optional=("field",))
THROTTLE = _obj({"host_pattern": _STR, "req_per_s": _NUM})
PATTERN_BODY = _obj({"host_pattern": _STR})
REMOVED = _obj({"removed": _STR})
UNBLOCKED = _obj({"removed": _STR, "note": _STR})
PAUSED = _obj({"paused": _BOOL})

ROBOTS = {
    "type": "object",
    "required": ["origin", "state", "text", "status"],
    "properties": {
        "origin": {"type": ["string", "null"]},
        "state": {"enum": ["unknown", "unreachable", "parsed", "allow_all", "disallow_all"]},
        "text": {"type": ["string", "null"], "description": "the stored robots.txt body"},
        "status": {"type": ["integer", "null"]},
        "retry_at": _NUM,
        "crawl_delay_s": _NULLABLE_NUM,
        "sitemaps": _list_of(_STR),
        "refresh_due": _BOOL,
    },
    "additionalProperties": False,
}

SEED_RESULT = _obj({"url": _STR, "result": {"enum": ["queued", "seen", "forwarded", "refused"]},
                    "reason": _STR},
                   optional=("reason",))

TOTALS = _obj({
    "paused": _BOOL, "elapsed_s": _NUM, "fetches": _INT, "fetches_per_s": _NUM, "bytes_fetched": _INT,
    "queued": _INT, "in_flight": _INT, "hosts": _INT, "hosts_ready": _INT, "hosts_waiting": _INT,
    "hosts_parked": _INT, "politeness_violations": _INT, "pages_stored": _INT, "bytes_stored": _INT,
    "errors": _COUNTS, "urls_done": _COUNTS, "urls_rejected": _COUNTS,
    "top_queues": _list_of(_obj({"host": _STR, "queued": _INT})),
    "top_errors": _list_of(_obj({"host": _STR, "errors_24h": _INT})),
    "rate_per_minute": {**_list_of(_obj({"t": _NUM, "requests": _INT})), "minItems": 60, "maxItems": 60},
    "recent_errors": _list_of(_obj({"at": _NUM, "host": _STR, "url": _STR, "reason": _STR})),
    "parked": _list_of(_obj({"host": _STR, "reason": _STR})),
    "blocks": _list_of(_STR),
    "throttles": _list_of(THROTTLE),
    "freshness": {"oneOf": [{"type": "null"}, _obj({"tracked": _INT, "due": _INT, "important": _INT,
                                                    "within_window": _INT})],
                  "description": "the freshness SLO at the last refresh scan (null: refresh off)"},
    "refresh_queued": _INT,
})

HOST = _obj({
    "host": _STR, "queued": _INT, "fetched_total": _INT, "fetched_24h": _INT, "errors_24h": _INT,
    "error_rate": {"type": "number", "minimum": 0, "maximum": 1}, "last_fetch": _NULLABLE_NUM,
    "next_allowed": _NUM, "in_flight": _BOOL, "req_per_s": _NUM, "aimd_factor": _NUM, "interval_s": _NUM,
    "consecutive_failures": _INT, "quarantined": _BOOL, "parked": _BOOL,
    "park_reason": {"type": ["string", "null"]}, "blocked": _BOOL, "robots": ROBOTS,
})

INTERNAL_HOST = _obj({"host": _STR, "robots": ROBOTS, "crawl_delay_ms": _INT, "next_allowed_ts": _NUM,
                      "dns_ttl": _NULLABLE_NUM})

_BAD = _json(ERROR, "bad input; `field` names the offending field")
_UNAUTHORIZED = _json(ERROR, "missing or wrong bearer token")
_NOT_FOUND = _json(ERROR, "unknown host or pattern")


def _op(summary: str, ok: dict[str, Any], *extra: tuple[str, dict[str, Any]],
        body: JsonSchema | None = None, params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {"200": ok, "401": _UNAUTHORIZED, **dict(extra)}}
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = params
    return op


def _path_param(name: str) -> list[dict[str, Any]]:
    return [{"name": name, "in": "path", "required": True, "schema": _STR}]


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "polecat node", "version": "1"},
    "components": {"securitySchemes": {
        "bearer": {"type": "http", "scheme": "bearer"},
        "cluster": {"type": "apiKey", "in": "header", "name": "X-Polecat-Auth",
                    "description": "proof of the cluster secret: polecat/cluster/auth.py rule 1"}}},
    "security": [{"bearer": []}],
    "paths": {
        "/": {"get": {"summary": "status page (HTML; asks for the token itself)", "security": [],
                      "responses": {"200": {"description": "HTML", "content": {"text/html": {}}}}}},
        "/openapi.json": {"get": _op("this document", _json({"type": "object"}, "OpenAPI 3.1"))},
        "/metrics": {"get": _op("Prometheus metrics", {"description": "text exposition format",
                                                       "content": {"text/plain": {}}})},
        "/admin/seeds": {"post": _op(
            "queue seed URLs (their hosts join the scope)",
            _json(_obj({"results": _list_of(SEED_RESULT)}), "one result per URL, in order"),
            ("400", _BAD),
            body={"type": "object", "required": ["urls"], "properties": {
                "urls": {**_list_of(_STR), "minItems": 1, "maxItems": 10_000},
                "priority": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 1}}},
        )},
        "/admin/throttles": {
            "get": _op("rate overrides", _json(_obj({"throttles": _list_of(THROTTLE)}), "in force")),
            "post": _op("set a host pattern's rate (req/s, in (0, 1000])", _json(THROTTLE, "in force"),
                        ("400", _BAD), body=THROTTLE),
        },
        "/admin/throttles/{pattern}": {"delete": _op(
            "remove a rate override", _json(REMOVED, "removed"), ("400", _BAD), ("404", _NOT_FOUND),
            params=_path_param("pattern"))},
        "/admin/blocks": {
            "get": _op("blocked host patterns", _json(_obj({"blocks": _list_of(_STR)}), "in force")),
            "post": _op("block a host pattern (its queued URLs are dropped)",
                        _json(_obj({"host_pattern": _STR, "dropped": _INT}), "in force"),
                        ("400", _BAD), body=PATTERN_BODY),
        },
        "/admin/blocks/{pattern}": {"delete": _op(
            "lift a block (the URLs it dropped stay done: the answer's note)", _json(UNBLOCKED, "removed"),
            ("400", _BAD), ("404", _NOT_FOUND),
            params=_path_param("pattern"))},
        "/admin/crawl/status": {"get": _op(
            "crawl totals, or one host's state with ?host=",
            {"description": "totals, or a host", "content": {"application/json": {
                "schema": {"oneOf": [TOTALS, HOST]}}}},
            ("404", _NOT_FOUND),
            params=[{"name": "host", "in": "query", "required": False, "schema": _STR}])},
        "/admin/pause": {"post": _op("stop leasing new requests (persisted)", _json(PAUSED, "paused"))},
        "/admin/resume": {"post": _op("resume leasing", _json(PAUSED, "resumed"))},
        "/internal/hosts/{host}": {"get": _op(
            "what another node needs to take a host over", _json(INTERNAL_HOST, "the host"),
            ("404", _NOT_FOUND), params=_path_param("host"))},
        "/internal/pages": {"put": {
            "summary": "store one fetch (polecat/store/http.py encoding)",
            "requestBody": {"required": True, "content": {"application/octet-stream": {}}},
            "responses": {
                "200": _json(_obj({"hash": _STR, "created": _BOOL}), "already stored"),
                "201": _json(_obj({"hash": _STR, "created": _BOOL}), "stored"),
                "400": {"description": "malformed page", "content": {"text/plain": {}}},
                "401": _UNAUTHORIZED,
            }}},
        "/internal/pages/{hash}": {"get": {
            "summary": "a stored body by content hash (64 hex digits)",
            "parameters": _path_param("hash"),
            "responses": {
                "200": {"description": "the body", "content": {"application/octet-stream": {}}},
                "400": {"description": "bad hash", "content": {"text/plain": {}}},
                "404": {"description": "not stored", "content": {"text/plain": {}}},
                "401": _UNAUTHORIZED,
            }}},
        "/internal/pages/url/{key}": {"get": {
            "summary": "the body of a URL's newest fetch in this node's store (the canonical URL in unpadded "
                       "URL-safe base64); X-Polecat-Content-Hash names its hash",
            "parameters": _path_param("key"),
            "responses": {
                "200": {"description": "the body", "content": {"application/octet-stream": {}}},
                "400": {"description": "bad key", "content": {"text/plain": {}}},
                "404": {"description": "not fetched here, or its body is another store's (then "
                                       "X-Polecat-Content-Hash names it)", "content": {"text/plain": {}}},
                "401": _UNAUTHORIZED,
            }}},
    },
}
for _path, _ops in OPENAPI["paths"].items():
    if _path.startswith("/internal/"):  # the cluster secret, not the token (api.py's auth rule)
        for _op_spec in _ops.values():
            _op_spec["security"] = [{"cluster": []}]
