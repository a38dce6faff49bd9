"""The conversation page of the console: entries, submissions, runs, projection preview,
attention, ambient, interactions, and links to the inspector and the artifact debug view."""

from __future__ import annotations

from django.urls import reverse

from conversations.models import Conversation

from .conftest import STOP_REASON, section

PAGE = reverse("admin:conversations_conversation_change", args=["c1"])


def test_the_page_shows_the_newest_entries_submissions_and_runs(console, host):
    html = console.get(PAGE).content.decode()

    entries = section(html, "hy-entries")
    assert "hello keeper" in entries and "echo: hello keeper" in entries
    assert "3 of 3" in entries  # a queued prompt is in the transcript already
    submissions = section(html, "hy-submissions")
    assert "queued" in submissions and "claimed" not in submissions
    assert "answered" in section(html, "hy-runs")


def test_the_page_previews_the_projection_with_stopped_slots_and_their_reasons(console, host):
    projection = section(console.get(PAGE).content.decode(), "hy-projection")

    assert "keeper" in projection and "&quot;notes&quot;: 2" in projection
    assert "flaky" in projection and STOP_REASON in projection


def test_the_page_shows_attention_ambient_and_interactions(console, host):
    html = console.get(PAGE).content.decode()

    assert "Review the launch plan" in section(html, "hy-attention")
    assert "2 of 3 done" in section(html, "hy-ambient")
    assert "Ship it?" in section(html, "hy-interactions")


def test_the_page_links_to_the_live_inspector_and_the_artifact_debug_view(console, host):
    html = console.get(PAGE).content.decode()

    assert reverse("inspector:page", args=["c1"]) in html
    assert reverse("admin:artifacts_world_debug", args=["c1"]) in html
    listing = console.get(reverse("admin:conversations_conversation_changelist")).content
    assert reverse("inspector:page", args=["c1"]).encode() in listing


def test_no_conversation_is_deleted_from_the_console_not_even_by_a_superuser(console, host):
    """A delete would cascade past the services into read-only admins' rows (Django then
    refuses it with a 403): the console never offers one. Archive and retention remove them."""
    delete = reverse("admin:conversations_conversation_delete", args=["c1"])
    changelist = reverse("admin:conversations_conversation_changelist")

    assert delete not in console.get(PAGE).content.decode()
    assert 'value="delete_selected"' not in console.get(changelist).content.decode()
    assert console.get(delete).status_code == 403
    assert console.post(delete, {"post": "yes"}).status_code == 403
    bulk = {"action": "delete_selected", "_selected_action": ["c1"], "post": "yes"}
    console.post(changelist, bulk)
    assert Conversation.objects.filter(pk="c1").exists()
