"""Every body limit + 1 byte → 413 `limit/too_large`, before anything parses; the limit itself
is accepted (whatever the route then says about the content, never 413 and never 500).

The routes come from the generated OpenAPI schema (every POST/PUT/PATCH/DELETE, the `/v1/ext/…`
catch-all included), so a route added later is covered without touching this file; each
route's limit is the one the middleware applies to its path (`HOST_MAX_BODY_BYTES`, artifact
`emit` 5 MiB, extension routes their own).
"""

from __future__ import annotations

import json
import re

import httpx
import pytest
from django.conf import settings
from django.urls import get_resolver

from core.middleware import body_limit_for
from tests.security.conftest import WRITE_METHODS, api_operations
from tests.security.live import gunicorn, uvicorn

pytestmark = pytest.mark.django_db

WRITES = [op for op in api_operations() if op.method in WRITE_METHODS]
MIB = 1024 * 1024


def json_body(size: int) -> bytes:
    """A JSON object of exactly `size` bytes."""
    overhead = len(b'{"pad":""}')
    return b'{"pad":"' + b"x" * (size - overhead) + b'"}'


def test_the_enumeration_sees_every_write_route_and_the_declared_limits():
    paths = {op.path for op in WRITES}
    assert len(WRITES) >= 30
    assert "/v1/artifacts/emit" in paths and "/v1/conversations/{conversation_id}" in paths
    assert body_limit_for("/v1/artifacts/emit") == 5 * MIB  # room for a 4 MiB payload
    assert body_limit_for("/v1/conversations/c/submissions") == settings.HOST_MAX_BODY_BYTES
    assert settings.HOST_MAX_BODY_BYTES == MIB


def test_every_v1_url_pattern_is_in_the_schema():
    """No route escapes the schema (and so the enumeration above)."""
    documented = {op.path for op in api_operations()}

    def walk(patterns, prefix=""):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if hasattr(pattern, "url_patterns"):
                yield from walk(pattern.url_patterns, route)
            else:
                yield route

    routes = {
        "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route).lstrip("^").rstrip("$")
        for route in walk(get_resolver().url_patterns)
        if route.startswith("v1/")
    }
    assert routes - {"/v1/schema", "/v1/docs"} <= documented, sorted(routes - documented)


@pytest.mark.parametrize("operation", WRITES, ids=str)
@pytest.mark.parametrize("who", ["service", None])
def test_one_byte_over_the_limit_is_413_before_parsing(api, operation, who):
    path = operation.path.replace("{", "").replace("}", "")  # any value: the limit comes first
    limit = body_limit_for(path)
    client = api(who)
    over = getattr(client, operation.method)(
        path, data=json_body(limit + 1), content_type="application/json"
    )
    assert over.status_code == 413, (over.status_code, over.content[:300])
    assert over.json() == {
        "error": {"category": "limit", "cause": "too_large", "message": "Request body is too large"}
    }


@pytest.mark.parametrize("operation", WRITES, ids=str)
def test_exactly_the_limit_is_let_through_to_the_route(api, operation):
    path = operation.path.replace("{", "").replace("}", "")
    limit = body_limit_for(path)
    response = getattr(api("service"), operation.method)(
        path, data=json_body(limit), content_type="application/json"
    )
    assert response.status_code not in (413, 500), (response.status_code, response.content[:300])
    assert response.status_code < 500 or response.status_code == 503


def service_json() -> dict[str, str]:
    """The headers of a JSON request with the service token (the real-server tests)."""
    return {
        "Authorization": f"Bearer {settings.HOST_API_TOKEN[0]}",
        "Content-Type": "application/json",
    }


def test_a_chunked_body_over_the_limit_is_413_through_gunicorn(tmp_path, transactional_db):
    """No Content-Length to check up front: the middleware reads at most limit + 1 bytes."""
    limit = settings.HOST_MAX_BODY_BYTES

    def chunks(total: int):
        sent = 0
        while sent < total:
            piece = min(64 * 1024, total - sent)
            sent += piece
            yield b" " * piece

    with gunicorn(tmp_path) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        headers = service_json()
        over = http.post("/v1/conversations", content=chunks(limit + 1), headers=headers)
        assert over.status_code == 413, over.text[:300]
        assert over.json()["error"]["cause"] == "too_large"
        fits = http.post("/v1/conversations", content=chunks(limit), headers=headers)
        assert fits.status_code == 400  # read whole and parsed: blank JSON is malformed

        def body(data: dict):
            yield json.dumps(data).encode()  # a generator: httpx sends it chunked

        unknown = http.post(
            "/v1/conversations", content=body({"id": "chunk-1", "bogus": 1}), headers=headers
        )
        assert unknown.status_code == 400, unknown.text[:300]
        assert "bogus" in unknown.json()["error"]["details"]
        made = http.post(
            "/v1/conversations",
            content=body({"id": "chunk-1", "sharing": "public"}),
            headers=headers,
        )
        assert made.status_code == 201, made.text[:300]
        assert (made.json()["id"], made.json()["sharing"]) == ("chunk-1", "public")
        assert "Traceback" not in server.output()


def test_a_chunked_body_over_the_limit_is_413_through_uvicorn_while_it_arrives(
    tmp_path, transactional_db
):
    """`config.asgi` refuses the body as it passes the limit (`AsgiBodyLimit`): the server
    stops reading, so the client never gets to send the rest."""
    limit = settings.HOST_MAX_BODY_BYTES
    piece = 64 * 1024
    sent = 0

    def chunks():
        nonlocal sent
        while sent < 64 * limit:
            sent += piece
            yield b" " * piece

    with uvicorn(tmp_path) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        headers = service_json()
        try:
            over = http.post("/v1/conversations", content=chunks(), headers=headers)
        except httpx.TransportError:
            over = None  # the server answered and closed while the client was still sending
        if over is not None:
            assert over.status_code == 413, over.text[:300]
            assert over.json()["error"]["cause"] == "too_large"
        assert sent < 64 * limit  # never the whole 64 MiB
        assert http.get("/healthz").status_code == 200
        assert "Traceback" not in server.output()
