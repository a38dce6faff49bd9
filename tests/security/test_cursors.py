"""Every cursor-paginated list answers a cursor the server did not issue with 400 `Cursor is
invalid`: never a 404, and never a 500 from a position its ordering column cannot compare with
(a NUL, a number past bigint, text where an id goes)."""

from __future__ import annotations

import base64
from urllib.parse import urlencode

import pytest
from drf_spectacular.generators import SchemaGenerator

from conversations.models import Conversation
from core import clock

# (path, ordering column's kind)
LISTS = [
    ("/v1/conversations", "datetime"),
    ("/v1/conversations/c1/entries", "id"),
    ("/v1/conversations/c1/interactions", "id"),
    ("/v1/auth/tokens", "id"),
    ("/v1/extensions", "text"),
    ("/v1/commands", "text"),
    ("/v1/jobs", "text"),
]
POSITIONS = ["garbage", "\x00", "99999999999999999999999", "-1", "1\x00"]


def forged(position: str, reverse: bool = False) -> str:
    query = urlencode({"p": position} | ({"r": 1} if reverse else {}))
    return base64.b64encode(query.encode()).decode()


@pytest.mark.parametrize(("path", "kind"), LISTS)
@pytest.mark.parametrize("position", POSITIONS)
def test_a_forged_cursor_position_is_a_400_never_a_500(api, owner, path, kind, position):
    Conversation.objects.create(id="c1", owner=owner, last_activity_at=clock.now())
    response = api(owner).get(path, {"cursor": forged(position)})
    comparable = kind == "text" and "\x00" not in position
    if comparable:  # any text compares with a text column: an empty page, or the next one
        assert response.status_code == 200, response.content
    else:
        assert response.status_code == 400, response.content
        assert response.json()["error"]["message"] == "Cursor is invalid"


@pytest.mark.parametrize(("path", "kind"), LISTS)
def test_a_cursor_that_is_not_base64_is_a_400(api, owner, path, kind):
    Conversation.objects.create(id="c1", owner=owner, last_activity_at=clock.now())
    response = api(owner).get(path, {"cursor": "not a cursor"})
    assert response.status_code == 400, response.content
    assert response.json()["error"]["cause"] == "invalid"


# datetimes that parse but name no instant in range: they overflow only once the query converts
# them to UTC (a 500 on SQLite), or are naive (no instant at all)
OUT_OF_RANGE = [
    "9999-12-31 23:59:59-05:00",
    "0001-01-01 00:00:00+05:00",
    "2026-01-01 00:00:00",
    "2026-01-01",
]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("position", OUT_OF_RANGE)
def test_a_conversation_cursor_without_an_instant_in_range_is_a_400(api, owner, position, reverse):
    Conversation.objects.create(id="c1", owner=owner, last_activity_at=clock.now())
    client = api(owner)
    client.raise_request_exception = False  # the defect was a 500: see it as a status
    response = client.get("/v1/conversations", {"cursor": forged(position, reverse)})
    assert response.status_code == 400, response.content
    assert response.json()["error"]["message"] == "Cursor is invalid"


@pytest.mark.parametrize("position", ["9999-12-31 23:59:59+00:00", "2026-01-01 03:00:00+14:00"])
def test_a_conversation_cursor_at_an_aware_instant_in_range_is_served(api, owner, position):
    Conversation.objects.create(id="c1", owner=owner, last_activity_at=clock.now())
    response = api(owner).get("/v1/conversations", {"cursor": forged(position)})
    assert response.status_code == 200, response.content


@pytest.mark.parametrize(("path", "kind"), LISTS)
@pytest.mark.parametrize("limit", ["0", "101", "abc", ""])
def test_a_limit_out_of_bounds_is_a_400_on_every_list(api, owner, path, kind, limit):
    Conversation.objects.create(id="c1", owner=owner, last_activity_at=clock.now())
    response = api(owner).get(path, {"limit": limit})
    assert response.status_code == 400, response.content
    assert "limit" in response.json()["error"]["details"]


def test_every_list_is_a_documented_cursor_page():
    """Spec 07: lists are cursor pages with `limit` ≤ 100. No GET answers a bare array or a
    `results` without cursors, and every page documents its `cursor` and `limit`."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    pages = set()
    for path, operations in schema["paths"].items():
        operation = operations.get("get")
        if operation is None or "200" not in operation["responses"]:
            continue
        body = operation["responses"]["200"].get("content", {}).get("application/json", {})
        ref = body.get("schema", {}).get("$ref", "")
        shape = components[ref.rsplit("/", 1)[1]] if ref else body.get("schema", {})
        assert shape.get("type") != "array", path
        if "results" not in shape.get("properties", {}):
            continue
        assert {"next", "previous"} <= set(shape["properties"]), path
        parameters = {p["name"]: p["schema"] for p in operation.get("parameters", [])}
        assert "cursor" in parameters, path
        assert (parameters["limit"]["minimum"], parameters["limit"]["maximum"]) == (1, 100), path
        pages.add(path)
    assert {path.replace("c1", "{conversation_id}") for path, _ in LISTS} <= pages
