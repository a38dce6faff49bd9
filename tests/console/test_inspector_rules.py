"""Rules of the inspector's reads and fragments that a mutation sweep found unprotected."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core import clock
from extensions_host.background.models import SettledCursor, Timer
from extensions_host.models import RosterEntry
from extensions_host.surfaces.models import Interaction
from inspector.console import dashboard_read, extension_sections, preview
from inspector.selectors import PARTS, ambient_read, interactions_read, transcript_read
from tests.conversations.conftest import Kit

pytestmark = pytest.mark.django_db


@pytest.fixture
def kit(owner) -> Kit:
    return Kit(default_owner=owner)


@pytest.mark.parametrize(("entries", "truncated"), [(2, False), (3, True)])
def test_the_transcript_says_it_is_truncated_only_past_its_limit(kit, entries, truncated):
    kit.conversation()
    for n in range(entries):
        kit.submit(say=str(n))
    shown = transcript_read(conversation_id="c1", limit=2)
    assert shown["truncated"] is truncated
    assert [e["text"] for e in shown["entries"]] == [str(n) for n in range(entries)][-2:]


def test_the_transcript_lists_only_waiting_inputs_and_the_live_run(kit):
    kit.conversation()
    kit.submit(say="taken")
    run = kit.claim()
    waiting = kit.submit(say="waiting")
    shown = transcript_read(conversation_id="c1")
    assert [(q["id"], q["text"]) for q in shown["queued"]] == [(waiting.pk, "waiting")]
    assert shown["live_run"] == run.pk
    kit.settle(run)
    assert transcript_read(conversation_id="c1")["live_run"] is None


def test_ambient_lists_only_the_places_that_have_surfaces(host):
    assert [group["place"] for group in ambient_read(conversation_id="c1")] == ["header"]


def test_pending_interactions_come_before_newer_settled_ones(host):
    Interaction.objects.create(
        conversation_id="c1",
        call_id="done-1",
        extension_id="keeper",
        kind="approval",
        prompt="Done?",
        status="answered",
        created_at_ms=clock.now_ms(),
    )
    assert [row["call_id"] for row in interactions_read(conversation_id="c1")] == [
        "ask-1",
        "done-1",
    ]


def test_fragments_refuse_more_part_names_than_there_are_parts(client, owner, host):
    client.force_login(owner)
    url = reverse("inspector:fragments", args=["c1"])
    exactly = client.get(url, {"parts": ",".join(["header"] * len(PARTS))})
    over = client.get(url, {"parts": ",".join(["header"] * (len(PARTS) + 1))})
    assert exactly.status_code == 200 and list(exactly.json()["parts"]) == ["header"]
    assert over.status_code == 400
    assert over.json()["error"]["message"] == "Unknown inspector part"


def test_a_poll_from_a_version_the_conversation_is_not_at_gets_every_part(client, owner, host):
    """Only the current version means "nothing moved": a page ahead of it (a restored
    database) re-reads everything too."""
    client.force_login(owner)
    url = reverse("inspector:fragments", args=["c1"])
    version = client.get(url, {"parts": "header"}).json()["version"]
    assert set(client.get(url, {"since": version + 1}).json()["parts"]) == set(PARTS)


@pytest.mark.parametrize(("text", "shown"), [("x" * 200, "x" * 200), ("x" * 201, "x" * 199 + "…")])
def test_a_console_preview_cuts_only_text_longer_than_its_limit(text, shown):
    assert preview(text) == shown


def test_a_timer_firing_this_very_moment_counts_as_due_on_the_extension_page(fake_clock, host):
    now = clock.now_ms()
    Timer.objects.create(extension_id="keeper", key="exactly-now", due_at=now, fire_at=now)
    timers = extension_sections(RosterEntry.objects.get(pk="keeper"), filters={})["timers"]
    assert (timers["pending"], timers["due"]) == (3, 2)
    assert {row["key"]: row["overdue"] for row in timers["rows"]}["exactly-now"] is True


def test_a_settled_cursor_ahead_of_the_core_cursor_shows_no_negative_lag(host):
    SettledCursor.objects.filter(pk="keeper").update(position=10)
    settled = extension_sections(RosterEntry.objects.get(pk="keeper"), filters={})["settled"]
    assert (settled["cursor"], settled["lag"]) == (10, 0)


def test_attention_shows_as_visible_only_while_the_attention_grant_is_admitted(host):
    row = RosterEntry.objects.get(pk="keeper")
    assert extension_sections(row, filters={})["attention_visible"] is True
    row.admitted_grants = [grant for grant in row.admitted_grants if grant != "attention"]
    assert extension_sections(row, filters={})["attention_visible"] is False


def test_an_uninstalled_extension_is_not_listed_as_waiting_for_its_grants(host, staff):
    RosterEntry.objects.filter(pk="keeper").update(admitted_grants=[])
    waiting = dashboard_read(user=staff)["waiting"]
    assert [row["id"] for row in waiting] == ["keeper"]
    RosterEntry.objects.filter(pk="keeper").update(status="uninstalled")
    assert dashboard_read(user=staff)["waiting"] == []


def test_the_dashboard_counts_only_queued_prompts_and_claimed_runs(host, staff):
    dash = dashboard_read(user=staff)
    assert (dash["queued"], dash["live_runs"]) == (1, 0)  # one settled run, one prompt waiting
