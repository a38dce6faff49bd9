"""Text a client can send that Python handles differently from ASCII must still get a clear
4xx, never a 500: a lone surrogate (a valid JSON escape, "\\ud800") that a 400 names back, a
header byte above 0x7F (servers hand it through as a Latin-1 character), and digits
`str.isdigit` takes but `int` refuses ("²"). Found by an audit on PostgreSQL."""

from __future__ import annotations

import socket

import pytest
from django.conf import settings
from django.test import RequestFactory

from conversations.models import Conversation, Submission
from core import clock
from core.models import ApiToken
from core.validation import decimal_number
from extensions_host.surfaces.events import last_event_id
from tests.security.live import gunicorn, uvicorn

pytestmark = pytest.mark.django_db


def send(client, method: str, path: str, raw: str):
    client.raise_request_exception = False  # a 500 is a status here, not the test's error
    return getattr(client, method)(path, data=raw, content_type="application/json")


def assert_invalid(response, field: str | None = None) -> None:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    error = response.json()["error"]
    assert (error["category"], error["cause"]) == ("contract", "invalid")
    if field is not None:
        assert any(field in key for key in error["details"]), error


@pytest.mark.parametrize(
    ("method", "path", "raw", "field"),
    [
        ("post", "/v1/conversations", '{"\\ud800": 1}', None),
        ("post", "/v1/auth/tokens", '{"name": "n", "a\\ud800": 1}', None),
        ("patch", "/v1/conversations/c", '{"sharing": "\\ud800"}', "sharing"),
        ("post", "/v1/auth/tokens", '{"scope": "\\ud800"}', "scope"),
        (
            "post",
            "/v1/conversations/c/submissions",
            '{"parts": [{"type": "text", "text": "t"}], "when_busy": "\\ud800"}',
            "when_busy",
        ),
        ("post", "/v1/conversations/c/submissions", '{"parts": [{"type": "\\ud800"}]}', "parts"),
    ],
    ids=["unknown-key", "nested-unknown-key", "sharing", "scope", "when_busy", "part-type"],
)
def test_a_400_that_names_a_lone_surrogate_back_is_still_a_400(
    api, owner, method, path, raw, field
):
    Conversation.objects.create(id="c", owner=owner, last_activity_at=clock.now())
    client = api(owner)
    tokens = ApiToken.objects.count()

    response = send(client, method, path, raw)

    assert_invalid(response, field)
    assert b"\\ud800" in response.content  # the same JSON, the character escaped
    assert Conversation.objects.get(pk="c").sharing == "private"
    assert (Conversation.objects.count(), ApiToken.objects.count()) == (1, tokens)
    assert not Submission.objects.exists()


def test_the_runtime_and_artifact_endpoints_too(api):
    service = api("service")
    assert_invalid(send(service, "post", "/v1/runs/claim", '{"\\ud800": 1}'))
    assert_invalid(
        send(
            service,
            "post",
            "/v1/artifacts/followup/fail",
            '{"operation_id": "op", "status": "\\ud800", "message": "m"}',
        ),
        "status",
    )


def test_unicode_answers_stay_utf_8(api, owner):
    response = api(owner).post("/v1/conversations", {"id": "c", "name": "héllo"}, format="json")
    assert response.status_code == 201
    assert "héllo".encode() in response.content


@pytest.mark.parametrize("value", ["\xb2", "\xe9t\xe9", "hy_\xff"])
@pytest.mark.parametrize("path", ["/v1/auth/check", "/v1/conversations"])
def test_a_bearer_token_with_a_byte_above_0x7f_is_a_401(api, path, value):
    client = api(None)
    client.raise_request_exception = False
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {value}")
    assert response.status_code == 401, (response.status_code, response.content[:300])
    assert response.json()["error"]["cause"] == "unauthenticated"


def test_the_service_token_still_signs_in(api):
    client = api(None)
    response = client.get(
        "/v1/auth/check", HTTP_AUTHORIZATION=f"Bearer {settings.HOST_API_TOKEN[0]}"
    )
    assert response.status_code == 200


def test_a_metrics_bearer_with_a_byte_above_0x7f_is_refused(client, settings):
    settings.HOST_METRICS_TOKEN = "m-token"
    settings.HOST_METRICS_NETWORKS = []
    client.raise_request_exception = False
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer \xb2", REMOTE_ADDR="192.0.2.1")
    right = client.get("/metrics", HTTP_AUTHORIZATION="Bearer m-token", REMOTE_ADDR="192.0.2.1")
    assert wrong.status_code in (401, 403, 404) and right.status_code == 200


@pytest.mark.parametrize(
    ("raw", "number"),
    [
        ("42", 42),
        ("0", 0),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", None),
        ("²", None),
        ("١٢", None),
        ("-1", None),
        ("1_0", None),
        (" 1", None),
        ("", None),
    ],
)
def test_a_decimal_number_is_ascii_digits_within_the_maximum(raw, number):
    assert decimal_number(raw, maximum=2**63 - 1) == number


@pytest.mark.parametrize(
    ("header", "query", "version"),
    [("7", "", 7), ("\xb2", "", None), ("", "?last_event_id=%C2%B2", None), ("x", "", None)],
)
def test_a_last_event_id_that_is_not_a_version_is_ignored(header, query, version):
    request = RequestFactory().get(f"/v1/conversations/c/events{query}", HTTP_LAST_EVENT_ID=header)
    assert last_event_id(request) == version


def raw_request(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("serve", [gunicorn, uvicorn], ids=["gunicorn", "uvicorn"])
def test_over_real_http_these_bytes_are_4xx(tmp_path, serve):
    """The servers as shipped hand the raw bytes through: the same answers."""
    token = settings.HOST_API_TOKEN[0].encode()
    body = b'{"\\ud800": 1}'
    requests = {
        "bearer 0xB2": b"GET /v1/auth/check HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer \xb2\r\nConnection: close\r\n\r\n",
        "surrogate key": b"POST /v1/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + token + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body,
    }
    with serve(tmp_path) as server:
        statuses = {
            name: int(raw_request(server.url, request).split(b" ", 2)[1])
            for name, request in requests.items()
        }
        log = server.output()
    assert statuses == {"bearer 0xB2": 401, "surrogate key": 400}, statuses
    assert "Traceback" not in log, log[-3000:]
