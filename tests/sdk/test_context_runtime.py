"""What `ctx` gives at run time where the SDK's types promise it: the time left before the
deadline (`ctx.seconds_left()`), an interaction snapshot the SDK's `InteractionRecord` reads,
and the caller of an anonymous public route."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from extensions_host.runtime.deadlines import NESTED_MARGIN_SECONDS
from extensions_host.sdk import Context, EmptyInput, Extension, InteractionRecord


class Question(BaseModel):
    call_id: str
    extension: str | None = None


def clocked() -> Extension:
    ext = Extension(id="clocked", version="1", grants={"commands", "routes"}, deadline_s=7)

    @ext.command("left", scope="global", input=EmptyInput)
    def left(ctx: Context, data: EmptyInput) -> dict[str, Any]:
        return {"left": ctx.seconds_left()}

    @ext.route("GET", "left", auth="public", deadline_s=3)
    def route(ctx: Context, request: object) -> dict[str, Any]:
        left = ctx.seconds_left()
        return {
            "left": left,
            "in_transact": ctx.transact(lambda tx: tx.seconds_left()),
            "caller": ctx.caller.model_dump() if ctx.caller is not None else None,
        }

    return ext


def asking() -> Extension:
    ext = Extension(
        id="ask",
        version="1",
        grants={"commands", "attention"},
        interaction_kinds=("approval",),
    )

    @ext.command("ask", scope="conversation", input=Question)
    def ask(ctx: Context, conversation_id: str, data: Question) -> bool:
        record = InteractionRecord(
            call_id=data.call_id,
            kind="approval",
            prompt="Deploy?",
            options=["yes", "no"],
            extension=data.extension,
        )
        return ctx.interactions.seed(conversation_id, record)

    return ext


@pytest.fixture
def host(hyphae_host: Any) -> Any:
    hyphae_host.install(clocked(), asking())
    hyphae_host.conversation("c1")
    return hyphae_host


def test_a_hook_sees_the_time_left_of_its_own_deadline(host):
    left = host.command("clocked", "left")["left"]

    assert 6 < left <= 7  # the extension's deadline_s, just started


def test_a_route_sees_its_deadline_and_a_transact_in_it_ends_a_margin_before(host):
    answer = host.route("GET", "clocked", "left", anonymous=True).json()

    assert 2 < answer["left"] <= 3  # the route's own deadline_s
    assert 0 < answer["in_transact"] <= answer["left"] - NESTED_MARGIN_SECONDS


def test_an_anonymous_public_route_has_a_caller_with_an_empty_username(host):
    answer = host.route("GET", "clocked", "left", anonymous=True).json()

    assert answer["caller"] == {"username": "", "admin": False, "service": False}


def test_code_outside_any_bounded_call_has_no_deadline(host):
    assert host.read("clocked", lambda ctx: ctx.seconds_left()) is None


def test_an_interaction_snapshot_reads_back_as_the_sdks_interaction_record(host):
    # an `extension` given when seeding is the host's to stamp: ignored, like `created_at`
    host.command("ask", "ask", {"call_id": "q1", "extension": "other"}, conversation_id="c1")

    snapshot = host.read("ask", lambda ctx: ctx.interactions.snapshot("c1", "q1"))
    record = InteractionRecord.model_validate(snapshot)

    assert record.extension == "ask"
    assert (record.call_id, record.status, record.options) == ("q1", "pending", ["yes", "no"])
    assert isinstance(record.created_at, int) and record.settled_at is None
    assert record.model_dump() == snapshot
