"""Mass assignment: fields a caller must never set (owner, status, grants, is_staff,
settled_sequence, revision, …) added to EVERY writable body → 400 naming each of them, and
nothing changed in the database (spec 08: 0 accepted; spec 07: unknown fields are rejected,
never silently ignored for writes).

The operations come from the generated schema, so a new write route is covered the day it
lands; a field an operation legitimately takes (e.g. `status` when settling) is not injected
into that operation. The `/v1/ext/…` catch-all is the extension's own handler and is excluded.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from drf_spectacular.generators import SchemaGenerator

from conversations.models import Conversation, Run, Submission
from core.models import ApiToken
from extensions_host.models import RosterEntry
from tests.security.conftest import api_operations

pytestmark = pytest.mark.django_db

FORBIDDEN = {
    "owner": 2,
    "owner_id": 2,
    "user": 2,
    "user_id": 2,
    "is_staff": True,
    "is_superuser": True,
    "admin": True,
    "status": "settled",
    "grants": ["send", "routes"],
    "admitted_grants": ["send", "routes"],
    "settled_sequence": 999,
    "revision": "forged",
    "version": 999,
    "scope": "runtime",
    "created_at": "2000-01-01T00:00:00Z",
}
# bodies an operation needs besides the injected fields (None: an empty object will do)
BASES = {
    "conversations_extension_command": {"key": "k"},
}
# operation id → the known defect (xfail, strict) until it is fixed; empty when none is known
DEFECTS: dict[str, str] = {}


def writable_operations():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    for op in api_operations():
        if op.method not in ("post", "put", "patch") or op.extensions.get("x-fuzz-exclude"):
            continue
        body = schema["paths"][op.path][op.method].get("requestBody", {})
        ref = body.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
        allowed = set(components[ref.rsplit("/", 1)[1]].get("properties", {})) if ref else set()
        marks = (
            [pytest.mark.xfail(strict=True, reason=DEFECTS[op.operation_id])]
            if op.operation_id in DEFECTS
            else []
        )
        yield pytest.param(op, allowed, id=str(op), marks=marks)


def snapshot() -> dict[str, list]:
    users = get_user_model().objects
    return {
        "users": list(users.values_list("pk", "username", "is_staff", "is_superuser")),
        "conversations": list(
            Conversation.objects.values_list("pk", "owner_id", "sharing", "archived", "version")
        ),
        "runs": list(Run.objects.values_list("pk", "status", "settled_sequence")),
        "submissions": list(Submission.objects.values_list("pk", "status")),
        "roster": list(
            RosterEntry.objects.values_list("pk", "status", "admitted_grants", "revision")
        ),
        "tokens": list(ApiToken.objects.values_list("pk", "user_id", "scope", "revoked_at")),
    }


@pytest.mark.parametrize(("operation", "allowed"), writable_operations())
def test_no_writable_body_accepts_a_field_the_caller_must_not_set(
    build_world, client_for, member, operation, allowed
):
    world = build_world("private")
    injected = {k: v for k, v in FORBIDDEN.items() if k not in allowed}
    for key in ("owner", "owner_id", "user", "user_id"):
        if key in injected:
            injected[key] = member.pk
    body = {**(BASES.get(operation.operation_id) or {}), **injected}
    url = world.url(operation.path)
    owner, runtime = client_for("owner"), client_for("service")
    before = snapshot()
    # as the owner where the owner may write; the runtime (an admin) everywhere else
    response = getattr(owner, operation.method)(url, body, format="json")
    if response.status_code in (401, 403):
        response = getattr(runtime, operation.method)(url, body, format="json")
    assert response.status_code == 400, (response.status_code, response.content[:500])
    error = response.json()["error"]
    assert error["cause"] == "invalid"
    named = str(error.get("details", {}))
    assert all(key in named for key in injected), (sorted(injected), error)
    assert snapshot() == before


def test_the_runtime_cannot_forge_a_settled_sequence_or_another_owner(build_world, client_for):
    """The fields a body may carry are still checked against what they claim."""
    world = build_world("private")
    runtime = client_for("service")
    run_id = world.ids["run_id"]
    response = runtime.post(
        f"/v1/runs/{run_id}/settle",
        {"status": "unanswered", "reason": "r", "settled_sequence": 1},
        format="json",
    )
    assert response.status_code == 400
    assert Run.objects.get(pk=run_id).settled_sequence is None
    owner_id = Conversation.objects.get(pk="c").owner_id
    patch = client_for("owner").patch(
        "/v1/conversations/c", {"name": "n", "owner": {"id": 99}}, format="json"
    )
    assert patch.status_code == 400
    assert Conversation.objects.get(pk="c").owner_id == owner_id
    assert Conversation.objects.get(pk="c").name != "n"
