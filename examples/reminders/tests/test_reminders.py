"""The reminders example, through the author harness: commands, timers, send, attention,
projection and the v1 → v2 state migration."""

from __future__ import annotations

from typing import Any

import pytest
from hyphae_reminders.extension import Reminder, RemindersView, reminders
from pydantic import BaseModel

from conversations.services import conversation_update
from core.errors import HostError
from extensions_host.sdk import Collection, Extension


@pytest.fixture
def host(hyphae_host: Any) -> Any:
    hyphae_host.install(reminders)
    hyphae_host.conversation("c1")
    return hyphae_host


def remind(host: Any, text: str, seconds: int, cid: str = "c1") -> dict[str, Any]:
    return host.command(
        "reminders", "remind", {"text": text, "in_seconds": seconds}, conversation_id=cid
    )


def test_a_reminder_fires_once_at_its_time_and_sends_its_prompt(host):
    created = remind(host, "stretch your legs", 60)
    assert created["due_at"] == host.clock.now_ms() + 60_000
    assert host.timers("reminders") == {created["id"]: created["due_at"]}

    host.advance(seconds=59)
    assert host.fire_timers() == 0
    assert host.sent("c1") == []

    host.advance(seconds=1)
    assert host.fire_timers() == 1
    (prompt,) = host.sent("c1")
    assert prompt.text == "Reminder: stretch your legs"
    assert prompt.request_id == f"reminder:{created['id']}"
    assert prompt.extension_id == "reminders"

    host.advance(seconds=3600)
    assert host.fire_timers() == 0  # fired once: its timer is gone
    assert len(host.sent("c1")) == 1
    assert host.record("reminders", "reminder", created["id"]).status == "fired"


def test_the_sent_reminder_is_answered_by_the_runtime(host):
    remind(host, "drink water", 5)
    host.run_for(5)

    assert ("extension", "Reminder: drink water") in host.transcript("c1")
    assert any(
        role == "assistant" and "echo: Reminder: drink water" in text
        for role, text in host.transcript("c1")
    )


def test_a_due_reminder_raises_an_attention_item_that_dismiss_clears(host):
    created = remind(host, "call Ana", 30)
    assert host.attention("c1") == []

    host.advance(seconds=30)
    host.fire_timers()

    (item,) = host.view("c1")["attention"]  # what the conversation view (and inspector) show
    assert item["title"] == "Reminder due: call Ana"
    assert item["level"] == "action"
    assert item["command"] == {"name": "dismiss", "input": {"id": created["id"]}}

    result = host.command("reminders", "dismiss", {"id": created["id"]}, conversation_id="c1")
    assert result == {"dismissed": True}
    assert host.attention("c1") == []


def test_an_undismissed_reminder_leaves_the_attention_list_after_a_week(host):
    """Undismissed items would otherwise pile up to the extension's attention quota."""
    remind(host, "water the plants", 30)
    host.advance(seconds=30)
    host.fire_timers()

    host.advance(seconds=7 * 24 * 3600 - 1)
    assert [item["title"] for item in host.attention("c1")] == ["Reminder due: water the plants"]
    host.advance(seconds=1)
    assert host.attention("c1") == []


@pytest.mark.parametrize("ending", ["fired", "cancelled", "undeliverable"])
def test_a_reminder_that_is_done_is_kept_a_week_then_deleted(host, ending):
    """Kept for ever, done reminders would fill the extension's records quota."""
    created = remind(host, "once", 30)
    other = remind(host, "still pending", 3 * 7 * 24 * 3600)
    if ending == "cancelled":
        host.command("reminders", "cancel", {"id": created["id"]}, conversation_id="c1")
    elif ending == "undeliverable":
        conversation_update(principal=host.principal(), conversation_id="c1", archived=True)
    host.advance(seconds=30)
    host.fire_timers()
    done_at = host.clock.now_ms() - (30_000 if ending == "cancelled" else 0)
    assert host.record("reminders", "reminder", created["id"]).status == ending

    host.advance(ms=done_at + 7 * 24 * 3600 * 1000 - 1 - host.clock.now_ms())
    assert host.fire_timers() == 0
    assert host.record("reminders", "reminder", created["id"]) is not None
    host.advance(ms=1)
    assert host.fire_timers() == 1
    assert host.record("reminders", "reminder", created["id"]) is None
    assert [r.id for r in host.records("reminders", "reminder")] == [other["id"]]
    assert host.status("reminders").running


def test_the_projection_lists_upcoming_reminders_soonest_first(host):
    later = remind(host, "later", 600)
    sooner = remind(host, "sooner", 60)

    value = host.projection("c1")["reminders"]["value"]
    assert [r["id"] for r in value["upcoming"]] == [sooner["id"], later["id"]]
    assert value["pending"] == 2

    host.advance(seconds=60)
    host.fire_timers()
    value = host.projection("c1")["reminders"]["value"]
    assert [r["text"] for r in value["upcoming"]] == ["later"]


def test_a_cancelled_reminder_never_fires(host):
    created = remind(host, "never mind", 60)

    result = host.command("reminders", "cancel", {"id": created["id"]}, conversation_id="c1")

    assert result == {"id": created["id"], "status": "cancelled"}
    assert list(host.timers("reminders")) == [f"forget:{created['id']}"]  # its deletion
    host.advance(seconds=120)
    assert host.fire_timers() == 0
    assert host.sent("c1") == []
    with pytest.raises(HostError) as again:
        host.command("reminders", "cancel", {"id": created["id"]}, conversation_id="c1")
    assert again.value.status == 409


def test_another_conversations_reminder_is_not_found(host):
    created = remind(host, "private", 60)
    host.conversation("c2")

    with pytest.raises(HostError) as error:
        host.command("reminders", "cancel", {"id": created["id"]}, conversation_id="c2")

    assert (error.value.status, error.value.message) == (404, "Reminder not found")
    assert host.timers("reminders") == {created["id"]: created["due_at"]}


def test_invalid_input_is_rejected_before_anything_is_written(host):
    with pytest.raises(HostError) as error:
        host.command("reminders", "remind", {"text": "x", "in_seconds": 0}, conversation_id="c1")

    assert error.value.status == 400
    assert "in_seconds" in error.value.details
    assert host.records("reminders", "reminder") == []
    assert host.status("reminders").running


def test_remind_over_http_answers_with_the_reminder(host):
    response = host.api().post(
        "/v1/conversations/c1/extensions/reminders/commands/remind",
        {"text": "over http", "in_seconds": 10},
        format="json",
    )

    assert response.status_code == 200
    assert host.record("reminders", "reminder", response.json()["id"]).text == "over http"


def test_a_reminder_of_an_archived_conversation_is_undeliverable_without_a_stop(host):
    created = remind(host, "too late", 10)
    conversation_update(principal=host.principal(), conversation_id="c1", archived=True)

    host.advance(seconds=10)
    assert host.fire_timers() == 1

    assert host.status("reminders").running
    assert host.sent("c1") == []
    assert host.record("reminders", "reminder", created["id"]).status == "undeliverable"


class ReminderV1(BaseModel):
    id: str
    conversation_id: str
    message: str
    at: int  # epoch seconds


def reminders_v1() -> Extension:
    """The extension as version 1 shipped it (same id, state version 1)."""
    return Extension(
        id="reminders",
        version="1.0.0",
        grants={"state", "timers", "send", "attention", "commands", "projection"},
        state_version=1,
        collections={
            "reminder": Collection(
                ReminderV1, key=lambda r: r.id, index=lambda r: r.conversation_id
            )
        },
        projection_schema=RemindersView,
    )


def test_version_1_records_are_migrated_to_version_2_on_upgrade(hyphae_host):
    hyphae_host.install(reminders_v1())
    hyphae_host.conversation("c1")
    hyphae_host.transact(
        "reminders",
        lambda ctx: (
            ctx.collection("reminder").put(
                ReminderV1(id="r1", conversation_id="c1", message="old one", at=1_767_225_660)
            ),
            ctx.timers.set("r1", 1_767_225_660_000),
        ),
    )

    report = hyphae_host.install(reminders)  # the deploy of 2.x: sync_roster migrates

    assert report.stopped == {}
    assert hyphae_host.records("reminders", "reminder") == [
        Reminder(
            id="r1",
            conversation_id="c1",
            text="old one",
            due_at=1_767_225_660_000,
            status="pending",
        )
    ]
    # the migrated reminder still fires (timers are kept across the upgrade)
    hyphae_host.advance(seconds=60)
    assert hyphae_host.fire_timers() == 1
    assert [p.text for p in hyphae_host.sent("c1")] == ["Reminder: old one"]
