"""Per-principal write throttling on every write route: over the rate → 429
`limit/throttled` with `Retry-After`, documented in the schema; reads and the runtime's
service principal are not throttled (`tests/core` covers the basic 2/min case on one route)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from django.core.cache import cache
from drf_spectacular.generators import SchemaGenerator
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from core.auth import Principal
from core.throttling import WriteRateThrottle
from tests.security.conftest import WRITE_METHODS, api_operations

pytestmark = pytest.mark.django_db

WRITES = [op for op in api_operations() if op.method in WRITE_METHODS]


@pytest.fixture
def one_write_a_minute(fake_clock):
    # the window is clock-aligned: a frozen clock keeps both writes in one minute
    original = WriteRateThrottle.THROTTLE_RATES
    WriteRateThrottle.THROTTLE_RATES = {"writes": "1/min"}
    yield
    WriteRateThrottle.THROTTLE_RATES = original


@pytest.mark.parametrize("operation", WRITES, ids=str)
def test_every_write_route_answers_429_with_retry_after_over_the_rate(
    one_write_a_minute, build_world, api, staff, operation
):
    world = build_world("private")
    client = api(staff, scope="runtime")  # an admin with a runtime token passes every permission
    url = world.url(operation.path)
    first = getattr(client, operation.method)(url, {}, format="json")
    assert first.status_code != 429 and first.status_code < 500, first.content[:300]
    second = getattr(client, operation.method)(url, {}, format="json")
    assert second.status_code == 429, (second.status_code, second.content[:300])
    assert second["Retry-After"].isdigit() and 1 <= int(second["Retry-After"]) <= 60
    assert second.json()["error"] == {
        "category": "limit",
        "cause": "throttled",
        "message": "Too many requests",
    }


def test_every_write_route_documents_its_429():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    missing = [
        str(op) for op in WRITES if "429" not in schema["paths"][op.path][op.method]["responses"]
    ]
    assert missing == []


def test_reads_and_the_service_principal_are_not_throttled(
    one_write_a_minute, build_world, api, owner
):
    build_world("private")
    reader = api(owner)
    assert [reader.get("/v1/conversations/c").status_code for _ in range(5)] == [200] * 5
    runtime = api("service")
    statuses = [
        runtime.post("/v1/conversations/b/runs", {}, format="json").status_code for _ in range(5)
    ]
    assert 429 not in statuses, statuses


# --- the window: atomic on the cache, exact under concurrency --------------------------------

REDIS_URL = "redis://127.0.0.1:6379/9"  # db 9: the tests' own


def _write_request(user_pk: int) -> Request:
    """A write by an authenticated principal, as the throttle sees it after authentication."""
    request = Request(APIRequestFactory().post("/v1/conversations"))
    user = SimpleNamespace(pk=user_pk, is_authenticated=True)
    request.user = user
    request.auth = Principal(
        user=user, name="u", email="", admin=False, service=False, method="token"
    )
    return request


@pytest.fixture
def redis_cache(settings):
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except redis.exceptions.ConnectionError:
        pytest.skip(f"needs Redis at {REDIS_URL}")
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            # this run's own keys; they expire with their window
            "KEY_PREFIX": f"throttle-test-{uuid.uuid4().hex}",
        }
    }


def test_concurrent_writes_never_exceed_the_rate_on_redis(redis_cache, fake_clock, monkeypatch):
    monkeypatch.setattr(WriteRateThrottle, "THROTTLE_RATES", {"writes": "100/min"})
    fake_clock.set(1_767_225_630_000)  # mid-minute: the whole burst falls in one window
    clients, attempts = 8, 40
    start = threading.Barrier(clients)

    def client() -> int:
        start.wait()
        return sum(
            WriteRateThrottle().allow_request(_write_request(7), view=None) for _ in range(attempts)
        )

    with ThreadPoolExecutor(clients) as pool:
        admitted = sum(pool.map(lambda _: client(), range(clients)))
    assert admitted == 100


def test_the_window_is_fixed_refusals_are_not_counted_and_retry_after_is_its_end(
    fake_clock, monkeypatch
):
    cache.clear()
    monkeypatch.setattr(WriteRateThrottle, "THROTTLE_RATES", {"writes": "3/min"})
    fake_clock.set(1_767_225_600_000 + 45_500)  # 45.5 s into a minute

    def attempt(user_pk: int = 1) -> tuple[bool, float | None]:
        throttle = WriteRateThrottle()
        return throttle.allow_request(_write_request(user_pk), view=None), throttle.wait()

    assert [attempt()[0] for _ in range(3)] == [True, True, True]
    assert attempt() == (False, 15)  # 14.5 s to the minute's end, rounded up
    assert attempt(user_pk=2)[0] is True  # per principal
    fake_clock.advance(ms=14_499)
    assert attempt() == (False, 1)
    fake_clock.advance(ms=1)  # a new minute: a fresh window (refusals used none of it)
    assert [attempt()[0] for _ in range(4)] == [True, True, True, False]
    assert attempt()[1] == 60
    cache.clear()


def test_over_the_rate_the_api_answers_429_with_the_seconds_left_in_the_window(
    api, owner, fake_clock, monkeypatch
):
    cache.clear()
    monkeypatch.setattr(WriteRateThrottle, "THROTTLE_RATES", {"writes": "1/min"})
    fake_clock.set(1_767_225_600_000 + 50_000)
    client = api(owner)
    assert client.post("/v1/auth/tokens", {}, format="json").status_code == 201
    refused = client.post("/v1/auth/tokens", {}, format="json")
    assert refused.status_code == 429
    assert refused["Retry-After"] == "10"
    fake_clock.advance(seconds=10)
    assert client.post("/v1/auth/tokens", {}, format="json").status_code == 201
    cache.clear()


def test_writes_go_through_unlimited_and_logged_while_the_cache_is_unreachable(
    settings, api, staff, caplog
):
    settings.CACHES = {
        **settings.CACHES,
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/8",  # nothing listens on port 1
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        },
    }
    original = WriteRateThrottle.THROTTLE_RATES
    WriteRateThrottle.THROTTLE_RATES = {"writes": "1/min"}
    try:
        client = api(staff)
        statuses = [client.post("/v1/auth/tokens", {}, format="json").status_code for _ in "ab"]
    finally:
        WriteRateThrottle.THROTTLE_RATES = original
    assert statuses == [201, 201]
    assert [r.event for r in caplog.records if hasattr(r, "event")].count(
        "write_limit_unavailable"
    ) == 2
