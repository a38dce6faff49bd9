"""Interactions: declared kinds, seed/answer/settle/snapshot, the user's answer endpoint and the
`interaction.pending` notification event (spec 04, Interactions)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from conversations.models import Conversation
from extensions_host.contributions.models import Notification
from extensions_host.sdk import StateError
from extensions_host.surfaces.models import Interaction

from .conftest import in_frame
from .exts import make_ext


def asker(**extra: Any) -> Any:
    return make_ext("ask", grants={"attention"}, interaction_kinds=("approval", "choice"), **extra)


def record(call_id: str = "call-1", **extra: Any) -> dict[str, Any]:
    return {"call_id": call_id, "kind": "approval", "prompt": "Deploy to production?", **extra}


def seed(value: dict[str, Any], cid: str = "c1") -> Any:
    return lambda ctx: ctx.seed_interaction(cid, value)


def test_seeding_a_pending_interaction_stores_it_and_records_a_notification(
    install, conversation, owner, settings
):
    settings.HOST_PUBLIC_URL = "https://hyphae.example"
    install(asker())
    conversation("c1")
    before = Conversation.objects.get(pk="c1").version

    assert in_frame("ask", seed(record(options=["yes", "no"]))).value is True

    snapshot = in_frame("ask", lambda ctx: ctx.snapshot_interaction("c1", "call-1")).value
    assert snapshot["status"] == "pending"
    assert snapshot["options"] == ["yes", "no"]
    assert snapshot["extension"] == "ask"
    assert isinstance(snapshot["created_at"], int) and snapshot["settled_at"] is None
    event = Notification.objects.get()
    assert (event.type, event.conversation_id, event.user) == (
        "interaction.pending",
        "c1",
        owner.username,
    )
    assert event.url == "https://hyphae.example/inspect/c1"
    assert (event.title, event.body) == ("ask: approval", "Deploy to production?")
    assert Conversation.objects.get(pk="c1").version == before + 1


def test_answering_twice_the_second_returns_false(install, conversation):
    install(asker())
    conversation("c1")
    assert in_frame("ask", seed(record())).ok

    first = in_frame("ask", lambda ctx: ctx.answer_interaction("c1", "call-1", {"ok": True}))
    second = in_frame("ask", lambda ctx: ctx.answer_interaction("c1", "call-1", {"ok": False}))

    assert (first.value, second.value) == (True, False)
    stored = Interaction.objects.get()
    assert (stored.status, stored.answer) == ("answered", {"ok": True})
    assert stored.settled_at_ms is not None


def test_seeding_a_terminal_record_is_a_no_op(install, conversation):
    install(asker())
    conversation("c1")

    outcome = in_frame("ask", seed(record(status="answered", answer="yes")))

    assert outcome.value is False
    assert not Interaction.objects.exists()
    assert not Notification.objects.exists()


def test_seeding_over_a_terminal_record_is_a_no_op(install, conversation):
    install(asker())
    conversation("c1")
    assert in_frame("ask", seed(record())).ok
    assert in_frame("ask", lambda ctx: ctx.answer_interaction("c1", "call-1", "yes")).value

    outcome = in_frame("ask", seed(record(prompt="Ask again?")))

    assert outcome.value is False
    stored = Interaction.objects.get()
    assert (stored.status, stored.prompt, stored.answer) == (
        "answered",
        "Deploy to production?",
        "yes",
    )


def test_reseeding_a_pending_record_replaces_it_without_a_second_notification(
    install, conversation
):
    install(asker())
    conversation("c1")
    assert in_frame("ask", seed(record())).ok

    assert in_frame("ask", seed(record(kind="choice", prompt="Which one?"))).value is True

    stored = Interaction.objects.get()
    assert (stored.kind, stored.prompt) == ("choice", "Which one?")
    assert Notification.objects.count() == 1


def test_an_undeclared_kind_is_a_bound_error(install, conversation):
    install(asker())
    conversation("c1")
    errors: list[StateError] = []

    def hook(ctx: Any) -> None:
        try:
            ctx.seed_interaction("c1", record(kind="survey"))
        except StateError as exc:
            errors.append(exc)

    assert in_frame("ask", hook).ok
    assert (errors[0].kind, errors[0].message) == ("bound", "Interaction kind is not declared")
    assert not Interaction.objects.exists()


@pytest.mark.parametrize("status", ["skipped", "expired", "cancelled"])
def test_settling_moves_only_a_pending_record(install, conversation, status):
    install(asker())
    conversation("c1")
    assert in_frame("ask", seed(record())).ok

    first = in_frame("ask", lambda ctx: ctx.settle_interaction("c1", "call-1", status))
    second = in_frame("ask", lambda ctx: ctx.settle_interaction("c1", "call-1", "cancelled"))

    assert (first.value, second.value) == (True, False)
    assert Interaction.objects.get().status == status


def test_settling_with_answered_is_a_bound_error(install, conversation):
    install(asker())
    conversation("c1")
    assert in_frame("ask", seed(record())).ok
    errors: list[StateError] = []

    def hook(ctx: Any) -> None:
        try:
            ctx.settle_interaction("c1", "call-1", "answered")
        except StateError as exc:
            errors.append(exc)

    assert in_frame("ask", hook).ok
    assert errors[0].kind == "bound"


def test_another_extensions_call_id_is_a_conflict_and_invisible_to_it(install, conversation):
    install(asker(), make_ext("other", grants={"attention"}, interaction_kinds=("approval",)))
    conversation("c1")
    assert in_frame("ask", seed(record())).ok
    errors: list[StateError] = []

    def hook(ctx: Any) -> Any:
        try:
            ctx.seed_interaction("c1", record())
        except StateError as exc:
            errors.append(exc)
        return ctx.snapshot_interaction("c1", "call-1")

    assert in_frame("other", hook).value is None
    assert errors[0].kind == "conflict"


def test_the_user_answers_through_the_api_and_a_second_answer_returns_false(
    install, conversation, api, owner
):
    install(asker())
    conversation("c1")
    assert in_frame("ask", seed(record())).ok
    client = api(owner)
    url = "/v1/conversations/c1/interactions/call-1/answer"

    first = client.post(url, {"answer": {"approve": True}}, format="json")
    second = client.post(url, {"answer": {"approve": False}}, format="json")

    assert first.status_code == 200
    assert first.json()["answered"] is True
    assert first.json()["interaction"]["status"] == "answered"
    assert second.json()["answered"] is False
    assert second.json()["interaction"]["answer"] == {"approve": True}
    stored = Interaction.objects.get()
    assert stored.answered_by_id == owner.pk
    # the extension reads the user's answer
    snapshot = in_frame("ask", lambda ctx: ctx.snapshot_interaction("c1", "call-1")).value
    assert snapshot["answer"] == {"approve": True}


@pytest.mark.parametrize("call_id", ["tool/1", "a/b/answer"])
def test_a_call_id_with_a_slash_is_answered_by_its_user(install, conversation, api, owner, call_id):
    install(asker())
    conversation("c1")
    assert in_frame("ask", seed(record(call_id))).value is True
    url = f"/v1/conversations/c1/interactions/{quote(call_id, safe='')}/answer"

    response = api(owner).post(url, {"answer": "yes"}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["answered"] is True
    assert response.json()["interaction"]["call_id"] == call_id
    assert Interaction.objects.get().status == "answered"


def test_the_answer_endpoint_checks_access_and_input(
    install, conversation, api, owner, member, outsider
):
    install(asker())
    conversation("c1", sharing="users")
    assert in_frame("ask", seed(record())).ok
    url = "/v1/conversations/c1/interactions/call-1/answer"

    assert api(member).post(url, {"answer": "yes"}, format="json").status_code == 403
    assert api(None).post(url, {"answer": "yes"}, format="json").status_code == 401
    assert api(owner).post(url, {"answer": "yes", "x": 1}, format="json").status_code == 400
    assert api(owner).post(url, {}, format="json").status_code == 400
    missing = "/v1/conversations/c1/interactions/nope/answer"
    assert api(owner).post(missing, {"answer": "yes"}, format="json").status_code == 404
    private = "/v1/conversations/c2/interactions/call-1/answer"
    conversation("c2")
    assert api(outsider).post(private, {"answer": "yes"}, format="json").status_code == 404
    assert Interaction.objects.get().status == "pending"


def test_the_list_endpoint_shows_the_conversations_interactions_to_readers(
    install, conversation, api, owner, member, outsider
):
    install(asker())
    conversation("c1", sharing="users")
    assert in_frame("ask", seed(record("a"))).ok
    assert in_frame("ask", seed(record("b"))).ok
    assert in_frame("ask", lambda ctx: ctx.settle_interaction("c1", "a", "skipped")).ok

    everything = api(member).get("/v1/conversations/c1/interactions").json()["results"]
    pending = api(owner).get("/v1/conversations/c1/interactions?status=pending").json()

    assert [i["call_id"] for i in everything] == ["a", "b"]
    assert [i["call_id"] for i in pending["results"]] == ["b"]
    conversation("c2")
    assert api(outsider).get("/v1/conversations/c2/interactions").status_code == 404
    unknown = api(owner).get("/v1/conversations/c1/interactions?bogus=1")
    assert unknown.status_code == 400
    assert unknown.json()["error"]["message"] == "Query parameters are invalid"
    assert unknown.json()["error"]["details"] == {"bogus": ["Unknown query parameter."]}


def test_an_answer_outside_the_options_is_refused_before_anything_is_written(
    install, conversation, api, owner
):
    install(asker())
    conversation("c1")
    assert in_frame("ask", seed(record(options=["approve", "reject"]))).ok
    url = "/v1/conversations/c1/interactions/call-1/answer"
    client = api(owner)

    for wrong in ("Approve", "", {"answer": "approve"}, ["approve"], 1):
        response = client.post(url, {"answer": wrong}, format="json")
        assert response.status_code == 400, wrong
        assert response.json()["error"]["category"] == "contract"
        assert response.json()["error"]["cause"] == "invalid"
        assert (
            response.json()["error"]["message"] == "Interaction answer must be one of its options"
        )
        assert response.json()["error"]["details"] == {
            "answer": ["Expected one of ['approve', 'reject']"]
        }
    stored = Interaction.objects.get()
    assert (stored.status, stored.answer, stored.answered_by_id) == ("pending", None, None)

    accepted = client.post(url, {"answer": "approve"}, format="json")
    assert accepted.status_code == 200
    assert accepted.json()["interaction"]["answer"] == "approve"


def test_an_extension_answering_outside_its_options_is_a_bound_error(install, conversation):
    install(asker())
    conversation("c1")
    assert in_frame("ask", seed(record(options=["yes", "no"]))).ok
    errors: list[StateError] = []

    def hook(ctx: Any) -> None:
        try:
            ctx.answer_interaction("c1", "call-1", "maybe")
        except StateError as exc:
            errors.append(exc)

    assert in_frame("ask", hook).ok
    assert (errors[0].kind, errors[0].message) == (
        "bound",
        "Interaction answer must be one of its options",
    )
    assert Interaction.objects.get().status == "pending"
    assert in_frame("ask", lambda ctx: ctx.answer_interaction("c1", "call-1", "no")).value is True


def test_an_extension_cannot_answer_or_settle_another_extensions_record(install, conversation):
    install(asker(), make_ext("other", grants={"attention"}, interaction_kinds=("approval",)))
    conversation("c1")
    assert in_frame("ask", seed(record())).ok

    answered = in_frame("other", lambda ctx: ctx.answer_interaction("c1", "call-1", "yes"))
    settled = in_frame("other", lambda ctx: ctx.settle_interaction("c1", "call-1", "cancelled"))

    assert (answered.value, settled.value) == (False, False)
    stored = Interaction.objects.get()
    assert (stored.status, stored.answer, stored.settled_at_ms) == ("pending", None, None)


def test_a_users_answer_bumps_the_conversation_version(install, conversation, api, owner):
    install(asker())
    conversation("c1")
    assert in_frame("ask", seed(record())).ok
    before = Conversation.objects.get(pk="c1").version

    response = api(owner).post(
        "/v1/conversations/c1/interactions/call-1/answer", {"answer": "yes"}, format="json"
    )

    assert response.json()["answered"] is True
    assert Conversation.objects.get(pk="c1").version == before + 1
