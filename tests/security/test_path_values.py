"""Hostile values in URL path segments (NUL, overlong) of the interaction and extension command
endpoints: answered like any id that names nothing, never a 500. On PostgreSQL a NUL in a query
parameter is a driver error and an overlong one a database error, so they must never reach a
query (run these on PostgreSQL too)."""

from __future__ import annotations

import pytest

from core.models import IdempotencyResult
from extensions_host.models import ExtensionRecord
from extensions_host.surfaces.models import Interaction, InteractionStatus

pytestmark = pytest.mark.django_db

UNUSABLE = ("a%00b", "%00", "x" * 300)


def error_of(response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["cause"], error["message"]


@pytest.mark.parametrize("call_id", [*UNUSABLE, "y" * 129])
def test_an_unusable_interaction_call_id_is_not_found(build_world, api, owner, call_id):
    build_world("private")
    response = api(owner).post(
        f"/v1/conversations/c/interactions/{call_id}/answer", {"answer": True}, format="json"
    )
    assert error_of(response) == (404, "not_found", "Interaction not found")
    assert Interaction.objects.get(call_id="call-1").status == InteractionStatus.PENDING


@pytest.mark.parametrize("value", UNUSABLE)
@pytest.mark.parametrize("key", [None, "k1"])
def test_an_unusable_extension_id_is_not_found(build_world, api, owner, value, key):
    build_world("private")
    client = api(owner)
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    for path in (
        f"/v1/extensions/{value}/commands/count",
        f"/v1/conversations/c/extensions/{value}/commands/note",
    ):
        response = client.post(path, {}, format="json", **headers)
        # an extension the roster does not hold is not found, as `GET /v1/extensions/{id}`
        assert error_of(response) == (404, "not_found", "Not found"), path
    assert not IdempotencyResult.objects.exists()


@pytest.mark.parametrize("value", UNUSABLE)
def test_an_unusable_conversation_id_on_a_command_is_not_found(build_world, api, owner, value):
    build_world("private")
    response = api(owner).post(
        f"/v1/conversations/{value}/extensions/guarded/commands/note", {"key": "k"}, format="json"
    )
    assert error_of(response) == (404, "not_found", "Conversation not found")
    assert not ExtensionRecord.objects.filter(extension_id="guarded").exists()


@pytest.mark.parametrize("value", UNUSABLE)
def test_an_unusable_command_name_is_an_unknown_command(build_world, api, owner, value):
    build_world("private")
    client = api(owner)
    for path in (
        f"/v1/extensions/guarded/commands/{value}",
        f"/v1/conversations/c/extensions/guarded/commands/{value}",
    ):
        response = client.post(path, {}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
        assert error_of(response) == (400, "invalid", "Extension command is unknown"), path
    assert not IdempotencyResult.objects.exists()


def test_an_idempotency_key_with_a_nul_is_refused(build_world, api, owner):
    build_world("private")
    response = api(owner).post(
        "/v1/extensions/guarded/commands/count", {}, format="json", HTTP_IDEMPOTENCY_KEY="a\x00b"
    )
    assert error_of(response) == (400, "invalid", "Idempotency-Key must be 1..256 characters")
    assert not IdempotencyResult.objects.exists()


@pytest.mark.parametrize("value", UNUSABLE)
def test_an_unusable_extension_id_on_the_roster_is_not_found(build_world, api, owner, staff, value):
    build_world("private")
    response = api(owner).get(f"/v1/extensions/{value}")
    assert error_of(response) == (404, "not_found", "Not found")
    response = api(staff).post(f"/v1/extensions/{value}/resume", {}, format="json")
    assert error_of(response) == (404, "not_found", "Not found")
