"""The built-in echo runtime answers through the real claim/append/settle path."""

from __future__ import annotations

import pytest

from conversations import tasks
from conversations.models import Entry, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def enqueued(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(tasks.echo_sweep, "delay", lambda: calls.append("echo_sweep"))
    return calls


def test_a_submitted_prompt_is_answered_by_the_echo_runtime(
    api, owner, kit, settings, enqueued, django_capture_on_commit_callbacks
):
    settings.AGENT_RUNTIME = "echo"
    kit.conversation()
    with django_capture_on_commit_callbacks(execute=True):
        response = api(owner).post(
            "/v1/conversations/c1/submissions",
            {"parts": [{"type": "text", "text": "hello hyphae"}]},
            format="json",
        )
    assert response.status_code == 201
    assert enqueued == ["echo_sweep"]  # enqueued after commit
    tasks.echo_sweep()  # the task body, as a worker would run it
    run = Run.objects.get()
    assert (run.status, run.outcome, run.settled_sequence) == ("settled", "answered", 1)
    answer = Entry.objects.get(pk=run.answer_entry_id)
    assert answer.role == "assistant"
    assert answer.content == [{"type": "text", "text": "echo: hello hyphae\nprompt sections: none"}]
    entries = api(owner).get("/v1/conversations/c1/entries").json()["results"]
    assert [e["role"] for e in entries] == ["user", "assistant"]


def test_the_echo_lists_the_prompt_section_names_it_received(kit, settings, monkeypatch, enqueued):
    settings.AGENT_RUNTIME = "echo"
    sections = [{"name": "digest.summary", "text": "…"}, {"name": "reminders.due", "text": "…"}]

    def capture(run):
        from conversations.capture import capture_empty

        return capture_empty() | {"prompt_sections": sections}

    monkeypatch.setattr("conversations.services.runs.run_capture", capture)
    kit.conversation()
    kit.submit(say="one")
    kit.submit(say="two")
    tasks.echo_sweep()
    answer = Entry.objects.get(role="assistant").content[0]["text"]
    assert answer == "echo: one\necho: two\nprompt sections: digest.summary, reminders.due"


def test_the_echo_answers_every_runnable_conversation_and_stops(kit, settings, enqueued):
    settings.AGENT_RUNTIME = "echo"
    for cid in ("a", "b", "c"):
        kit.conversation(cid)
        kit.submit(cid)
    tasks.echo_sweep()
    assert sorted(Run.objects.values_list("settled_sequence", flat=True)) == [1, 2, 3]
    assert enqueued == []  # no work left: the sweep did not re-enqueue itself


def test_a_full_page_answers_that_many_and_re_enqueues_the_sweep(
    kit, settings, enqueued, monkeypatch
):
    from conversations import echo

    settings.AGENT_RUNTIME = "echo"
    for cid in ("a", "b", "c"):
        kit.conversation(cid)
        kit.submit(cid)
    assert echo.echo_sweep(limit=2) is True
    assert Run.objects.filter(status="settled").count() == 2
    monkeypatch.setattr(echo, "echo_sweep", lambda: True)
    tasks.echo_sweep()
    assert enqueued == ["echo_sweep"]


def test_the_external_runtime_setting_turns_the_echo_off(kit, settings, enqueued):
    settings.AGENT_RUNTIME = "external"
    kit.conversation()
    kit.submit()
    tasks.echo_sweep()
    assert Run.objects.count() == 0
    assert enqueued == []
