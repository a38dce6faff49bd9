"""What the host publishes about an input is what it enforces: the command catalog's
`input_schema` closes every object (`additionalProperties: false`), nested ones in `$defs`
too, because the input check refuses unknown fields at every level (`model_from_json`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from core.validation import input_json_schema

from .exts import make_ext


class Where(BaseModel):
    room: str


class BookInput(BaseModel):
    title: str
    where: Where
    tags: dict[str, int] = {}


def book(ctx: Any, conversation_id: str, data: BookInput) -> dict[str, str]:
    return {"title": data.title}


def booking_ext() -> Any:
    return make_ext(
        "booking",
        grants={"commands"},
        commands={"book": ({"scope": "conversation", "input": BookInput}, book)},
    )


def test_the_input_schema_closes_every_object_and_leaves_mappings_open():
    schema = input_json_schema(BookInput)

    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Where"]["additionalProperties"] is False
    # a mapping's keys are data: its value schema stays as pydantic publishes it
    assert schema["properties"]["tags"]["additionalProperties"] == {"type": "integer"}


def test_the_catalog_publishes_closed_input_schemas_that_the_command_enforces(
    install, conversation, owner, api
):
    install(booking_ext())
    conversation("c1")
    client = api(owner)

    slot = client.get("/v1/conversations/c1/projection").json()["slots"]["booking"]
    (entry,) = [e for e in slot["catalog"] if e["name"] == "book"]
    schema = entry["input_schema"]
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Where"]["additionalProperties"] is False

    url = "/v1/conversations/c1/extensions/booking/commands/book"
    top = client.post(url, {"title": "t", "where": {"room": "a"}, "extra": 1}, format="json")
    nested = client.post(url, {"title": "t", "where": {"room": "a", "floor": 2}}, format="json")
    assert (top.status_code, nested.status_code) == (400, 400)
    assert set(top.json()["error"]["details"]) == {"extra"}
    assert set(nested.json()["error"]["details"]) == {"where.floor"}
    ok = client.post(url, {"title": "t", "where": {"room": "a"}}, format="json")
    assert ok.status_code == 200
