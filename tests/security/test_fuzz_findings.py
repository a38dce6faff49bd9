"""Each defect the schemathesis run found, pinned as a plain test (the fuzzer finds them only
with luck and a seed; these fail every time the defect comes back)."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


@pytest.mark.parametrize(
    "query",
    ["?archived=", "?archived=null", "?owner=", "?cursor=", "?limit=", "?limit=0", "?limit=101"],
)
def test_an_empty_or_out_of_range_list_parameter_is_a_400_not_absent(api, owner, query):
    response = api(owner).get(f"/v1/conversations{query}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["cause"] == "invalid"


def test_an_empty_cursor_on_a_transcript_is_a_400(api, owner, build_world):
    build_world("private")
    assert api(owner).get("/v1/conversations/c/entries?cursor=").status_code == 400


@pytest.mark.parametrize(
    "path",
    [
        "/v1/worlds/{world}/artifacts",
        "/v1/worlds/{world}/artifacts/followups",
        "/v1/artifacts/operations/op-1",
        "/v1/conversations/{world}/interactions",
        "/v1/conversations/{world}/projection",
    ],
)
@pytest.mark.parametrize("world", ["c", "missing"])
def test_anonymous_reads_of_what_they_cannot_see_are_401_never_404(build_world, api, path, world):
    """Authentication first (spec 01): a 404 would tell an anonymous caller more than a 401."""
    build_world("private")
    response = api(None).get(path.format(world=world))
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="hyphae"'


def test_a_token_name_is_taken_as_sent_and_bounded_as_documented(api, owner, schema):
    documented = schema["components"]["schemas"]["TokenListCreateInputRequest"]
    assert documented["properties"]["name"]["maxLength"] == 100
    client = api(owner)
    assert (
        client.post("/v1/auth/tokens", {"name": " " + "n" * 100}, format="json").status_code == 400
    )
    assert client.post("/v1/auth/tokens", {"name": "n" * 100}, format="json").status_code == 201


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/auth/tokens", {"name": 102}),
        ("/v1/conversations", {"name": 102}),
        ("/v1/conversations", {"id": 7}),
    ],
)
def test_a_number_where_the_schema_says_string_is_a_400(api, owner, path, body):
    response = api(owner).post(path, body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["details"]) == list(body)


def test_strict_bodies_and_throttled_writes_are_documented(schema):
    components = schema["components"]["schemas"]
    assert components["SubmissionCreateInputRequest"]["additionalProperties"] is False
    assert components["RunSettleInputRequest"]["additionalProperties"] is False
    settle = schema["paths"]["/v1/runs/{run_id}/settle"]["post"]["responses"]
    assert "429" in settle
    # reads of public conversations need no credentials: the empty requirement says so
    read = schema["paths"]["/v1/conversations/{conversation_id}"]["get"]["security"]
    write = schema["paths"]["/v1/conversations/{conversation_id}"]["patch"]["security"]
    assert {} in read and {} not in write


def test_query_and_header_bounds_are_documented(schema):
    debug = schema["paths"]["/v1/worlds/{world_id}/artifacts/debug"]["get"]["parameters"]
    limit = next(p for p in debug if p["name"] == "limit")["schema"]
    assert (limit["minimum"], limit["maximum"]) == (1, 100)
    command = schema["paths"]["/v1/extensions/{extension_id}/commands/{name}"]["post"]
    key = next(p for p in command["parameters"] if p["name"] == "Idempotency-Key")["schema"]
    assert (key["minLength"], key["maxLength"]) == (1, 256)
