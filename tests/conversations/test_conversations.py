"""Conversations: idempotent create, list, update, archive, fork (spec 01)."""

from __future__ import annotations

import base64
import re

import pytest

from conversations.models import Conversation, Entry
from core.models import LifecycleEvent

pytestmark = pytest.mark.django_db


def events(kind: str) -> list[dict]:
    return [e.payload for e in LifecycleEvent.objects.filter(kind=kind).order_by("pk")]


def test_creating_with_a_client_id_twice_returns_the_existing_conversation(api, owner):
    client = api(owner)
    first = client.post("/v1/conversations", {"id": "c1", "name": "Plans"}, format="json")
    again = client.post("/v1/conversations", {"id": "c1", "name": "Other"}, format="json")
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json()["name"] == "Plans"
    assert again.json()["created_at"] == first.json()["created_at"]
    assert Conversation.objects.count() == 1
    assert events("conversation_created") == [{"conversation_id": "c1"}]


def test_an_id_taken_by_another_owner_is_a_409_conflict(api, owner, member):
    assert api(owner).post("/v1/conversations", {"id": "c1"}, format="json").status_code == 201
    response = api(member).post("/v1/conversations", {"id": "c1"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"] == {
        "category": "contract",
        "cause": "conflict",
        "message": "Conversation id is taken",
    }
    assert Conversation.objects.get().owner == owner
    assert len(events("conversation_created")) == 1


def test_a_generated_id_is_client_safe_and_unguessable(api, owner):
    client = api(owner)
    ids = {client.post("/v1/conversations", {}, format="json").json()["id"] for _ in range(3)}
    assert len(ids) == 3
    for cid in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22,64}", cid)


@pytest.mark.parametrize("bad", ["has space", "a" * 65, "tab\t", "newline\n", "", "ümlaut"])
def test_an_invalid_client_id_is_a_400_and_creates_nothing(api, owner, bad):
    response = api(owner).post("/v1/conversations", {"id": bad}, format="json")
    assert response.status_code == 400
    assert Conversation.objects.count() == 0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "n" * 201}, "Name is too long"),
        ({"source": "s" * 65}, "Source is too long"),
        ({"name": 7}, "Name must be text"),
    ],
)
def test_the_create_service_refuses_an_over_long_name_or_source_and_writes_nothing(
    owner, kit, fields, message
):
    """Not only the HTTP API's serializers: the host API and `ctx.send` reach the service."""
    from core.errors import HostError

    with pytest.raises(HostError) as refused:
        kit.conversation("made", **fields)
    assert (refused.value.category, refused.value.cause) == ("contract", "invalid")
    assert refused.value.message == message
    assert Conversation.objects.count() == 0
    assert events("conversation_created") == []

    made = kit.conversation("made", name="n" * 200, source="s" * 64)  # the bounds themselves
    assert (len(made.name), len(made.source)) == (200, 64)


def test_the_host_api_refuses_a_name_over_200_characters_like_the_http_api(install, owner):
    from extensions_host.runtime import detached_context, run_frame
    from extensions_host.sdk import AdmissionError, Extension

    install(Extension(id="maker", version="1", grants={"send"}))
    ctx = detached_context(extension_id="maker", hook="test")
    assert ctx is not None
    with pytest.raises(AdmissionError) as refused:
        ctx.host.conversations.create(id="made", name="n" * 300)  # outside a frame
    assert (refused.value.kind, refused.value.message) == ("invalid", "Name is too long")

    refusals: list[AdmissionError] = []

    def in_a_hook(ctx) -> None:
        try:
            ctx.host.conversations.create(id="made", source="s" * 65)
        except AdmissionError as exc:
            refusals.append(exc)

    assert run_frame(extension_id="maker", hook="test", call=in_a_hook).ok
    assert [e.message for e in refusals] == ["Source is too long"]
    assert Conversation.objects.count() == 0


def test_the_list_sorts_by_activity_newest_first(api, owner, kit, fake_clock):
    for cid in ("old", "mid", "new"):
        kit.conversation(cid)
        fake_clock.advance(seconds=10)
    listed = api(owner).get("/v1/conversations").json()["results"]
    assert [c["id"] for c in listed] == ["new", "mid", "old"]
    kit.submit("old")  # admission stamps activity
    listed = api(owner).get("/v1/conversations").json()["results"]
    assert [c["id"] for c in listed] == ["old", "new", "mid"]


def test_the_list_filters_by_owner_and_archived(api, owner, member, kit):
    kit.conversation("mine")
    kit.conversation("archived-one")
    Conversation.objects.filter(pk="archived-one").update(archived=True)
    kit.conversation("theirs", owner=member, sharing="users")
    client = api(owner)

    def ids(query: str) -> set[str]:
        response = client.get(f"/v1/conversations{query}")
        assert response.status_code == 200
        return {c["id"] for c in response.json()["results"]}

    assert ids("") == {"mine", "archived-one", "theirs"}
    assert ids("?owner=me") == {"mine", "archived-one"}
    assert ids(f"?owner={member.pk}") == {"theirs"}
    assert ids("?owner=member") == {"theirs"}
    assert ids("?archived=true") == {"archived-one"}
    assert ids("?archived=false&owner=me") == {"mine"}
    assert client.get("/v1/conversations?archived=maybe").status_code == 400


def test_the_list_is_cursor_paginated(api, owner, kit, fake_clock):
    for n in range(7):
        kit.conversation(f"c{n}")
        fake_clock.advance(seconds=1)
    client = api(owner)
    seen: list[str] = []
    url = "/v1/conversations?limit=3"
    pages = 0
    while url:
        body = client.get(url).json()
        assert len(body["results"]) <= 3
        seen += [c["id"] for c in body["results"]]
        url = body["next"]
        pages += 1
    assert pages == 3
    assert seen == [f"c{n}" for n in reversed(range(7))]
    assert client.get("/v1/conversations?limit=101").status_code == 400


@pytest.mark.parametrize("position", ["garbage", "\x00", "99999-99-99", ""])
def test_a_forged_cursor_is_a_400_never_a_500(api, owner, kit, position):
    kit.conversation("c1")
    cursor = base64.b64encode(f"p={position}".encode()).decode()
    for path in ("/v1/conversations", "/v1/conversations/c1/entries"):
        response = api(owner).get(path, {"cursor": cursor})
        assert response.status_code in (200, 400), response.content
    assert api(owner).get("/v1/conversations", {"cursor": "a"}).status_code == 400
    entries_cursor = base64.b64encode(b"p=99999999999999999999999").decode()
    assert (
        api(owner).get("/v1/conversations/c1/entries", {"cursor": entries_cursor}).status_code
        == 400
    )


def test_the_view_has_head_busy_attention_and_ambient(api, owner, kit):
    kit.conversation("c1")
    body = api(owner).get("/v1/conversations/c1").json()
    assert body["head"] is None
    assert body["busy"] is False
    assert body["attention"] == [] and body["ambient"] == []
    assert body["access"] == "owner"
    submission = kit.submit("c1")
    kit.claim("c1")
    body = api(owner).get("/v1/conversations/c1").json()
    assert body["head"] == submission.entry.pk
    assert body["busy"] is True


def test_rename_share_and_archive_bump_the_version_and_record_archive_events(api, owner, kit):
    kit.conversation("c1")
    client = api(owner)
    version = client.get("/v1/conversations/c1").json()["version"]
    renamed = client.patch(
        "/v1/conversations/c1", {"name": "Renamed", "sharing": "users"}, format="json"
    )
    assert renamed.status_code == 200
    assert renamed.json()["name"] == "Renamed"
    assert renamed.json()["sharing"] == "users"
    assert renamed.json()["version"] == version + 1
    archived = client.patch("/v1/conversations/c1", {"archived": True}, format="json").json()
    assert archived["archived"] is True and archived["archived_at"] is not None
    client.patch("/v1/conversations/c1", {"archived": True}, format="json")  # no change
    unarchived = client.patch("/v1/conversations/c1", {"archived": False}, format="json").json()
    assert unarchived["archived"] is False and unarchived["archived_at"] is None
    assert events("conversation_archived") == [
        {"conversation_id": "c1", "archived": True},
        {"conversation_id": "c1", "archived": False},
    ]
    too_long = client.patch("/v1/conversations/c1", {"name": "x" * 201}, format="json")
    assert too_long.status_code == 400


def test_an_archived_conversation_admits_no_submissions(api, owner, kit):
    kit.conversation("c1")
    client = api(owner)
    client.patch("/v1/conversations/c1", {"archived": True}, format="json")
    response = client.post(
        "/v1/conversations/c1/submissions",
        {"parts": [{"type": "text", "text": "hi"}]},
        format="json",
    )
    assert response.status_code == 409
    assert response.json()["error"]["category"] == "contract"
    assert response.json()["error"]["cause"] == "closed"
    assert response.json()["error"]["message"] == "Conversation is archived"


def test_fork_copies_the_transcript_up_to_and_including_the_entry(api, owner, kit):
    kit.conversation("parent", name="Parent")
    kit.submit("parent", "one")
    run = kit.claim("parent")
    answer = kit.settle(run, "two").answer_entry_id
    kit.submit("parent", "three")
    parent_entries = list(Entry.objects.filter(conversation_id="parent"))
    assert len(parent_entries) == 3

    response = api(owner).post(
        "/v1/conversations/parent/fork", {"at": answer, "id": "child"}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["id"], body["parent_id"], body["forked_at_entry"]) == ("child", "parent", answer)
    copies = list(Entry.objects.filter(conversation_id="child"))
    assert [(e.role, e.content) for e in copies] == [
        (e.role, e.content) for e in parent_entries[:2]
    ]
    assert not {e.pk for e in copies} & {e.pk for e in parent_entries}
    assert all(e.run_id is None and e.submission_id is None for e in copies)
    assert Entry.objects.filter(conversation_id="parent").count() == 3
    assert events("conversation_forked") == [
        {"child_id": "child", "parent_id": "parent", "at": answer}
    ]
    assert body["head"] == copies[-1].pk


def test_fork_is_idempotent_on_a_client_chosen_id(api, owner, member, kit):
    kit.conversation("parent")
    at = kit.submit("parent").entry.pk
    client = api(owner)
    assert (
        client.post(
            "/v1/conversations/parent/fork", {"at": at, "id": "f"}, format="json"
        ).status_code
        == 201
    )
    assert (
        client.post(
            "/v1/conversations/parent/fork", {"at": at, "id": "f"}, format="json"
        ).status_code
        == 200
    )
    assert Entry.objects.filter(conversation_id="f").count() == 1
    kit.conversation("taken", owner=member)
    taken = client.post("/v1/conversations/parent/fork", {"at": at, "id": "taken"}, format="json")
    assert taken.status_code == 409


def test_fork_refuses_a_name_over_200_characters_and_writes_nothing(owner, kit):
    from conversations.services import conversation_fork
    from core.auth import user_principal
    from core.errors import HostError

    kit.conversation("parent")
    at = kit.submit("parent").entry.pk
    with pytest.raises(HostError) as refused:
        conversation_fork(
            principal=user_principal(owner, "token"),
            conversation_id="parent",
            at=at,
            child_id="child",
            name="n" * 201,
        )
    assert refused.value.message == "Name is too long"
    assert list(Conversation.objects.values_list("pk", flat=True)) == ["parent"]


def test_a_fork_child_id_reused_at_another_fork_point_is_a_409(owner, kit):
    from conversations.services import conversation_fork
    from core.auth import user_principal
    from core.errors import HostError

    kit.conversation("parent")
    first = kit.submit("parent", say="one").entry.pk
    second = kit.submit("parent", say="two").entry.pk
    principal = user_principal(owner, "token")
    conversation_fork(principal=principal, conversation_id="parent", at=first, child_id="child")

    with pytest.raises(HostError) as refused:
        conversation_fork(
            principal=principal, conversation_id="parent", at=second, child_id="child"
        )

    assert (refused.value.cause, refused.value.message) == ("conflict", "Conversation id is taken")
    assert Conversation.objects.get(pk="child").forked_at_entry == first


def test_fork_at_an_entry_of_another_conversation_is_a_400(api, owner, kit):
    kit.conversation("a")
    kit.conversation("b")
    foreign = kit.submit("b").entry.pk
    response = api(owner).post("/v1/conversations/a/fork", {"at": foreign}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "at": ["Fork point is not an entry of this conversation"]
    }
    assert Conversation.objects.count() == 2
