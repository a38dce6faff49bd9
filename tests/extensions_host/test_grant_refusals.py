"""A call without its grant raises `AdmissionError(closed, "Extension is not granted <grant>")`
(spec 05), from every grant-gated `ctx` handle alike; in a command that is a 409."""

from __future__ import annotations

from typing import Any

import pytest

from extensions_host.models import ExtensionStatus
from extensions_host.runtime import run_frame
from extensions_host.runtime.context import MSG_NOT_GRANTED
from extensions_host.sdk import AdmissionError

from .conftest import roster
from .exts import make_ext

RECORD = {"call_id": "q1", "kind": "question", "prompt": "Go?"}
SURFACE = {"key": "status", "place": "header", "body": "hi"}

CALLS: dict[str, tuple[str, Any]] = {
    "seed_interaction": ("attention", lambda ctx: ctx.seed_interaction("c1", RECORD)),
    "answer_interaction": ("attention", lambda ctx: ctx.answer_interaction("c1", "q1", "yes")),
    "settle_interaction": ("attention", lambda ctx: ctx.settle_interaction("c1", "q1", "skipped")),
    "snapshot_interaction": ("attention", lambda ctx: ctx.snapshot_interaction("c1", "q1")),
    "interactions.seed": ("attention", lambda ctx: ctx.interactions.seed("c1", RECORD)),
    "set_ambient": ("attention", lambda ctx: ctx.set_ambient("c1", SURFACE)),
    "clear_ambient": ("attention", lambda ctx: ctx.clear_ambient("c1", "status")),
    "ambient.set": ("attention", lambda ctx: ctx.ambient.set("c1", SURFACE)),
    "attention.set": ("attention", lambda ctx: ctx.attention.set("c1", {"id": "a"})),
    "host.interactions": ("attention", lambda ctx: ctx.host.interactions.seed("c1", RECORD)),
    "host.ambient": ("attention", lambda ctx: ctx.host.ambient.set("c1", SURFACE)),
    "collection": ("state", lambda ctx: ctx.collection("item").get("k")),
    "document": ("state", lambda ctx: ctx.document("pad").read("c1")),
    "timers": ("timers", lambda ctx: ctx.timers.set("k", 1)),
    "has_pending_steer": ("run_tools", lambda ctx: ctx.has_pending_steer(1)),
}


def bare(ext_id: str = "bare", **kw: Any):
    """An extension with commands only: none of the gated grants."""
    return make_ext(
        ext_id,
        grants={"commands"},
        interaction_kinds=["question"],
        ambient_kinds=["status"],
        **kw,
    )


def refusal(call: Any) -> Any:
    def body(ctx: Any) -> tuple[str, str]:
        with pytest.raises(AdmissionError) as raised:
            call(ctx)
        return raised.value.kind, raised.value.message

    return body


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_gated_call_without_its_grant_is_refused_as_closed(install, conversation, name):
    install(bare())
    conversation("c1")
    grant, call = CALLS[name]

    outcome = run_frame(extension_id="bare", hook="test", call=refusal(call), failures="return")

    assert outcome.ok, outcome
    assert outcome.value == ("closed", MSG_NOT_GRANTED.format(grant=grant))


@pytest.mark.parametrize("name", ["seed_interaction", "set_ambient", "collection", "timers"])
def test_a_command_making_a_call_without_its_grant_answers_409(
    install, conversation, owner, api, name
):
    _, call = CALLS[name]
    commands = {"go": ({"scope": "conversation"}, lambda ctx, cid, data: call(ctx))}
    install(bare(commands=commands))
    conversation("c1")

    response = api(owner).post(
        "/v1/conversations/c1/extensions/bare/commands/go", {}, format="json"
    )

    assert response.status_code == 409
    error = response.json()["error"]
    grant = CALLS[name][0]
    assert (error["category"], error["cause"], error["message"]) == (
        "contract",
        "closed",
        MSG_NOT_GRANTED.format(grant=grant),
    )
    assert roster("bare").status == ExtensionStatus.RUNNING


def test_update_without_the_state_grant_is_refused_as_closed_before_any_frame(install):
    from extensions_host.runtime import detached_context

    install(bare())
    ctx = detached_context(extension_id="bare", hook="route")
    ran: list[bool] = []

    with pytest.raises(AdmissionError) as raised:
        ctx.update(lambda state: ran.append(True))

    assert (raised.value.kind, raised.value.message) == (
        "closed",
        MSG_NOT_GRANTED.format(grant="state"),
    )
    assert ran == []
    assert roster("bare").status == ExtensionStatus.RUNNING


def test_transact_needs_no_grant_of_its_own_and_each_capability_in_it_checks_its_own(install):
    from extensions_host.runtime import detached_context

    install(bare())
    ctx = detached_context(extension_id="bare", hook="route")

    assert ctx.transact(lambda frame: "ran") == "ran"
    with pytest.raises(AdmissionError) as raised:
        ctx.transact(lambda frame: frame.collection("item").get("k"))

    assert raised.value.message == MSG_NOT_GRANTED.format(grant="state")
    assert roster("bare").status == ExtensionStatus.RUNNING
