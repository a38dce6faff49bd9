"""The OpenAPI schema documents every conversation and run endpoint exactly."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

OPERATIONS = {
    ("/v1/conversations", "get"): {"200", "400", "401"},
    ("/v1/conversations", "post"): {"200", "201", "400", "401", "403", "409", "413", "415"},
    ("/v1/conversations/{conversation_id}", "get"): {"200", "401", "404"},
    ("/v1/conversations/{conversation_id}", "patch"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "413",
        "415",
    },
    ("/v1/conversations/{conversation_id}/fork", "post"): {
        "200",
        "201",
        "400",
        "401",
        "403",
        "404",
        "409",
        "413",
        "415",
    },
    ("/v1/conversations/{conversation_id}/entries", "get"): {"200", "400", "401", "404"},
    ("/v1/conversations/{conversation_id}/entries", "post"): {
        "200",
        "201",
        "400",
        "401",
        "403",
        "404",
        "409",
        "413",
        "415",
    },
    ("/v1/conversations/{conversation_id}/submissions", "post"): {
        "200",
        "201",
        "400",
        "401",
        "403",
        "404",
        "409",
        "413",
        "415",
    },
    ("/v1/conversations/{conversation_id}/submissions/{submission_id}", "delete"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "409",
        "413",
        "415",
    },
    ("/v1/conversations/{conversation_id}/runs", "post"): {
        "200",
        "201",
        "204",
        "400",
        "401",
        "403",
        "404",
        "409",
        "413",
        "415",
        "422",
        "503",
    },
    ("/v1/runs/claim", "post"): {
        "200",
        "201",
        "204",
        "400",
        "401",
        "403",
        "409",
        "413",
        "415",
        "422",
        "503",
    },
    ("/v1/runs/{run_id}", "get"): {"200", "401", "404"},
    ("/v1/runs/{run_id}/heartbeat", "post"): {
        "200",
        "400",
        "401",
        "403",
        "404",
        "409",
        "413",
        "415",
    },
    ("/v1/runs/{run_id}/settle", "post"): {"200", "400", "401", "403", "404", "409", "413", "415"},
    ("/v1/runs/{run_id}/steers", "post"): {"200", "400", "401", "403", "404", "409", "413", "415"},
}


@pytest.fixture(scope="module")
def schema():
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def test_every_endpoint_is_documented_with_every_status(schema):
    for (path, method), statuses in OPERATIONS.items():
        operation = schema["paths"][path][method]
        # every write a principal's rate can refuse also documents 429, and every operation
        # its 406 for an Accept that allows no JSON and its 503 for the store (core.schema)
        throttled = {"429"} if method != "get" else set()
        expected = statuses | throttled | {"406", "503"}
        assert set(operation["responses"]) == expected, (path, method)
        for code, response in operation["responses"].items():
            if code.startswith(("4", "5")):
                ref = response["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/Error"), (path, method, code)


@pytest.mark.parametrize("path", ["/v1/runs/claim", "/v1/conversations/{conversation_id}/runs"])
def test_claims_document_the_503_of_a_participation_hook_that_asks_to_retry(schema, path):
    """A `Retry` from a claim-time participation hook fails the claim with 503 + Retry-After
    (extensions_host/surfaces/services/participation.py)."""
    unavailable = schema["paths"][path]["post"]["responses"]["503"]
    assert "participation hook asked to retry" in unavailable["description"]
    assert "Retry-After" in unavailable["headers"]
    assert unavailable["content"]["application/json"]["schema"]["$ref"].endswith("/Error")


def test_every_api_operation_documents_its_406_as_it_answers_it(schema, api, owner):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method in {"get", "post", "put", "patch", "delete"} and not operation.get(
                "x-streaming"
            ):
                assert "406" in operation["responses"], (path, method)
    response = api(owner).get("/v1/conversations", HTTP_ACCEPT="application/xml")
    assert response.status_code == 406
    assert (response.json()["error"]["category"], response.json()["error"]["cause"]) == (
        "contract",
        "invalid",
    )


def test_error_responses_document_the_headers_the_server_sends(schema, api, owner):
    documented = []
    for operations in schema["paths"].values():
        for operation in operations.values():
            responses = operation.get("responses", {}) if isinstance(operation, dict) else {}
            for code, header in (("401", "WWW-Authenticate"), ("429", "Retry-After"),
                                 ("503", "Retry-After")):  # fmt: skip
                if code in responses:
                    assert header in responses[code].get("headers", {}), (code, operation)
                    documented.append(code)
    assert {"401", "429", "503"} <= set(documented)
    # and the server sends them
    unauthenticated = api(None).post("/v1/conversations", {}, format="json")
    assert unauthenticated.status_code == 401
    assert unauthenticated["WWW-Authenticate"] == 'Bearer realm="hyphae"'


def test_request_bodies_are_exact_components(schema):
    components = schema["components"]["schemas"]
    submission = components["SubmissionCreateInputRequest"]
    assert submission["required"] == ["parts"]
    assert set(submission["properties"]) == {
        "request_id",
        "parts",
        "when_busy",
        "delivery",
        "not_before",
    }
    part = components["SubmissionPartRequest"]
    assert (
        part["properties"]["type"]["$ref"].endswith("Enum") or "enum" in part["properties"]["type"]
    )
    settle = components["RunSettleInputRequest"]
    assert set(settle["properties"]) == {"status", "answer_entry_id", "reason"}
    view = components["ConversationDetail"]
    assert {"attention", "ambient", "head", "busy", "version", "access"} <= set(view["properties"])


def test_operation_ids_are_unique(schema):
    ids = [
        op["operationId"]
        for item in schema["paths"].values()
        for op in item.values()
        if isinstance(op, dict) and "operationId" in op
    ]
    assert len(ids) == len(set(ids))


def test_the_client_guide_names_only_operations_the_schema_has(schema):
    import re
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    named = set(re.findall(r"\(`([a-z_]+)`\)", guide))
    published = {
        operation["operationId"]
        for methods in schema["paths"].values()
        for operation in methods.values()
    }
    assert len(named) >= 10
    assert named <= published, sorted(named - published)
