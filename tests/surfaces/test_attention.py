"""Attention items: schema and bounds, visibility (running + granted), ordering, expiry, and
their place in the conversation view and the projection response (spec 04, Attention)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from conversations.models import Conversation
from core import clock
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import extension_stop
from extensions_host.sdk import AdmissionError, StateError
from extensions_host.services.roster import extension_admit_grants, extension_resume
from extensions_host.surfaces.models import AttentionItem
from extensions_host.surfaces.selectors import attention_visible
from extensions_host.surfaces.services.attention import attention_prune_expired

from .conftest import in_frame, roster
from .exts import captured, make_ext


def item(item_id: str = "i1", level: str = "info", **extra: Any) -> dict[str, Any]:
    return {"id": item_id, "level": level, "title": f"Look at {item_id}", **extra}


def set_items(*items: dict[str, Any], cid: str = "c1") -> Any:
    def hook(ctx: Any) -> None:
        for value in items:
            ctx.attention.set(cid, value)

    return hook


def watcher() -> Any:
    return make_ext("watch", grants={"attention"})


def ids(cid: str = "c1") -> list[str]:
    return [i["id"] for i in attention_visible(conversation_id=cid)]


def test_set_items_are_visible_ordered_by_level_then_newest_first(
    install, conversation, fake_clock
):
    install(watcher())
    conversation("c1")
    for value in (item("old-info"), item("warn", "warning"), item("act", "action")):
        assert in_frame("watch", set_items(value)).ok
        fake_clock.advance(ms=10)
    assert in_frame("watch", set_items(item("new-info"))).ok

    visible = attention_visible(conversation_id="c1")

    assert [i["id"] for i in visible] == ["act", "warn", "new-info", "old-info"]
    assert visible[0] == {
        "extension": "watch",
        "id": "act",
        "level": "action",
        "title": "Look at act",
        "set_at_ms": visible[0]["set_at_ms"],
    }


def test_setting_an_item_again_replaces_it_and_bumps_the_version(install, conversation):
    install(watcher())
    conversation("c1")
    assert in_frame("watch", set_items(item("i1"))).ok
    before = Conversation.objects.get(pk="c1").version

    assert in_frame("watch", set_items(item("i1", "warning", body="details"))).ok

    assert AttentionItem.objects.count() == 1
    assert attention_visible(conversation_id="c1")[0]["body"] == "details"
    assert Conversation.objects.get(pk="c1").version == before + 1


def test_clear_removes_the_item(install, conversation):
    install(watcher())
    conversation("c1")
    assert in_frame("watch", set_items(item("i1"), item("i2"))).ok

    outcome = in_frame("watch", lambda ctx: ctx.attention.clear("c1", "i1"))

    assert outcome.value is True
    assert ids() == ["i2"]


@pytest.mark.parametrize(
    "bad",
    [
        item(surprise=True),
        item(level="urgent"),
        {"id": "", "level": "info", "title": "t"},
        {"id": "x" * 257, "level": "info", "title": "t"},
        item(title="t" * 201),
        item(body="b" * 2001),
        item(command={"name": "open"}, extra=1),
        item(expires_at_ms="soon"),
        item(title="nul\x00"),
        "not an item",
    ],
)
def test_an_invalid_item_is_a_bound_error_and_writes_nothing(install, conversation, bad):
    install(watcher())
    conversation("c1")

    outcome = in_frame("watch", captured(lambda ctx: ctx.attention.set("c1", bad)))

    assert isinstance(outcome.value, StateError)
    assert outcome.value.kind == "bound"
    assert not AttentionItem.objects.exists()


def test_attention_on_a_missing_conversation_is_a_bound_error(install, conversation):
    install(watcher())

    outcome = in_frame("watch", captured(lambda ctx: ctx.attention.set("nope", item())))

    assert outcome.value.kind == "bound"


@pytest.mark.parametrize("call", ["set", "clear"])
def test_a_malformed_conversation_id_is_a_bound_error_for_set_and_clear(
    install, conversation, call
):
    install(watcher())
    write = {
        "set": lambda ctx: ctx.attention.set("bad id!", item()),
        "clear": lambda ctx: ctx.attention.clear("bad id!", "i1"),
    }[call]

    outcome = in_frame("watch", captured(write))

    assert isinstance(outcome.value, StateError)
    assert (outcome.value.kind, outcome.value.message) == ("bound", "Conversation id is invalid")


def test_clearing_on_a_well_formed_id_of_no_conversation_finds_nothing(install):
    install(watcher())

    assert in_frame("watch", lambda ctx: ctx.attention.clear("nope", "i1")).value is False


def test_the_1025th_item_is_a_bound_error_and_nothing_is_written(install, conversation):
    install(watcher())
    conversation("c1")
    conversation("c2")
    first = [item(f"a{n}") for n in range(600)]
    second = [item(f"b{n}") for n in range(424)]
    assert in_frame("watch", set_items(*first, cid="c1")).ok
    assert in_frame("watch", set_items(*second, cid="c2")).ok
    assert AttentionItem.objects.count() == 1024

    def one_more_then_other_writes(ctx: Any) -> None:
        ctx.attention.set("c2", item("b-last"))

    outcome = in_frame("watch", captured(one_more_then_other_writes))

    assert outcome.value.kind == "bound"
    assert "max_attention (1024)" in outcome.value.message
    assert AttentionItem.objects.count() == 1024
    assert not AttentionItem.objects.filter(item_id="b-last").exists()
    # replacing an existing item is not a new one
    assert in_frame("watch", set_items(item("a1", "warning"), cid="c1")).ok


def test_a_raising_hook_rolls_its_attention_back(install, conversation):
    install(watcher())
    conversation("c1")

    def hook(ctx: Any) -> None:
        ctx.attention.set("c1", item())
        raise RuntimeError("boom")

    assert in_frame("watch", hook).status == "stopped"
    assert not AttentionItem.objects.exists()


def test_expired_items_are_not_shown_and_the_sweep_prunes_them(install, conversation, fake_clock):
    install(watcher())
    conversation("c1")
    soon = clock.now_ms() + 1000
    assert in_frame("watch", set_items(item("brief", expires_at_ms=soon), item("stays"))).ok
    assert ids() == ["brief", "stays"] or ids() == ["stays", "brief"]
    version = Conversation.objects.get(pk="c1").version

    fake_clock.advance(ms=1000)

    assert ids() == ["stays"]
    assert attention_prune_expired() == (1, False)
    assert list(AttentionItem.objects.values_list("item_id", flat=True)) == ["stays"]
    assert Conversation.objects.get(pk="c1").version == version + 1


def test_expired_items_do_not_count_against_the_bound(install, conversation, fake_clock, settings):
    settings.HOST_QUOTAS = dict(settings.HOST_QUOTAS, max_attention=1)
    install(watcher())
    conversation("c1")
    assert in_frame("watch", set_items(item("a", expires_at_ms=clock.now_ms() + 10))).ok
    fake_clock.advance(ms=10)

    assert in_frame("watch", set_items(item("b"))).ok


def test_reviving_an_expired_item_counts_against_the_bound_like_a_new_one(
    install, conversation, fake_clock, settings
):
    settings.HOST_QUOTAS = dict(settings.HOST_QUOTAS, max_attention=2)
    install(watcher())
    conversation("c1")
    assert in_frame("watch", set_items(item("old", expires_at_ms=clock.now_ms() + 10))).ok
    fake_clock.advance(ms=10)
    assert in_frame("watch", set_items(item("a"), item("b"))).ok  # the expired one is not counted

    outcome = in_frame("watch", captured(lambda ctx: ctx.attention.set("c1", item("old"))))

    assert outcome.value.kind == "bound"
    assert "max_attention (2)" in outcome.value.message
    assert sorted(ids()) == ["a", "b"]
    # an outstanding item is still replaced in place, at the bound
    assert in_frame("watch", set_items(item("a", "warning"))).ok


def test_without_the_attention_grant_setting_is_refused_as_closed(install, conversation):
    install(make_ext("watch", grants={"state"}))
    conversation("c1")

    def refused(ctx: Any) -> AdmissionError | None:
        try:
            ctx.attention.set("c1", item())
        except AdmissionError as exc:
            return exc
        return None

    outcome = in_frame("watch", refused)

    assert outcome.value.kind == "closed"
    assert outcome.value.message == "Extension is not granted attention"


def test_a_stop_hides_the_items_everywhere_and_a_resume_shows_them_again(install, conversation):
    install(watcher(), make_ext("other", grants={"attention"}))
    conversation("c1")
    conversation("c2")
    assert in_frame("watch", set_items(item("w1"), cid="c1")).ok
    assert in_frame("watch", set_items(item("w2"), cid="c2")).ok
    assert in_frame("other", set_items(item("o1"), cid="c1")).ok
    versions = dict(Conversation.objects.values_list("id", "version"))

    extension_stop(extension_id="watch", hook="test", reason="stopped by the test")

    assert ids("c1") == ["o1"]
    assert ids("c2") == []
    # watchers were told: both conversations' versions moved
    after = dict(Conversation.objects.values_list("id", "version"))
    assert after["c1"] > versions["c1"] and after["c2"] > versions["c2"]

    extension_resume(extension_id="watch", actor="staff")

    assert sorted(ids("c1")) == ["o1", "w1"]
    assert ids("c2") == ["w2"]


@pytest.fixture
def watched(install, conversation) -> int:
    """`watch` shows item w1 on c1; c1's version before what the test does."""
    install(watcher())
    conversation("c1")
    assert in_frame("watch", set_items(item("w1"))).ok
    return Conversation.objects.get(pk="c1").version


def test_revoking_the_grant_hides_the_items_and_tells_watchers(
    watched, django_capture_on_commit_callbacks
):
    before = watched

    with django_capture_on_commit_callbacks(execute=True):
        extension_admit_grants(extension_id="watch", grants=[], actor="staff")

    assert ids() == []
    assert Conversation.objects.get(pk="c1").version == before + 1  # watchers re-read
    with django_capture_on_commit_callbacks(execute=True):
        extension_admit_grants(extension_id="watch", grants=["attention"], actor="staff")
    assert ids() == ["w1"]
    assert Conversation.objects.get(pk="c1").version == before + 2


def test_a_sync_that_drops_the_grant_tells_watchers_too(
    install, watched, django_capture_on_commit_callbacks
):
    before = watched

    with django_capture_on_commit_callbacks(execute=True):
        install(make_ext("watch", grants={"state"}))  # a new revision no longer asks for it

    assert ids() == []
    assert Conversation.objects.get(pk="c1").version == before + 1


def test_after_a_stop_the_conversation_view_and_the_projection_show_none_of_its_items(
    install, conversation, api, owner
):
    install(watcher(), make_ext("other", grants={"attention"}))
    conversation("c1")
    assert in_frame("watch", set_items(item("w1", "action"))).ok
    assert in_frame("other", set_items(item("o1"))).ok
    client = api(owner)

    def view_ids() -> list[str]:
        return [i["id"] for i in client.get("/v1/conversations/c1").json()["attention"]]

    def projection_ids() -> list[str]:
        return [i["id"] for i in client.get("/v1/conversations/c1/projection").json()["attention"]]

    assert view_ids() == ["w1", "o1"]
    assert projection_ids() == ["w1", "o1"]

    extension_stop(extension_id="watch", hook="test", reason="stopped by the test")

    assert view_ids() == ["o1"]
    assert projection_ids() == ["o1"]
    assert roster("watch").status == ExtensionStatus.STOPPED

    extension_resume(extension_id="watch", actor="staff")

    assert view_ids() == ["w1", "o1"]
    assert projection_ids() == ["w1", "o1"]


def test_an_uninstalled_extensions_items_are_hidden(install, conversation):
    install(watcher(), make_ext("other", grants={"attention"}))
    conversation("c1")
    assert in_frame("watch", set_items(item("w1"))).ok
    assert in_frame("other", set_items(item("o1"))).ok

    install(make_ext("other", grants={"attention"}))  # a deploy without `watch`

    assert roster("watch").status == ExtensionStatus.UNINSTALLED
    assert ids() == ["o1"]
    assert AttentionItem.objects.filter(extension_id="watch").exists()  # data is kept


def test_a_projection_that_stops_its_extension_shows_none_of_its_items_in_that_response(
    install, conversation, api, owner
):
    class Board(BaseModel):
        n: int

    def broken(ctx: Any, cid: str) -> Any:
        raise RuntimeError("broken projection")

    def fine(ctx: Any, cid: str) -> Board:
        return Board(n=1)

    grants = {"attention", "projection"}
    install(
        make_ext("watch", grants=grants, hooks={"project": broken}, projection_schema=Board),
        make_ext("other", grants=grants, hooks={"project": fine}, projection_schema=Board),
        make_ext("moving", grants=grants, hooks={"project": fine}, projection_schema=Board),
    )
    conversation("c1")
    for ext_id in ("watch", "other", "moving"):
        assert in_frame(ext_id, set_items(item(f"{ext_id}-1"))).ok
    # `moving` is being updated by a deploy: its slot says so, but it runs and shows its items
    RosterEntry.objects.filter(pk="moving").update(revision="next")

    body = api(owner).get("/v1/conversations/c1/projection").json()

    assert body["slots"]["watch"]["status"] == "stopped"
    assert roster("watch").status == ExtensionStatus.STOPPED
    assert body["slots"]["moving"]["status"] == "stopped"
    assert sorted(i["id"] for i in body["attention"]) == ["moving-1", "other-1"]


def test_clearing_an_item_id_another_extension_also_uses_leaves_its_item_alone(
    install, conversation
):
    install(
        make_ext("alpha", grants={"attention"}),
        make_ext("beta", grants={"attention"}),
    )
    conversation("c1")
    assert in_frame("alpha", set_items(item("shared"))).ok
    assert in_frame("beta", set_items(item("shared"))).ok
    cleared = in_frame("alpha", lambda ctx: ctx.attention.clear("c1", "shared"))
    assert cleared.ok and cleared.value is True
    assert list(AttentionItem.objects.values_list("extension_id", "item_id")) == [
        ("beta", "shared")
    ]
    again = in_frame("alpha", lambda ctx: ctx.attention.clear("c1", "shared"))
    assert again.ok and again.value is False
