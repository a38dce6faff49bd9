"""A prompt submitted over the API is answered by the echo runtime in a real Celery worker."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def ask_and_wait(client, processes, conversation_id: str, text: str) -> list[dict]:
    """Create the conversation, submit `text`, and wait (bounded) for the assistant's reply."""
    created = client.post("/v1/conversations", {"id": conversation_id}, format="json")
    assert created.status_code == 201, created.content
    submitted = client.post(
        f"/v1/conversations/{conversation_id}/submissions",
        {"request_id": "r1", "parts": [{"type": "text", "text": text}]},
        format="json",
    )
    assert submitted.status_code == 201, submitted.content

    def answered():
        entries = client.get(f"/v1/conversations/{conversation_id}/entries").json()["results"]
        return [e for e in entries if e["role"] == "assistant"] or None

    try:
        return wait_until(answered, timeout=45, interval=0.2)
    except AssertionError:
        print(processes.logs())
        raise


def test_a_submitted_prompt_is_answered_by_the_echo_runtime_in_a_real_worker(
    api, processes, settings
):
    settings.AGENT_RUNTIME = "echo"
    processes.worker(concurrency=1)
    client = api("service")
    started = time.monotonic()
    replies = ask_and_wait(client, processes, "e2e", "hello hyphae")
    print(f"echo answer after {time.monotonic() - started:.2f}s")
    assert "hello hyphae" in str(replies[0]["content"])


def test_a_prompt_is_answered_behind_a_backlog_of_queued_sweeps(api, processes, settings):
    # A worker that takes about a second per task (the filesystem broker with one reserved
    # task per process) needs ~100 s for this backlog; beat alone queues five sweeps a second.
    from extensions_host.background.tasks import lifecycle_sweep

    settings.AGENT_RUNTIME = "echo"
    for _ in range(100):
        lifecycle_sweep.delay()
    processes.worker(concurrency=2)
    replies = ask_and_wait(api("service"), processes, "backlog", "still heard")
    assert "still heard" in str(replies[0]["content"])
