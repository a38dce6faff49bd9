"""The access matrix on every conversation endpoint, list and detail (spec 01 access).

Private → 404 for other users (no existence leak); `users`/`public` → reads 200, writes 403;
anonymous → 401 except reads of public conversations; admins act as owners; lists never
contain a row the principal cannot read; runtime endpoints need the runtime principal.
"""

from __future__ import annotations

import pytest

from conversations.models import Conversation, Run, Submission

pytestmark = pytest.mark.django_db

TEXT = [{"type": "text", "text": "hi"}]
PERSONAS = ("owner", "other", "admin", "anonymous")
SHARINGS = ("private", "users", "public")

# (method, path, body, kind, success status)
CONVERSATION_ENDPOINTS = [
    ("get", "/v1/conversations/c", None, "read", 200),
    ("get", "/v1/conversations/c/entries", None, "read", 200),
    ("get", "/v1/runs/{run}", None, "read", 200),
    ("patch", "/v1/conversations/c", {"name": "renamed"}, "write", 200),
    ("post", "/v1/conversations/c/fork", {"at": "{entry}"}, "write", 201),
    ("post", "/v1/conversations/c/submissions", {"parts": TEXT}, "write", 201),
    ("delete", "/v1/conversations/c/submissions/{queued}", None, "write", 200),
]

RUNTIME_ENDPOINTS = [
    (
        "post",
        "/v1/conversations/c/entries",
        {"run_id": "{live}", "role": "assistant", "content": TEXT},
    ),
    ("post", "/v1/conversations/c/runs", {}),
    ("post", "/v1/runs/claim", {}),
    ("post", "/v1/runs/{live}/heartbeat", {}),
    ("post", "/v1/runs/{live}/steers", {}),
    ("post", "/v1/runs/{live}/settle", {"status": "unanswered", "reason": "r"}),
]


# conversation-scoped endpoints with input that does not validate: the access checks answer
# first (401, 404, 403), the input's 400 only reaches callers who may act (spec 01, access)
MALFORMED_JSON = "{"
INVALID_INPUT_ENDPOINTS = [
    ("get", "/v1/conversations/c/entries?limit=0", None, "read", 400),
    ("get", "/v1/conversations/c/interactions?limit=0", None, "read", 400),
    ("get", "/v1/conversations/c/interactions?status=bogus", None, "read", 400),
    ("patch", "/v1/conversations/c", {"bogus": 1}, "write", 400),
    ("post", "/v1/conversations/c/fork", {"bogus": 1}, "write", 400),
    ("post", "/v1/conversations/c/submissions", {"bogus": 1}, "write", 400),
    ("delete", "/v1/conversations/c/submissions/{queued}", {"bogus": 1}, "write", 400),
    ("post", "/v1/conversations/c/interactions/abc/answer", {"bogus": 1}, "write", 400),
    ("post", "/v1/conversations/c/interactions/abc/answer", MALFORMED_JSON, "write", 400),
    ("post", "/v1/conversations/c/commands/help", {"bogus": 1}, "write", 400),
    ("post", "/v1/conversations/c/commands/help", MALFORMED_JSON, "write", 400),
    ("post", "/v1/conversations/c/extensions/x/commands/y", MALFORMED_JSON, "write", 400),
]

# conversation-scoped writes as a read-scope token sees them (no extension is installed: an
# extension command that got past access would answer 503, an unknown interaction 404)
CAPABILITY_ENDPOINTS = [
    ("get", "/v1/conversations/c/interactions", None, "read", 200),
    ("get", "/v1/conversations/c/projection", None, "read", 200),
    ("post", "/v1/conversations/c/commands/help", {}, "write", 200),
    ("post", "/v1/conversations/c/extensions/x/commands/y", {}, "write", 503),
    ("post", "/v1/conversations/c/interactions/abc/answer", {"answer": 1}, "write", 404),
]


def send(client, method: str, path: str, body):
    if isinstance(body, str):  # a raw (malformed) JSON body
        return getattr(client, method)(path, body, content_type="application/json")
    return getattr(client, method)(path, body, format="json")


def expected(persona: str, sharing: str, kind: str, success: int) -> int:
    if persona in ("owner", "admin"):
        return success
    if persona == "anonymous":
        return success if (kind == "read" and sharing == "public") else 401
    if sharing == "private":
        return 404
    return success if kind == "read" else 403


@pytest.fixture
def world(kit, owner):
    """Conversation `c` with a settled run, an entry, a queued submission; `live` is a claimed
    run in conversation `busy` of the same owner and sharing."""

    def build(sharing: str) -> dict[str, int]:
        kit.conversation("c", sharing=sharing)
        kit.submit("c", request_id="s0")
        settled = kit.settle(kit.claim("c"))
        queued = kit.submit("c", request_id="s1")
        return {"run": settled.pk, "entry": settled.answer_entry_id, "queued": queued.pk}

    return build


def fill(value, ids):
    if isinstance(value, str):
        for key, number in ids.items():
            placeholder = "{" + key + "}"
            if value == placeholder:
                return number
            value = value.replace(placeholder, str(number))
        return value
    if isinstance(value, dict):
        return {k: fill(v, ids) for k, v in value.items()}
    return value


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize(("method", "path", "body", "kind", "success"), CONVERSATION_ENDPOINTS)
def test_every_conversation_endpoint_follows_the_access_matrix(
    world, client_for, persona, sharing, method, path, body, kind, success
):
    ids = world(sharing)
    client = client_for(persona)
    response = getattr(client, method)(fill(path, ids), fill(body, ids), format="json")
    want = expected(persona, sharing, kind, success)
    assert response.status_code == want, (response.status_code, response.content)
    if want >= 400:
        assert set(response.json()) == {"error"}
    if want == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("method", ["get", "patch", "delete"])
def test_a_missing_conversation_looks_exactly_like_a_private_one(client_for, kit, member, method):
    kit.conversation("c")
    outsider = client_for("other")
    for path in ("/v1/conversations/c", "/v1/conversations/nope"):
        suffix = "/submissions/1" if method == "delete" else ""
        response = getattr(outsider, method)(path + suffix, {"name": "x"}, format="json")
        assert response.status_code == 404
        assert response.json()["error"]["message"] == "Conversation not found"
    anonymous = client_for("anonymous")
    for path in ("/v1/conversations/c", "/v1/conversations/nope"):
        assert anonymous.get(path).status_code == 401


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize(("method", "path", "body", "kind", "success"), INVALID_INPUT_ENDPOINTS)
def test_access_is_checked_before_the_input(
    world, client_for, persona, sharing, method, path, body, kind, success
):
    ids = world(sharing)
    before = (Submission.objects.count(), Conversation.objects.count())
    response = send(client_for(persona), method, fill(path, ids), body)
    want = expected(persona, sharing, kind, success)
    assert response.status_code == want, (response.status_code, response.content)
    assert set(response.json()) == {"error"}
    if want == 404:
        assert response.json()["error"]["message"] == "Conversation not found"
    if want == 401:
        assert response["WWW-Authenticate"].startswith("Bearer")
    assert (Submission.objects.count(), Conversation.objects.count()) == before
    assert not Submission.objects.filter(status="withdrawn").exists()


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("persona", ["owner", "other", "admin"])
@pytest.mark.parametrize(
    ("method", "path", "body", "kind", "success"), CONVERSATION_ENDPOINTS + CAPABILITY_ENDPOINTS
)
def test_a_read_token_gets_404_before_403(
    world, client_for, persona, sharing, method, path, body, kind, success
):
    ids = world(sharing)
    reader = client_for(persona, scope="read")
    response = send(reader, method, fill(path, ids), fill(body, ids))
    if persona == "other" and sharing == "private":
        want = 404
    else:
        want = success if kind == "read" else 403
    assert response.status_code == want, (response.status_code, response.content)
    if kind == "write":
        missing = send(
            reader,
            method,
            fill(path, ids).replace("/conversations/c", "/conversations/nope", 1),
            fill(body, ids),
        )
        assert missing.status_code == 404, missing.content
        assert missing.json()["error"]["message"] == "Conversation not found"


def test_writes_outside_a_conversation_still_refuse_a_read_token(client_for):
    reader = client_for("owner", scope="read")
    for path, body in (
        ("/v1/conversations", {"id": "mine"}),
        ("/v1/extensions/x/commands/y", {}),
    ):
        response = reader.post(path, body, format="json")
        assert response.status_code == 403, (path, response.content)
        assert response.json()["error"]["cause"] == "forbidden"
    assert not Conversation.objects.filter(pk="mine").exists()


def test_every_conversation_scoped_write_refuses_a_read_token(world, client_for):
    """The read-token refusal of a conversation-scoped write is `conversation_get(write=True)`'s
    (core.permissions defers to it): every such operation of the schema must reach it."""
    from drf_spectacular.generators import SchemaGenerator

    ids = world("private")
    reader = client_for("owner", scope="read")
    schema = SchemaGenerator().get_schema(request=None, public=True)
    checked = []
    for template, item in schema["paths"].items():
        if "{conversation_id}" not in template:
            continue
        for method in set(item) & {"post", "put", "patch", "delete"}:
            path = template.replace("{conversation_id}", "c").replace(
                "{submission_id}", str(ids["queued"])
            )
            response = send(reader, method, path.replace("{", "").replace("}", ""), {})
            assert response.status_code == 403, (method, template, response.content)
            checked.append((method, template))
    assert len(checked) >= 8
    assert Submission.objects.count() == 2


def test_a_read_token_reads_but_cannot_write(client_for, world):
    world("private")
    reader = client_for("owner", scope="read")
    assert reader.get("/v1/conversations/c").status_code == 200
    response = reader.post("/v1/conversations/c/submissions", {"parts": TEXT}, format="json")
    assert response.status_code == 403
    assert Submission.objects.count() == 2


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize(("method", "path", "body"), RUNTIME_ENDPOINTS)
@pytest.mark.parametrize("persona", [*PERSONAS, "service", "runtime_token"])
def test_runtime_endpoints_need_the_runtime_principal_and_ignore_sharing(
    kit, client_for, api, member, persona, sharing, method, path, body
):
    kit.conversation("c", sharing=sharing)
    kit.submit("c")
    live = kit.claim("c").pk
    kit.conversation("idle", sharing=sharing)
    kit.submit("idle")
    if persona == "runtime_token":
        client = api(member, scope="runtime")
    else:
        client = client_for(persona)
    response = getattr(client, method)(
        fill(path, {"live": live}), fill(body, {"live": live}), format="json"
    )
    if persona == "anonymous":
        assert response.status_code == 401
    elif persona in ("owner", "other", "admin"):
        assert response.status_code == 403
    else:
        # the runtime acts for the platform: never refused, never hidden by sharing
        assert response.status_code < 400 or response.status_code == 409, response.content
        assert response.status_code != 409 or path.endswith("/runs")


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize(("method", "path", "body", "kind", "success"), CONVERSATION_ENDPOINTS)
def test_a_runtime_token_has_its_users_access_outside_the_runtime_endpoints(
    world, api, member, sharing, method, path, body, kind, success
):
    """Only the runtime endpoints ignore sharing (spec 07): elsewhere, `GET /v1/runs/{id}`
    included, another user's `runtime` token is that user, and a private conversation's run
    is as missing to it as the conversation."""
    ids = world(sharing)
    runtime_token = api(member, scope="runtime")
    response = send(runtime_token, method, fill(path, ids), fill(body, ids))
    want = expected("other", sharing, kind, success)
    assert response.status_code == want, (response.status_code, response.content)


def test_the_service_principal_reads_any_run(world, client_for):
    ids = world("private")
    response = client_for("service").get(f"/v1/runs/{ids['run']}")
    assert response.status_code == 200, response.content
    assert response.json()["inputs"]


def test_lists_contain_only_readable_rows(kit, client_for, owner, member):
    for sharing in SHARINGS:
        kit.conversation(f"o-{sharing}", owner=owner, sharing=sharing)
        kit.conversation(f"m-{sharing}", owner=member, sharing=sharing)

    def listed(persona: str, query: str = "") -> set[str] | int:
        response = client_for(persona).get(f"/v1/conversations{query}")
        if response.status_code != 200:
            return response.status_code
        return {c["id"] for c in response.json()["results"]}

    assert listed("owner") == {"o-private", "o-users", "o-public", "m-users", "m-public"}
    assert listed("other") == {"m-private", "m-users", "m-public", "o-users", "o-public"}
    assert listed("admin") == {f"{w}-{s}" for w in "om" for s in SHARINGS}
    assert listed("anonymous") == 401
    assert listed("other", f"?owner={owner.pk}") == {"o-users", "o-public"}
    assert listed("other", "?owner=owner") == {"o-users", "o-public"}


def test_a_run_of_an_unreadable_conversation_is_not_found(kit, client_for):
    kit.conversation("c")
    kit.submit("c")
    run = kit.claim("c")
    assert client_for("other").get(f"/v1/runs/{run.pk}").status_code == 404
    assert client_for("anonymous").get(f"/v1/runs/{run.pk}").status_code == 401
    assert client_for("other").get("/v1/runs/99999").status_code == 404
    assert Run.objects.count() == 1 and Conversation.objects.count() == 1
