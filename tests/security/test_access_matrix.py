"""Object-level access on the conversation- and world-scoped endpoints that
`tests/conversations/test_access.py` does not cover (projection, extension commands, slash
commands, interactions, artifact world reads, operation summaries, tokens; the event stream's access
is tested through uvicorn in `tests/surfaces/test_events.py`):
user A (`owner`) vs user B (`other`), an admin, anonymous, for each sharing.

Spec 01 access: authentication first (401, except reads of public conversations); a
conversation the caller cannot read → 404 before any other check; readable but not writable →
403; lists never show a row the caller cannot read.
"""

from __future__ import annotations

import pytest

from conversations.models import Conversation
from core.models import ApiToken
from extensions_host.models import ExtensionRecord

pytestmark = pytest.mark.django_db

PERSONAS = ("owner", "other", "admin", "anonymous")
SHARINGS = ("private", "users", "public")

# (method, path, body, kind, success status)
ENDPOINTS = [
    ("get", "/v1/conversations/{conversation_id}/projection", None, "read", 200),
    ("get", "/v1/conversations/{conversation_id}/interactions", None, "read", 200),
    ("get", "/v1/worlds/{world_id}/artifacts", None, "read", 200),
    ("get", "/v1/worlds/{world_id}/artifacts/followups", None, "read", 200),
    ("get", "/v1/artifacts/operations/{operation_id}", None, "read", 200),
    (
        "post",
        "/v1/conversations/{conversation_id}/extensions/{extension_id}/commands/note",
        {"key": "k", "text": "t"},
        "write",
        200,
    ),
    ("post", "/v1/conversations/{conversation_id}/commands/help", {}, "write", 200),
    (
        "post",
        "/v1/conversations/{conversation_id}/interactions/{call_id}/answer",
        {"answer": {"approve": True}},
        "write",
        200,
    ),
]


def expected(persona: str, sharing: str, kind: str, success: int) -> int:
    if persona in ("owner", "admin"):
        return success
    if persona == "anonymous":
        return success if (kind == "read" and sharing == "public") else 401
    if sharing == "private":
        return 404
    return success if kind == "read" else 403


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize(("method", "path", "body", "kind", "success"), ENDPOINTS)
def test_every_capability_endpoint_follows_the_access_matrix(
    build_world, client_for, persona, sharing, method, path, body, kind, success
):
    world = build_world(sharing)
    response = getattr(client_for(persona), method)(world.url(path), body, format="json")
    want = expected(persona, sharing, kind, success)
    assert response.status_code == want, (response.status_code, response.content)
    if want >= 400:
        assert set(response.json()) == {"error"}
    if want == 404:
        # indistinguishable from a conversation that does not exist
        missing = getattr(client_for(persona), method)(
            world.url(path).replace("/c/", "/nope/", 1), body, format="json"
        )
        assert missing.status_code == 404
        assert missing.json()["error"]["message"] == response.json()["error"]["message"]
    if want == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("persona", ["other", "anonymous"])
def test_a_refused_write_changes_nothing(build_world, client_for, persona, sharing):
    world = build_world(sharing)
    client = client_for(persona)
    client.post(
        world.url("/v1/conversations/{conversation_id}/extensions/{extension_id}/commands/note"),
        {"key": "k"},
        format="json",
    )
    client.post(
        world.url("/v1/conversations/{conversation_id}/interactions/{call_id}/answer"),
        {"answer": "no"},
        format="json",
    )
    client.post(world.url("/v1/conversations/{conversation_id}/commands/help"), {}, format="json")
    assert not ExtensionRecord.objects.filter(extension_id="guarded").exists()
    listed = client_for("owner").get(world.url("/v1/conversations/{conversation_id}/interactions"))
    assert [i["status"] for i in listed.json()["results"]] == ["pending"]


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize(("persona", "status"), [("owner", 403), ("other", 403), ("admin", 200)])
def test_the_artifact_debug_view_is_for_admins_only(
    build_world, client_for, persona, status, sharing
):
    world = build_world(sharing)
    response = client_for(persona).get(world.url("/v1/worlds/{world_id}/artifacts/debug"))
    assert response.status_code == status, response.content
    assert client_for("anonymous").get(world.url("/v1/worlds/c/artifacts/debug")).status_code == 401


@pytest.mark.parametrize("sharing", SHARINGS)
def test_an_operation_summary_follows_its_worlds_access(build_world, client_for, sharing):
    world = build_world(sharing)
    url = world.url("/v1/artifacts/operations/{operation_id}")
    other = client_for("other").get(url)
    assert other.status_code == (404 if sharing == "private" else 200)
    missing = client_for("other").get("/v1/artifacts/operations/op-missing")
    assert missing.status_code == 404
    if sharing == "private":
        assert other.json() == missing.json()


def test_token_lists_hold_only_the_callers_tokens_and_a_foreign_token_cannot_be_revoked(
    build_world, client_for, owner, member
):
    world = build_world("users")
    other = client_for("other")
    listed = other.get("/v1/auth/tokens").json()["results"]
    foreign = ApiToken.objects.exclude(user=member).values_list("pk", flat=True)
    assert listed and not {row["id"] for row in listed} & set(foreign)
    response = other.delete(f"/v1/auth/tokens/{world.ids['token_id']}")
    assert response.status_code == 404
    assert ApiToken.objects.get(pk=world.ids["token_id"]).revoked_at is None


@pytest.mark.parametrize("persona", ["other", "anonymous"])
def test_no_list_shows_a_foreign_private_row(build_world, client_for, member, persona):
    """Every list endpoint, as B: nothing of A's private conversation appears in it."""
    build_world("private")
    mine = Conversation.objects.get(pk="c").last_activity_at
    Conversation.objects.create(id="mine", owner=member, sharing="private", last_activity_at=mine)
    client = client_for(persona)
    for url in (
        "/v1/conversations",
        "/v1/conversations?owner=owner",
        "/v1/extensions",
        "/v1/commands",
        "/v1/jobs",
        "/v1/auth/tokens",
    ):
        response = client.get(url)
        if persona == "anonymous":
            assert response.status_code == 401, url
            continue
        assert response.status_code == 200, (url, response.content)
        text = response.content.decode()
        assert '"c"' not in text and '"b"' not in text, url
        assert "op-1" not in text and "call-1" not in text, url
    if persona == "other":
        rows = client.get("/v1/conversations").json()["results"]
        assert [row["id"] for row in rows] == ["mine"]


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize("page", ["/inspect/c", "/inspect/c/fragments"])
def test_the_inspector_follows_the_access_matrix_with_a_session(
    build_world, owner, member, staff, persona, sharing, page
):
    from django.test import Client

    build_world(sharing)
    client = Client()
    user = {"owner": owner, "other": member, "admin": staff}.get(persona)
    if user is not None:
        client.force_login(user)
    response = client.get(page)
    if persona == "anonymous":
        # the page sends visitors to the login; its JSON fragments answer 401
        assert response.status_code == (302 if page == "/inspect/c" else 401)
    else:
        assert response.status_code == expected(persona, sharing, "read", 200)
