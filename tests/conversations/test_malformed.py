"""Malformed input on every conversation and run endpoint: 400/413/415, never a 500, and
nothing is written."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conversations.models import Conversation, Entry, Run, Submission

pytestmark = pytest.mark.django_db

TEXT = [{"type": "text", "text": "hi"}]

# (name, method, path, who, {field: [wrong-typed values]} , required fields)
ENDPOINTS = {
    "create": (
        "post",
        "/v1/conversations",
        "owner",
        {
            "id": [7, ["c"], {"a": 1}],
            "name": [1, ["x"]],
            "sharing": ["everyone", 1],
            "source": [{"s": 1}, "x" * 65],
        },
        [],
    ),
    "update": (
        "patch",
        "/v1/conversations/c",
        "owner",
        {
            "name": [1, None, "x" * 201],
            "sharing": [True, "all"],
            "archived": ["yes", 1, None, "true"],
        },
        [],
    ),
    "fork": (
        "post",
        "/v1/conversations/c/fork",
        "owner",
        {"at": ["1", 1.5, True, None, -1, 0, 2**64, [1]], "id": [1, "bad id"], "name": [3]},
        ["at"],
    ),
    "submit": (
        "post",
        "/v1/conversations/c/submissions",
        "owner",
        {
            "parts": [
                "hi",
                [],
                ["hi"],
                [{"type": "video", "url": "x"}],
                [{"type": "text"}],
                [{"type": "text", "text": 1}],
                [{"type": "text", "text": "a", "extra": 1}],
                {"type": "text"},
                None,
            ],
            "request_id": [1, "", "x" * 129, None],
            "when_busy": ["never", 0],
            "delivery": ["now"],
            "not_before": ["tomorrow", 17, True],
        },
        ["parts"],
    ),
    "append": (
        "post",
        "/v1/conversations/c/entries",
        "service",
        {
            "run_id": ["1", None, 0, 2**64],
            "role": ["user", "extension", 1],
            "content": [
                "x",
                [],
                [{"type": "tool_call"}],
                [{"type": "tool_call", "id": "t", "name": "n", "arguments": [1]}],
                [1],
            ],
            "entry_key": [1, "", "k" * 129],
        },
        ["run_id", "role", "content"],
    ),
    "claim_in": (
        "post",
        "/v1/conversations/c/runs",
        "service",
        {"claim_key": [1, "", ["k"], "k" * 129]},
        [],
    ),
    "claim_any": ("post", "/v1/runs/claim", "service", {"claim_key": [1, "", {"k": 1}]}, []),
    "heartbeat": ("post", "/v1/runs/{run}/heartbeat", "service", {}, []),
    "steers": ("post", "/v1/runs/{run}/steers", "service", {}, []),
    "settle": (
        "post",
        "/v1/runs/{run}/settle",
        "service",
        {
            "status": ["done", 1, None],
            "answer_entry_id": ["1", 1.0, True, 0],
            "reason": [1, ["r"], "r" * 513],
        },
        ["status"],
    ),
}


@pytest.fixture
def setup(kit, api, owner):
    kit.conversation("c")
    kit.submit("c", request_id="s0")
    run = kit.claim("c")
    entry = kit.answer(run)
    kit.submit("c", request_id="s1")
    clients = {"owner": api(owner), "service": api("service")}

    def valid(name: str) -> dict:
        return {
            "create": {"id": "new", "name": "n"},
            "update": {"name": "n"},
            "fork": {"at": entry.pk},
            "submit": {"parts": TEXT, "request_id": "new"},
            "append": {"run_id": run.pk, "role": "assistant", "content": TEXT},
            "claim_in": {"claim_key": "k"},
            "claim_any": {"claim_key": "k"},
            "heartbeat": {},
            "steers": {},
            "settle": {"status": "answered", "answer_entry_id": entry.pk},
        }[name]

    def call(name: str, *, data=None, content_type="application/json", body=None):
        method, path, who, _, _ = ENDPOINTS[name]
        path = path.replace("{run}", str(run.pk))
        payload = json.dumps(body) if body is not None else data
        return getattr(clients[who], method)(path, data=payload, content_type=content_type)

    return valid, call


def counts() -> tuple[int, ...]:
    return (
        Conversation.objects.count(),
        Entry.objects.count(),
        Submission.objects.count(),
        Run.objects.count(),
        Run.objects.filter(status="settled").count(),
    )


def refused(response, *statuses: int) -> None:
    assert response.status_code in statuses, (response.status_code, response.content)
    assert set(response.json()) == {"error"}


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_structurally_malformed_bodies_are_refused(setup, name):
    valid, call = setup
    before = counts()
    refused(call(name, data="{not json"), 400)
    refused(call(name, data='{"a": 1'), 400)
    for body in ([1, 2], "text", 17, None):
        refused(call(name, data=json.dumps(body)), 400)
    refused(call(name, body=valid(name) | {"owner": 1}), 400)
    refused(call(name, data="a=b", content_type="text/plain"), 415)
    refused(call(name, data=b"\xff\xfe{}"), 400)
    assert counts() == before


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_wrong_types_and_out_of_bound_values_are_a_400(setup, name):
    valid, call = setup
    before = counts()
    for field, values in ENDPOINTS[name][3].items():
        for value in values:
            response = call(name, body=valid(name) | {field: value})
            refused(response, 400)
            if response.json()["error"].get("details"):
                assert response.json()["error"]["cause"] == "invalid"
    assert counts() == before


@pytest.mark.parametrize("name", [n for n in ENDPOINTS if ENDPOINTS[n][4]])
def test_missing_required_fields_are_a_400(setup, name):
    valid, call = setup
    before = counts()
    for field in ENDPOINTS[name][4]:
        body = {k: v for k, v in valid(name).items() if k != field}
        response = call(name, body=body)
        refused(response, 400)
    assert counts() == before


@pytest.mark.parametrize("name", list(ENDPOINTS))
def test_a_body_over_the_limit_is_a_413(setup, name, settings):
    _, call = setup
    before = counts()
    huge = json.dumps({"parts": [{"type": "text", "text": "x" * (settings.HOST_MAX_BODY_BYTES)}]})
    refused(call(name, data=huge), 413)
    assert counts() == before


def test_hostile_path_and_query_values_are_answered_cleanly(setup, api, owner):
    client = api(owner)
    for path in (
        "/v1/conversations/%00",
        "/v1/conversations/a%0A",
        "/v1/conversations/" + "a" * 65,
        "/v1/conversations/%F0%9F%98%80/entries",
    ):
        assert client.get(path).status_code == 404
    for query in (
        "owner=%00",
        "owner=" + "9" * 30,
        "archived=maybe",
        "limit=abc",
        "limit=0",
        "cursor=%00",
    ):
        response = client.get(f"/v1/conversations?{query}")
        assert response.status_code in (200, 400), (query, response.content)
    service = api("service")
    assert (
        service.post(
            "/v1/runs/99999999999999999999/settle",
            {"status": "unanswered", "reason": "r"},
            format="json",
        ).status_code
        == 404
    )


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=abc", "limit"),
        ("archived=maybe", "archived"),
    ],
)
def test_bad_query_parameters_say_so_naming_the_parameter(setup, api, owner, query, field):
    response = api(owner).get(f"/v1/conversations?{query}")

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["category"], error["cause"]) == ("contract", "invalid")
    assert error["message"] == "Query parameters are invalid"
    assert list(error["details"]) == [field]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


@pytest.mark.parametrize("name", list(ENDPOINTS))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    mutation=st.dictionaries(
        st.sampled_from(
            [
                "id",
                "name",
                "sharing",
                "archived",
                "at",
                "parts",
                "request_id",
                "when_busy",
                "delivery",
                "not_before",
                "run_id",
                "role",
                "content",
                "entry_key",
                "claim_key",
                "status",
                "answer_entry_id",
                "reason",
            ]
        ),
        json_values,
        max_size=3,
    )
)
def test_random_json_never_causes_a_server_error(setup, name, mutation):
    valid, call = setup
    response = call(name, body=valid(name) | mutation)
    assert response.status_code < 500, response.content


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("create", "id"),
        ("create", "name"),
        ("create", "source"),
        ("update", "name"),
        ("fork", "name"),
        ("submit", "request_id"),
        ("append", "entry_key"),
        ("claim_any", "claim_key"),
        ("settle", "reason"),
    ],
)
def test_a_lone_surrogate_in_any_text_field_is_a_400(setup, name, field):
    valid, call = setup
    before = counts()
    body = json.dumps(valid(name) | {field: "PLACEHOLDER"}).replace("PLACEHOLDER", "a\\ud800")
    refused(call(name, data=body), 400)
    assert counts() == before


@pytest.mark.parametrize(
    "when",
    [
        "0001-01-01T00:00:00+14:00",
        "9999-12-31T23:59:59-14:00",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
    ],
)
def test_extreme_not_before_instants_are_handled(setup, when):
    _, call = setup
    response = call("submit", body={"parts": TEXT, "not_before": when})
    assert response.status_code in (200, 201, 400), response.content


def test_unicode_digits_in_the_owner_filter_are_not_a_crash(api, owner):
    assert api(owner).get("/v1/conversations", {"owner": "²"}).status_code == 200


def test_deeply_nested_json_is_a_400(setup):
    _, call = setup
    response = call("submit", data='{"parts": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert response.status_code == 400


def test_an_unusable_conversation_id_on_an_entry_append_is_a_404(setup, api):
    """The runtime's append checks the path id before any query (a NUL would be a driver
    error on PostgreSQL, not an answer)."""
    valid, _ = setup
    before = counts()
    service = api("service")
    for cid in ("%00", "a%00b", "a%0A", "a" * 65, "%F0%9F%98%80", "a.b"):
        response = service.post(f"/v1/conversations/{cid}/entries", valid("append"), format="json")
        assert response.status_code == 404, (cid, response.status_code, response.content)
        assert response.json()["error"]["message"] == "Conversation not found"
    assert counts() == before


@pytest.mark.parametrize(
    ("name", "field"),
    [("submit", "parts"), ("append", "content")],
)
def test_an_unknown_key_in_a_content_part_is_reported_under_its_part(setup, name, field):
    """`details` names the fields that are wrong (docs/api.md): an unknown key of a part sits
    under that part, like its other problems, never as if the body had a field of that name."""
    valid, call = setup
    before = counts()
    body = valid(name) | {field: [{"type": "text", "text": "a"}, {**TEXT[0], "bogus": 1}]}
    response = call(name, body=body)
    refused(response, 400)
    assert response.json()["error"]["details"] == {field: {"1": {"bogus": ["Unknown field."]}}}
    assert counts() == before
