from __future__ import annotations

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.core.handlers.asgi import ASGIHandler
from django.db import InterfaceError, OperationalError, ProgrammingError
from django.test import Client
from rest_framework.test import APIClient

from conversations.models import Conversation
from core import clock, services
from core.errors import MSG_INVALID_BODY, HostError, bound_text
from core.validation import PROBLEM_NOT_UNICODE, PROBLEM_NUL

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("cause", "status"),
    [
        ("invalid", 400),
        ("unauthenticated", 401),
        ("forbidden", 403),
        ("not_found", 404),
        ("conflict", 409),
        ("closed", 409),
        ("too_large", 413),
        ("rejected", 422),
        ("throttled", 429),
        ("unavailable", 503),
    ],
)
def test_the_status_follows_the_cause(cause, status):
    assert HostError("contract", cause, "m").status == status


def test_runtime_closed_means_shutting_down_and_is_503():
    assert HostError("runtime", "closed", "Host is shutting down").status == 503
    assert HostError("contract", "closed", "Conversation is archived").status == 409


def test_reasons_are_bounded_with_an_ellipsis():
    assert bound_text("x" * 600, 512) == "x" * 511 + "…"
    assert len(bound_text("x" * 600, 512)) == 512
    assert bound_text("short", 512) == "short"


def test_malformed_json_is_a_400_in_the_error_model(api, owner):
    response = api(owner).post("/v1/auth/tokens", data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["category"] == "contract"
    assert response.json()["error"]["cause"] == "invalid"


def test_wrong_types_are_a_400_with_field_details(api, owner):
    response = api(owner).post("/v1/auth/tokens", {"scope": ["write"]}, format="json")
    assert response.status_code == 400
    assert "scope" in response.json()["error"]["details"]


def test_a_body_over_the_limit_is_413_before_parsing(api, owner, settings):
    settings.HOST_MAX_BODY_BYTES = 2048
    body = '{"name": "' + "x" * 2048 + '"}'
    response = api(owner).post("/v1/auth/tokens", data=body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"] == {
        "category": "limit",
        "cause": "too_large",
        "message": "Request body is too large",
    }


def test_unknown_api_paths_answer_404_in_the_error_model():
    response = APIClient().get("/v1/no-such-thing")
    assert response.status_code == 404
    assert response.json()["error"]["cause"] == "not_found"


# the API paths served by plain Django views (the SSE stream, `/metrics`) and the DRF probes
READ_ONLY_PATHS = ["/v1/conversations/c1/events", "/metrics", "/healthz", "/readyz"]


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
@pytest.mark.parametrize("path", READ_ONLY_PATHS)
def test_a_write_to_a_read_only_api_path_is_405_in_the_error_model_not_a_csrf_page(
    owner, path, method
):
    Conversation.objects.create(
        id="c1", owner=owner, sharing="public", last_activity_at=clock.now()
    )
    client = Client(enforce_csrf_checks=True)  # as a real server: CsrfViewMiddleware checks
    for auth in ({}, {"HTTP_AUTHORIZATION": "Bearer test-service-token"}):
        response = getattr(client, method)(path, **auth)
        assert response.status_code == 405, (path, method, response.content[:80])
        assert response["Content-Type"].startswith("application/json")
        assert response.json()["error"] == {
            "category": "contract",
            "cause": "invalid",
            "message": "Method not allowed",
        }
        assert "GET" in response["Allow"]


def test_readyz_is_not_ready_until_beat_ticks_and_again_when_it_goes_quiet(fake_clock, settings):
    settings.BEAT_STALE_SECONDS = 60
    from django.core.cache import cache

    cache.delete(services.BEAT_KEY)
    client = APIClient()
    first = client.get("/readyz")
    assert first.status_code == 503
    assert first.json()["checks"]["beat"] is False
    services.beat_tick()
    ready = client.get("/readyz")
    assert ready.json()["checks"]["beat"] is True
    assert ready.json()["checks"]["database"] is True
    fake_clock.advance(seconds=61)
    stale = client.get("/readyz")
    assert stale.status_code == 503
    assert stale.json()["checks"]["beat"] is False


def test_the_openapi_schema_is_served():
    response = APIClient().get("/v1/schema", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")
    assert APIClient().get("/v1/schema")["Content-Type"].startswith("application/vnd.oai.openapi")


def test_the_schemas_errors_are_the_one_json_error_body():
    response = APIClient().get("/v1/schema", HTTP_AUTHORIZATION="Bearer nope")
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"]["cause"] == "unauthenticated"


def test_a_command_documents_its_idempotent_replay_header(api, owner):
    schema = api(owner).get("/v1/schema", HTTP_ACCEPT="application/json").json()
    for path in (
        "/v1/extensions/{extension_id}/commands/{name}",
        "/v1/conversations/{conversation_id}/extensions/{extension_id}/commands/{name}",
    ):
        headers = schema["paths"][path]["post"]["responses"]["200"]["headers"]
        assert headers["Idempotent-Replayed"]["schema"]["enum"] == ["true"]


def test_writes_over_the_rate_are_throttled_with_retry_after(api, owner, fake_clock):
    from django.core.cache import cache

    from core.throttling import WriteRateThrottle

    cache.clear()
    original = WriteRateThrottle.THROTTLE_RATES
    WriteRateThrottle.THROTTLE_RATES = {"writes": "2/min"}
    try:
        client = api(owner)
        statuses = [client.post("/v1/auth/tokens", {}, format="json").status_code for _ in range(3)]
        assert statuses == [201, 201, 429]
        response = client.post("/v1/auth/tokens", {}, format="json")
        assert response["Retry-After"].isdigit()
        assert response.json()["error"]["cause"] == "throttled"
        assert client.get("/v1/auth/tokens").status_code == 200  # reads are not throttled
    finally:
        WriteRateThrottle.THROTTLE_RATES = original
        cache.clear()


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("server closed the connection unexpectedly"),
        InterfaceError("connection already closed"),
    ],
)
def test_a_database_that_is_down_answers_503_with_retry_after_not_500(
    api, owner, monkeypatch, error
):
    def down(**kwargs):
        raise error

    monkeypatch.setattr("conversations.api.selectors.conversations_list", down)

    response = api(owner).get("/v1/conversations")

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert response.json()["error"]["cause"] == "unavailable"


def test_a_write_that_meets_a_locked_database_answers_the_503_its_schema_documents(
    api, owner, monkeypatch
):
    """SQLite's "database is locked" (embedded mode) is transient like a lost PostgreSQL
    connection: 503 + Retry-After on any operation, so every operation documents it."""
    from drf_spectacular.generators import SchemaGenerator

    Conversation.objects.create(id="c1", owner=owner, last_activity_at=clock.now())

    def locked(**kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr("conversations.api.services.submission_submit", locked)
    response = api(owner).post(
        "/v1/conversations/c1/submissions",
        {"parts": [{"type": "text", "text": "hi"}]},
        format="json",
    )
    assert (response.status_code, response["Retry-After"]) == (503, "1")
    assert response.json()["error"]["cause"] == "unavailable"
    schema = SchemaGenerator().get_schema(request=None, public=True)
    documented = schema["paths"]["/v1/conversations/{conversation_id}/submissions"]["post"]
    assert "Retry-After" in documented["responses"]["503"]["headers"]


def test_every_operation_that_reads_the_database_documents_its_503():
    """Only the liveness probe reads no database (no authentication either); the event stream
    answers an unavailable database inside the stream (`event: unavailable`)."""
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    undocumented = {
        (method, path)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if "503" not in operation["responses"] and not operation.get("x-streaming")
    }
    assert undocumented == {("get", "/healthz")}


def test_a_database_error_that_is_not_transient_is_still_a_server_error(api, owner, monkeypatch):
    def broken(**kwargs):
        raise ProgrammingError("column does not exist")

    monkeypatch.setattr("conversations.api.selectors.conversations_list", broken)

    with pytest.raises(ProgrammingError):
        api(owner).get("/v1/conversations")


# --- query strings the database could not store (core.middleware.QueryStringMiddleware) --------

QUERY_PROBLEMS = [
    ("probe=a%00b", {"probe": [PROBLEM_NUL]}),
    ("probe=ok&probe=%00&other=%00", {"probe": [PROBLEM_NUL], "other": [PROBLEM_NUL]}),
    ("a%00b=1", {"query": [PROBLEM_NUL]}),  # in a name: reported under `query`
    ("probe=%FF", {"probe": [PROBLEM_NOT_UNICODE]}),  # not UTF-8
    ("probe=%ED%A0%80", {"probe": [PROBLEM_NOT_UNICODE]}),  # a lone surrogate
]


@pytest.mark.parametrize(("query", "details"), QUERY_PROBLEMS)
@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/v1/conversations"])
def test_a_query_the_database_cannot_store_is_a_400_in_the_error_model_on_api_paths(
    path, query, details
):
    """Even where no view reads the parameter: the body the API's own query validation gives."""
    response = Client().get(f"{path}?{query}", HTTP_AUTHORIZATION="Bearer test-service-token")

    assert response.status_code == 400, response.content[:200]
    assert response.json()["error"] == {
        "category": "contract",
        "cause": "invalid",
        "message": MSG_INVALID_BODY,
        "details": details,
    }
    assert response["X-Request-Id"]


def test_a_query_the_database_cannot_store_is_a_plain_400_page_elsewhere():
    response = Client().get("/admin/login/?next=/admin/%00")

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert b"Bad Request (400)" in response.content


def test_any_text_the_database_can_store_passes_the_query_check():
    client = Client()
    for query in ("q=%C3%A9t%C3%A9+%F0%9F%98%80", "q=été", "q=&flag", "q=%2500", "q=a%2Bb&q=%26"):
        assert client.get(f"/healthz?{query}").status_code == 200, query
    assert client.get("/admin/login/?next=/admin/%C3%A9").status_code == 200


@pytest.mark.parametrize(("query", "status"), [(b"probe=%00", 400), (b"probe=%C3%A9", 200)])
def test_asgi_a_query_the_database_cannot_store_is_a_400_too(query, status):
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=ASGIHandler())
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.get(httpx.URL("/healthz", query=query))

    response = async_to_sync(call)()

    assert response.status_code == status
    if status == 400:
        assert response.json()["error"]["details"] == {"probe": [PROBLEM_NUL]}
