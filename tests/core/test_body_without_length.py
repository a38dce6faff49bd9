"""A request body without Content-Length (chunked) is read up to its limit + 1 byte, then either
refused with 413 or parsed like any other, under ASGI (uvicorn, the embedded `web:`) as under
WSGI (gunicorn): never silently ignored (spec 07: unknown fields → 400; limits before parsing)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core import signals
from django.core.handlers.asgi import ASGIHandler
from django.db import close_old_connections
from rest_framework.test import APIClient

from conversations.models import Conversation
from core.models import ApiToken
from core.services import token_create

pytestmark = pytest.mark.django_db

OVER_LIMIT = 3 * 1024 * 1024


def chunks(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.fixture
def bearer(owner) -> str:
    _, raw = token_create(user=owner, name="asgi", scope="write", expires_at=None)
    return raw


@pytest.fixture
def asgi_post(bearer):
    """POST a chunked body (no Content-Length) through Django's ASGI handler, in this thread
    and so in this test's transaction (as Django's own test clients do, the handler's
    connection cleanup at request start and end is held off)."""

    def post(path: str, body: bytes) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=ASGIHandler())
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:

                async def stream():
                    for piece in chunks(body):
                        yield piece

                headers = {"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"}
                return await c.post(path, content=stream(), headers=headers)

        signals.request_started.disconnect(close_old_connections)
        signals.request_finished.disconnect(close_old_connections)
        try:
            return async_to_sync(call)()
        finally:
            signals.request_started.connect(close_old_connections)
            signals.request_finished.connect(close_old_connections)

    return post


def test_asgi_a_chunked_body_is_sent_without_content_length(asgi_post, monkeypatch):
    seen: list[dict] = []
    original = ASGIHandler.create_request

    def spy(self, scope, body_file):
        seen.append(dict(scope["headers"]))
        return original(self, scope, body_file)

    monkeypatch.setattr(ASGIHandler, "create_request", spy)
    asgi_post("/v1/conversations", b"{}")
    assert b"content-length" not in seen[0]
    assert seen[0][b"transfer-encoding"] == b"chunked"


def test_asgi_a_chunked_body_with_an_unknown_field_is_a_400(asgi_post):
    body = json.dumps({"id": "mine-123", "sharing": "public", "bogus": 1}).encode()
    response = asgi_post("/v1/conversations", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["details"] == {"bogus": ["Unknown field."]}
    assert not Conversation.objects.exists()


def test_asgi_a_chunked_body_is_parsed_like_any_other(asgi_post):
    body = json.dumps({"id": "mine-123", "sharing": "public"}).encode()
    response = asgi_post("/v1/conversations", body)
    assert response.status_code == 201, response.text
    assert Conversation.objects.get().pk == "mine-123"
    assert Conversation.objects.get().sharing == "public"


@pytest.mark.parametrize("size", [OVER_LIMIT, None])
def test_asgi_a_chunked_body_over_the_limit_is_a_413(asgi_post, size):
    size = size or settings.HOST_MAX_BODY_BYTES + 1
    body = b'{"name":"' + b"x" * (size - 11) + b'"}'
    assert len(body) == size
    response = asgi_post("/v1/conversations", body)
    assert response.status_code == 413, response.text[:300]
    assert response.json()["error"]["cause"] == "too_large"
    assert not Conversation.objects.exists()


def test_asgi_a_chunked_body_of_exactly_the_limit_is_let_through(asgi_post):
    size = settings.HOST_MAX_BODY_BYTES
    body = b'{"name":"' + b"x" * (size - 11) + b'"}'
    response = asgi_post("/v1/conversations", body)
    assert response.status_code == 400  # read whole and parsed: the name is too long
    assert "name" in response.json()["error"]["details"]


def wsgi_chunked_post(bearer: str, body: bytes):
    """The WSGI shape of a chunked request (gunicorn): Transfer-Encoding, no Content-Length."""
    return APIClient().request(
        REQUEST_METHOD="POST",
        PATH_INFO="/v1/conversations",
        CONTENT_TYPE="application/json",
        HTTP_TRANSFER_ENCODING="chunked",
        HTTP_AUTHORIZATION=f"Bearer {bearer}",
        **{"wsgi.input": io.BytesIO(body)},
    )


def test_wsgi_a_chunked_body_is_parsed_and_unknown_fields_refused(bearer):
    body = json.dumps({"id": "mine-123", "sharing": "public", "bogus": 1}).encode()
    response = wsgi_chunked_post(bearer, body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["details"] == {"bogus": ["Unknown field."]}
    response = wsgi_chunked_post(bearer, json.dumps({"id": "mine-123"}).encode())
    assert response.status_code == 201, response.content
    assert Conversation.objects.get().pk == "mine-123"


def test_wsgi_a_chunked_body_over_the_limit_is_a_413(bearer):
    response = wsgi_chunked_post(bearer, b" " * (settings.HOST_MAX_BODY_BYTES + 1))
    assert response.status_code == 413
    assert ApiToken.objects.count() == 1


def test_asgi_an_oversized_body_is_refused_while_it_arrives_not_after(bearer):
    """`config.asgi` wraps Django's handler in `AsgiBodyLimit`: it stops receiving at the limit
    (Django's handler alone spools the whole body before any middleware can refuse it)."""
    from core.middleware import AsgiBodyLimit

    piece = 64 * 1024
    pieces_total = (8 * 1024 * 1024) // piece
    pulled = 0

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=AsgiBodyLimit(ASGIHandler()))
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:

            async def stream():
                nonlocal pulled
                for _ in range(pieces_total):
                    pulled += 1
                    yield b" " * piece

            headers = {"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"}
            return await c.post("/v1/conversations", content=stream(), headers=headers)

    response = async_to_sync(call)()
    assert response.status_code == 413
    assert response.json()["error"]["cause"] == "too_large"
    limit = settings.HOST_MAX_BODY_BYTES
    assert pulled <= limit // piece + 2 < pieces_total  # stopped just past the limit
    assert not Conversation.objects.exists()
