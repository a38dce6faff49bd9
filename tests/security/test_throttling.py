"""Per-principal write throttling on every write route: over the rate → 429
`limit/throttled` with `Retry-After`, documented in the schema; reads and the runtime's
service principal are not throttled (`tests/core` covers the basic 2/min case on one route)."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

from core.throttling import WriteRateThrottle
from tests.security.conftest import WRITE_METHODS, api_operations

pytestmark = pytest.mark.django_db

WRITES = [op for op in api_operations() if op.method in WRITE_METHODS]


@pytest.fixture
def one_write_a_minute():
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
