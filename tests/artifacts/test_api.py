"""The artifact store over HTTP: permissions, access, the error model, body limits, and no 500
for any body a client can send."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from artifacts import services
from artifacts.models import Operation, Record
from artifacts.types import RequestContext
from core.errors import HostError
from tests.artifacts.helpers import counts, head, make_world

pytestmark = pytest.mark.django_db

CONTEXT = {
    "world_id": "world-1",
    "parent_head": head(0),
    "operation_id": "op-1",
    "preset_id": "preset",
    "preset_revision": "r1",
    "preset_scripts_enabled": False,
}
DECLARATION = {
    "name": "panel",
    "channel": "main",
    "content_type": "text/markdown",
    "save": "operation",
    "strategy": "append",
    "invalidation": "never",
    "max_emits": 5,
}
REQUEST_CONTEXT = {
    **CONTEXT,
    "request_id": "req-1",
    "request_attempt": 1,
    "max_artifact_bytes": 10 * 1024 * 1024,
    "declarations": [
        DECLARATION,
        {**DECLARATION, "name": "card", "channel": "cards", "content_type": "application/json"},
    ],
}


@pytest.fixture
def runtime(api):
    return api("service")


def post(client, path: str, body) -> tuple[int, dict]:
    response = client.post(f"/v1/artifacts/{path}", body, format="json")
    return response.status_code, response.json()


@pytest.fixture
def begun(world, runtime):
    assert post(runtime, "operations", {"context": CONTEXT})[0] == 200
    assert post(runtime, "attempts", {"context": REQUEST_CONTEXT})[0] == 200
    return runtime


def emit_body(**overrides):
    return {
        "context": REQUEST_CONTEXT,
        "output": "panel",
        "payload": "hello",
        "tool_call_id": "call-1",
        **overrides,
    }


# --- the calls ---------------------------------------------------------------------------------


def test_the_runtime_walks_an_operation_over_http(begun, api, owner):
    runtime = begun
    status, body = post(runtime, "emit", emit_body())
    assert status == 200
    assert body["ok"] is True and body["idempotent"] is False
    assert body["markdown"] == "# Runtime artifact accepted\n\noutput=panel"
    record_id = body["record_id"]

    status, body = post(runtime, "commit", {"context": CONTEXT, "head": head(1)})
    assert (status, body["status"], body["head"]) == (200, "core_committed", head(1))
    status, body = post(runtime, "followup/begin", {"context": CONTEXT})
    assert (status, body["status"], body["core_committed"]) == (200, "running", True)

    projection = api(owner).get("/v1/worlds/world-1/artifacts")
    assert projection.status_code == 200
    items = projection.json()["items"]
    assert [(i["record_id"], i["payload"], i["head"]) for i in items] == [
        (record_id, "hello", head(1))
    ]

    status, body = post(runtime, "followup/complete", {"operation_id": "op-1", "requests": ["f1"]})
    assert (status, body["status"], body["completed_requests"]) == (200, "completed", ["f1"])
    assert api(owner).get("/v1/worlds/world-1/artifacts").json()["items"] == []

    read = runtime.get("/v1/artifacts/operations/op-1")
    assert read.status_code == 200
    assert read.json() == {
        "operation_id": "op-1",
        "status": "completed",
        "completed_requests": ["f1"],
        "core_committed": True,
        "message": None,
        "head": head(1),
    }


def test_a_repeated_emit_over_http_names_the_same_record(begun):
    first = post(begun, "emit", emit_body())[1]
    again = post(begun, "emit", emit_body())[1]
    assert again == {
        "ok": True,
        "idempotent": True,
        "record_id": first["record_id"],
        "markdown": "# Runtime artifact already exists\n\noutput=panel",
    }


def test_a_rejected_emit_is_200_with_ok_false_and_writes_nothing(begun):
    before = counts()
    status, body = post(begun, "emit", emit_body(output="nope"))
    assert (status, body) == (
        200,
        {
            "ok": False,
            "markdown": "# Runtime artifact rejected\n\nUndeclared artifact output: nope",
        },
    )
    status, body = post(begun, "emit", emit_body(tool_call_id=""))
    assert body == {
        "ok": False,
        "markdown": "# Runtime artifact rejected\n\nTool-call ID cannot be empty",
    }
    status, body = post(begun, "emit", emit_body(payload={"not": "text"}))
    assert (status, body["ok"]) == (200, False)
    assert counts() == before


def test_a_rejected_clear_is_200_with_ok_false(begun):
    status, body = post(
        begun, "clear", {"context": REQUEST_CONTEXT, "output": "nope", "tool_call_id": "c1"}
    )
    assert (status, body["ok"]) == (200, False)
    status, body = post(
        begun, "clear", {"context": REQUEST_CONTEXT, "output": "panel", "tool_call_id": "c1"}
    )
    assert (status, body) == (
        200,
        {
            "ok": True,
            "idempotent": False,
            "markdown": "# Runtime artifact clear confirmed\n\noutput=panel",
        },
    )


@pytest.mark.parametrize("length", [201, 300_000])
def test_an_undeclared_output_of_any_length_is_a_rejection_not_a_400(begun, length):
    """Spec 07: the output name is the model's argument, and an undeclared one is the tool
    result the model must read (200 `ok: false`), however long; only the body is bounded."""
    before = counts()
    name = "x" * length
    rejected = {
        "ok": False,
        "markdown": f"# Runtime artifact rejected\n\nUndeclared artifact output: {name}",
    }
    clear = {"context": REQUEST_CONTEXT, "output": name, "tool_call_id": "c9"}
    assert post(begun, "emit", emit_body(output=name)) == (200, rejected)
    assert post(begun, "clear", clear) == (200, rejected)
    assert counts() == before


def test_an_output_that_is_not_a_string_or_carries_a_nul_stays_a_400(begun):
    for output in (7, None, ["panel"], "pa\x00nel"):
        assert post(begun, "emit", emit_body(output=output))[0] == 400, output
        clear = {"context": REQUEST_CONTEXT, "output": output, "tool_call_id": "c9"}
        assert post(begun, "clear", clear)[0] == 400, output
    with pytest.raises(HostError) as caught:
        services.artifact_emit(
            context=RequestContext.from_data(REQUEST_CONTEXT),
            output="pa\x00nel",
            payload="p",
            tool_call_id="c9",
        )
    assert caught.value.status == 400


def test_an_invariant_error_is_409_in_the_error_model(begun):
    status, body = post(begun, "operations", {"context": {**CONTEXT, "preset_revision": "r2"}})
    assert (status, body) == (
        409,
        {
            "error": {
                "category": "store",
                "cause": "conflict",
                "message": "Artifact operation is bound to a different frozen payload",
                "details": {"operation_id": "op-1"},
            }
        },
    )
    other = {**REQUEST_CONTEXT, "request_id": "unregistered"}
    status, body = post(begun, "emit", emit_body(context=other))
    assert (status, body["error"]["message"]) == (
        409,
        "Artifact emit request attempt is not registered",
    )
    post(begun, "commit", {"context": CONTEXT, "head": head(1)})
    status, body = post(begun, "commit", {"context": CONTEXT, "head": head(2)})
    assert (status, body["error"]["cause"]) == (409, "conflict")


def test_the_other_calls_answer_over_http(begun):
    status, body = post(begun, "attempts", {"context": {**REQUEST_CONTEXT, "request_attempt": 2}})
    assert (status, body["recorded"], body["current_attempt"]) == (200, True, 2)
    status, body = post(begun, "reconcile-head", {"world_id": "world-1", "head": head(0)})
    assert (status, body["superseded_operations"]) == (200, [])
    status, body = post(
        begun,
        "materialization-pending",
        {"context": CONTEXT, "head": head(1), "message": "waiting"},
    )
    assert (status, body["status"]) == (200, "recovery_required")
    status, body = post(begun, "commit", {"context": CONTEXT, "head": head(1)})
    assert status == 200
    status, body = post(
        begun, "followup/fail", {"operation_id": "op-1", "status": "cancelled", "message": "stop"}
    )
    assert (status, body["status"], body["message"]) == (200, "cancelled", "stop")
    status, body = post(begun, "followup/resume", {"operation_id": "op-1"})
    assert (status, body["status"]) == (200, "cancelled")


def test_core_failed_answers_the_summary_or_409_for_a_missing_operation(begun):
    """Spec 07: a call on a missing operation is an invariant error, `store/conflict`."""
    status, body = post(begun, "core-failed", {"operation_id": "op-1", "message": "boom"})
    assert (status, body["status"], body["message"]) == (200, "failed", "boom")
    status, body = post(begun, "core-failed", {"operation_id": "missing"})
    assert (status, body["error"]["category"], body["error"]["cause"]) == (409, "store", "conflict")
    assert body["error"]["message"] == "Core failure is missing an artifact-operation checkpoint"


def test_reconcile_of_a_missing_world_is_404(runtime, db):
    status, body = post(runtime, "reconcile-head", {"world_id": "nope", "head": "h"})
    assert (status, body["error"]["message"]) == (404, "Conversation not found")
    status, body = post(runtime, "operations", {"context": {**CONTEXT, "world_id": "nope"}})
    assert status == 404


HEAD_REFUSED = {
    "category": "contract",
    "cause": "invalid",
    "message": "Artifact head is not an entry of the conversation",
}
HEAD_PROBLEM = ["Must be the id of an entry of this conversation."]
# no entry anywhere / an entry of another conversation (a fork's parent) / not an id as written
NOT_HEADS = ["no-such-entry", "999999999", head(0, "world-2"), f"0{head(0)}", f" {head(0)}"]


@pytest.mark.parametrize("bad", NOT_HEADS)
def test_begin_refuses_a_parent_head_that_is_no_entry_of_the_world(world, runtime, owner, bad):
    make_world(owner, "world-2")
    before = counts()
    status, body = post(runtime, "operations", {"context": {**CONTEXT, "parent_head": bad}})
    assert (status, body["error"]) == (
        400,
        {**HEAD_REFUSED, "details": {"parent_head": HEAD_PROBLEM}},
    )
    assert counts() == before


def test_an_older_entry_of_the_conversation_is_a_head_too(begun):
    """The transcript moves on while an operation runs: any entry of the world names a head."""
    context = {**CONTEXT, "operation_id": "op-2", "parent_head": head(5)}
    assert post(begun, "operations", {"context": context})[0] == 200
    assert post(begun, "commit", {"context": CONTEXT, "head": head(3)})[0] == 200
    assert post(begun, "reconcile-head", {"world_id": "world-1", "head": head(1)})[0] == 200


@pytest.mark.parametrize("bad", NOT_HEADS)
@pytest.mark.parametrize(
    ("call", "extra"),
    [
        ("commit", {"context": CONTEXT}),
        ("materialization-pending", {"context": CONTEXT, "message": "m"}),
    ],
)
def test_the_core_result_refuses_a_head_that_is_no_entry_of_the_world(
    begun, owner, call, extra, bad
):
    make_world(owner, "world-2")
    status, body = post(begun, "emit", emit_body())
    assert status == 200 and body["ok"] is True
    before = counts()
    status, body = post(begun, call, {**extra, "head": bad})
    assert (status, body["error"]) == (400, {**HEAD_REFUSED, "details": {"head": HEAD_PROBLEM}})
    assert counts() == before
    operation = Operation.objects.get(pk="op-1")
    assert (operation.status, operation.head) == ("running", "")


@pytest.mark.parametrize("bad", NOT_HEADS)
def test_reconcile_refuses_a_head_that_is_no_entry_and_keeps_the_live_panels(
    begun, api, owner, bad
):
    make_world(owner, "world-2")
    context = {**REQUEST_CONTEXT, "declarations": [{**DECLARATION, "invalidation": "head_change"}]}
    assert post(begun, "attempts", {"context": {**context, "request_attempt": 2}})[0] == 200
    status, body = post(begun, "emit", emit_body(context={**context, "request_attempt": 2}))
    assert status == 200 and body["ok"] is True
    before = counts()

    status, body = post(begun, "reconcile-head", {"world_id": "world-1", "head": bad})

    assert (status, body["error"]) == (400, {**HEAD_REFUSED, "details": {"head": HEAD_PROBLEM}})
    assert counts() == before
    projection = api(owner).get("/v1/worlds/world-1/artifacts").json()["items"]
    assert [item["payload"] for item in projection] == ["hello"]
    assert Operation.objects.get(pk="op-1").projection_status == "active"


def test_reconcile_checks_the_head_of_a_world_without_operations(world, runtime):
    status, body = post(runtime, "reconcile-head", {"world_id": "world-1", "head": "nope"})
    assert (status, body["error"]["message"]) == (400, HEAD_REFUSED["message"])
    status, body = post(runtime, "reconcile-head", {"world_id": "world-1", "head": head(9)})
    assert (status, body["superseded_records"]) == (200, [])


# --- permissions and access --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("who", "expected"),
    [(None, 401), ("user-write", 403), ("user-runtime", 200), ("service", 200)],
)
def test_writes_need_the_runtime(world, api, owner, who, expected):
    if who is None:
        client = api(None)
    elif who == "service":
        client = api("service")
    else:
        client = api(owner, scope=who.split("-")[1])
    assert post(client, "operations", {"context": CONTEXT})[0] == expected


@pytest.mark.parametrize(
    ("sharing", "who", "expected"),
    [
        ("private", "owner", 200),
        ("private", "outsider", 404),
        ("private", "anonymous", 401),  # spec 01: authentication first
        ("users", "outsider", 200),
        ("users", "anonymous", 401),
        ("public", "anonymous", 200),
        ("private", "staff", 200),
    ],
)
def test_world_reads_inherit_the_conversations_access(
    api, owner, outsider, staff, sharing, who, expected
):
    make_world(owner, "world-1", sharing=sharing)
    client = {
        "owner": api(owner),
        "outsider": api(outsider),
        "anonymous": api(None),
        "staff": api(staff),
    }[who]
    assert client.get("/v1/worlds/world-1/artifacts").status_code == expected
    assert client.get("/v1/worlds/world-1/artifacts/followups").status_code == expected


def test_another_users_private_world_is_404_not_403(begun, api, outsider):
    response = api(outsider).get("/v1/worlds/world-1/artifacts")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Conversation not found"
    assert api(outsider).get("/v1/artifacts/operations/op-1").status_code == 404


def test_the_operation_summary_is_readable_by_the_runtime_and_the_owner(begun, api, owner):
    assert api(owner).get("/v1/artifacts/operations/op-1").status_code == 200
    assert begun.get("/v1/artifacts/operations/op-1").status_code == 200
    assert begun.get("/v1/artifacts/operations/missing").status_code == 404


def test_a_runtime_token_reads_the_summary_only_with_access_to_the_world(begun, api, outsider):
    # the summary is a read, not a runtime endpoint (spec 07): a `runtime` token of a user who
    # cannot read the private world finds it missing, though it may write artifacts there
    runtime_token = api(outsider, scope="runtime")
    response = runtime_token.get("/v1/artifacts/operations/op-1")
    assert response.status_code == 404
    assert response.json()["error"]["cause"] == "not_found"
    assert post(runtime_token, "operations", {"context": CONTEXT})[0] == 200


def test_the_debug_view_is_for_admins(begun, api, owner, staff):
    post(begun, "emit", emit_body())
    assert api(owner).get("/v1/worlds/world-1/artifacts/debug").status_code == 403
    response = api(staff).get("/v1/worlds/world-1/artifacts/debug?operation_id=op-1&limit=10")
    assert response.status_code == 200
    body = response.json()
    assert [r["status"] for r in body["results"]] == ["active"]
    assert body["operations"][0]["operation_id"] == "op-1"
    assert api(staff).get("/v1/worlds/world-1/artifacts/debug?limit=0").status_code == 400
    assert api(staff).get("/v1/worlds/nope/artifacts/debug").status_code == 404


def _pages(client, url: str) -> list[dict]:
    pages = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content[:300]
        pages.append(response.json())
        url = pages[-1]["next"]
    return pages


def test_the_debug_list_is_paged_newest_first_by_at_most_100(begun, api, staff):
    """Spec 07: lists are paginated (cursor pagination, `limit` <= 100)."""
    for n in range(5):
        assert post(begun, "emit", emit_body(payload=f"p{n}", tool_call_id=f"call-{n}"))[1]["ok"]
    assert post(begun, "operations", {"context": {**CONTEXT, "operation_id": "op-2"}})[0] == 200
    admin = api(staff)

    pages = _pages(admin, "/v1/worlds/world-1/artifacts/debug?limit=2")

    assert [len(page["results"]) for page in pages] == [2, 2, 1]
    sequences = [row["sequence"] for page in pages for row in page["results"]]
    assert sequences == sorted(sequences, reverse=True) and len(set(sequences)) == 5
    assert all(row["status"] == "active" for page in pages for row in page["results"])
    # each page names the operations of its records (op-2 has none)
    assert [[op["operation_id"] for op in page["operations"]] for page in pages] == [["op-1"]] * 3
    assert pages[0]["world_id"] == "world-1" and pages[0]["previous"] is None
    for query in ("limit=101", "limit=1000", "limit=0", "limit=x", "cursor=bogus"):
        response = admin.get(f"/v1/worlds/world-1/artifacts/debug?{query}")
        assert response.status_code == 400, query
    filtered = admin.get("/v1/worlds/world-1/artifacts/debug?operation_id=op-2").json()
    assert (filtered["results"], filtered["operations"], filtered["next"]) == ([], [], None)


def test_the_followup_list_is_paged_by_operation_id(begun, api, owner):
    for n in (2, 3, 4):
        context = {**CONTEXT, "operation_id": f"op-{n}", "parent_head": head(n)}
        assert post(begun, "operations", {"context": context})[0] == 200
    reader = api(owner)

    pages = _pages(reader, "/v1/worlds/world-1/artifacts/followups?limit=3")

    assert [[f["operation_id"] for f in page["results"]] for page in pages] == [
        ["op-1", "op-2", "op-3"],
        ["op-4"],
    ]
    assert {page["world_id"] for page in pages} == {"world-1"}
    for query in ("limit=101", "limit=0", "cursor=bogus"):
        response = reader.get(f"/v1/worlds/world-1/artifacts/followups?{query}")
        assert response.status_code == 400, query


# Collations that order "op-a" before "op-B" (case-insensitive first), unlike code points.
_LOCALE_COLLATIONS = ("en-US-x-icu", "und-x-icu", "en_US.utf8", "en_US")


def _give_operation_ids_a_locale_collation() -> None:
    """PostgreSQL: collate the operation id column as many installations' default does (the
    test database may be C); rolled back with the test's transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT collname FROM pg_collation WHERE collname = ANY(%s)",
            [list(_LOCALE_COLLATIONS)],
        )
        available = {name for (name,) in cursor.fetchall()}
        collation = next((name for name in _LOCALE_COLLATIONS if name in available), None)
        if collation is None:
            pytest.skip(f"no locale collation ({', '.join(_LOCALE_COLLATIONS)}) in PostgreSQL")
        # the fixture's rows leave deferred foreign-key checks that ALTER TABLE refuses to skip
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        field = Operation._meta.get_field("id")
        cursor.execute(
            f"ALTER TABLE {connection.ops.quote_name(Operation._meta.db_table)} "
            f"ALTER COLUMN {connection.ops.quote_name(field.column)} "
            f"TYPE varchar({field.max_length}) COLLATE {connection.ops.quote_name(collation)}"
        )


def test_the_followup_list_is_in_code_point_order_whatever_the_collation(begun, api, owner):
    """Code-point order ("op-B" before "op-a"), page after page, forward and back, on SQLite
    and on PostgreSQL whatever collation the id column has."""
    if connection.vendor == "postgresql":
        _give_operation_ids_a_locale_collation()
    for n, op in enumerate(("op-b", "op-Z", "op-a", "op-B"), start=1):
        context = {**CONTEXT, "operation_id": op, "parent_head": head(n)}
        assert post(begun, "operations", {"context": context})[0] == 200
    reader = api(owner)

    pages = _pages(reader, "/v1/worlds/world-1/artifacts/followups?limit=2")

    expected = ["op-1", "op-B", "op-Z", "op-a", "op-b"]
    assert [[f["operation_id"] for f in page["results"]] for page in pages] == [
        expected[0:2],
        expected[2:4],
        expected[4:],
    ]
    back = reader.get(pages[-1]["previous"]).json()
    assert [f["operation_id"] for f in back["results"]] == expected[2:4]


def test_the_projection_filters_by_channel(begun, api, owner):
    post(begun, "emit", emit_body())
    post(begun, "emit", emit_body(output="card", payload={"a": 1}, tool_call_id="call-2"))
    items = api(owner).get("/v1/worlds/world-1/artifacts?channel=cards").json()["items"]
    assert [i["payload"] for i in items] == [{"a": 1}]


# --- body limits and malformed bodies ----------------------------------------------------------


def test_an_emit_body_may_carry_a_4_mib_payload(begun):
    status, body = post(begun, "emit", emit_body(payload="x" * (4 * 1024 * 1024)))
    assert (status, body["ok"]) == (200, True)


def test_an_emit_body_over_5_mib_is_413(begun):
    response = begun.post(
        "/v1/artifacts/emit",
        json.dumps(emit_body(payload="x" * (5 * 1024 * 1024))),
        content_type="application/json",
    )
    assert response.status_code == 413
    assert response.json()["error"]["cause"] == "too_large"
    assert Record.objects.count() == 0


def test_other_artifact_calls_keep_the_1_mib_limit(begun):
    huge = {**REQUEST_CONTEXT, "request_id": "x" * (2 * 1024 * 1024)}
    response = begun.post(
        "/v1/artifacts/attempts", json.dumps({"context": huge}), content_type="application/json"
    )
    assert response.status_code == 413


MALFORMED = [
    "not json",
    "[]",
    "null",
    "{}",
    '{"context": 5}',
    '{"context": {}}',
    '{"context": {"world_id": 1}}',
    '{"unknown": 1}',
    json.dumps({"context": {**REQUEST_CONTEXT, "surprise": True}}),
    json.dumps({"context": {**REQUEST_CONTEXT, "declarations": [{**DECLARATION, "x": 1}]}}),
    json.dumps({"context": {**REQUEST_CONTEXT, "declarations": "no"}}),
    json.dumps({"context": {**REQUEST_CONTEXT, "request_attempt": 0}}),
    json.dumps({"context": {**REQUEST_CONTEXT, "request_attempt": "1"}}),
    json.dumps({"context": {**REQUEST_CONTEXT, "request_attempt": 2**70}}),
    json.dumps({"context": {**REQUEST_CONTEXT, "max_artifact_bytes": -1}}),
    json.dumps({"context": {**REQUEST_CONTEXT, "preset_scripts_enabled": "false"}}),
    json.dumps({"context": {**REQUEST_CONTEXT, "world_id": "w" * 65}}),
    json.dumps({"context": {**REQUEST_CONTEXT, "parent_head": "   "}}),
    json.dumps(
        {
            "context": {
                **REQUEST_CONTEXT,
                "declarations": [{**DECLARATION, "payload_contract": {"type": 7}}],
            }
        }
    ),
    json.dumps({**emit_body(), "tool_call_id": 7}),
    json.dumps({**emit_body(), "output": ["x"]}),
    json.dumps({**emit_body(), "head": None, "message": {}, "requests": "x", "operation_id": 3}),
    '{"context": {"world_id": "world-1", "payload": NaN}}',
    '{"payload": Infinity}',
    json.dumps(emit_body(payload="PLACEHOLDER")).replace('"PLACEHOLDER"', "NaN"),
]

PATHS = [
    "operations",
    "attempts",
    "emit",
    "clear",
    "commit",
    "materialization-pending",
    "core-failed",
    "followup/begin",
    "followup/complete",
    "followup/fail",
    "followup/resume",
    "reconcile-head",
]


@pytest.mark.parametrize("path", PATHS)
def test_malformed_bodies_are_400_never_500(begun, path):
    before = counts()
    for body in MALFORMED:
        response = begun.post(f"/v1/artifacts/{path}", body, content_type="application/json")
        assert response.status_code == 400, (path, body, response.content[:300])
        assert response.json()["error"]["cause"] == "invalid"
    assert counts() == before
    assert Operation.objects.get().status == "running"


def test_a_non_json_content_type_is_refused(begun):
    response = begun.post(
        "/v1/artifacts/emit", "a=b", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 415


def test_the_schema_documents_every_artifact_endpoint(api, staff):
    response = api(staff).get("/v1/schema", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    paths = json.loads(response.content)["paths"]
    for path in PATHS:
        assert f"/v1/artifacts/{path}" in paths
        responses = paths[f"/v1/artifacts/{path}"]["post"]["responses"]
        assert {"200", "400", "401", "403", "409", "413", "415"} <= set(responses)
    assert "/v1/worlds/{world_id}/artifacts" in paths
    assert "/v1/artifacts/operations/{operation_id}" in paths


def test_nul_characters_never_reach_the_database(begun, api, owner, staff):
    status, body = post(begun, "emit", emit_body(payload="a\x00b"))
    assert (status, body) == (
        200,
        {
            "ok": False,
            "markdown": "# Runtime artifact rejected\n\n"
            "panel text/markdown payload must not contain NUL characters",
        },
    )
    status, body = post(
        begun, "emit", emit_body(output="card", payload={"k\x00": "v\x00"}, tool_call_id="j")
    )
    assert (status, body["ok"]) == (200, True)  # JSON text escapes it
    items = api(owner).get("/v1/worlds/world-1/artifacts?channel=cards").json()["items"]
    assert items[0]["payload"] == {"k\x00": "v\x00"}
    assert post(begun, "emit", emit_body(tool_call_id="a\x00"))[0] == 400
    assert post(begun, "operations", {"context": {**CONTEXT, "operation_id": "x\x00"}})[0] == 400
    assert api(owner).get("/v1/worlds/a%00b/artifacts").status_code == 404
    assert api(owner).get("/v1/artifacts/operations/a%00b").status_code == 404
    debug = api(staff).get("/v1/worlds/world-1/artifacts/debug?operation_id=%00")
    assert debug.status_code == 400


def test_a_payload_that_is_not_valid_unicode_is_rejected_never_500(begun, api, owner):
    """A lone surrogate is the model's content (a rejection, like a NUL in text); in the
    call's own text arguments it stays the runtime's 400."""
    before = counts()
    cases = [
        ("panel", "a\ud800b", "panel text/markdown"),
        ("card", {"title": "a\udfff"}, "card application/json"),
        ("card", {"\ud800": 1}, "card application/json"),
        ("card", ["ok", ["\udc00"]], "card application/json"),
        ("card", "\ud800", "card application/json"),
    ]
    for n, (output, payload, what) in enumerate(cases):
        body = json.dumps(emit_body(output=output, payload=payload, tool_call_id=f"s{n}"))
        response = begun.post("/v1/artifacts/emit", body, content_type="application/json")
        assert (response.status_code, response.json()) == (
            200,
            {
                "ok": False,
                "markdown": "# Runtime artifact rejected\n\n"
                f"{what} payload must be valid Unicode (no lone surrogates)",
            },
        ), payload
    for path, body in [
        ("emit", emit_body(tool_call_id="t\ud800")),
        ("clear", {"context": REQUEST_CONTEXT, "output": "pa\ud800nel", "tool_call_id": "c"}),
        ("clear", {"context": REQUEST_CONTEXT, "output": "panel", "tool_call_id": "\ud800"}),
    ]:
        response = begun.post(
            f"/v1/artifacts/{path}", json.dumps(body), content_type="application/json"
        )
        assert response.status_code == 400, body
        assert response.json()["error"]["cause"] == "invalid"
    assert counts() == before
    assert api(owner).get("/v1/worlds/world-1/artifacts").json()["items"] == []


def test_a_deeply_nested_payload_contract_is_a_400_not_a_500(begun):
    contract: dict = {"type": "string"}
    for _ in range(300):
        contract = {"not": contract}
    declaration = {**DECLARATION, "content_type": "application/json", "payload_contract": contract}
    body = {"context": {**REQUEST_CONTEXT, "declarations": [declaration]}}
    before = counts()
    status, answer = post(begun, "attempts", body)
    assert status == 400
    assert answer["error"]["details"] == {
        "declarations[0].payload_contract": ["Not a valid JSON Schema: nested too deeply."]
    }
    assert counts() == before
