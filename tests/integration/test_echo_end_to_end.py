"""A prompt submitted over the API is answered by the echo runtime in a real Celery worker."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_submitted_prompt_is_answered_by_the_echo_runtime_in_a_real_worker(
    api, processes, settings
):
    settings.AGENT_RUNTIME = "echo"
    processes.worker(concurrency=1)
    client = api("service")
    assert client.post("/v1/conversations", {"id": "e2e"}, format="json").status_code == 201
    started = time.monotonic()
    submitted = client.post(
        "/v1/conversations/e2e/submissions",
        {"request_id": "r1", "parts": [{"type": "text", "text": "hello hyphae"}]},
        format="json",
    )
    assert submitted.status_code == 201, submitted.content

    def answered():
        entries = client.get("/v1/conversations/e2e/entries").json()["results"]
        replies = [e for e in entries if e["role"] == "assistant"]
        return replies or None

    try:
        replies = wait_until(answered, timeout=45, interval=0.2)
    except AssertionError:
        print(processes.logs())
        raise
    elapsed = time.monotonic() - started
    print(f"echo answer after {elapsed:.2f}s")
    assert "hello hyphae" in str(replies[0]["content"])
    run = client.get("/v1/conversations/e2e").json()
    assert run["id"] == "e2e"


def test_a_prompt_is_answered_behind_a_backlog_of_queued_sweeps(api, processes, settings):
    # A worker that takes about a second per task (the filesystem broker with one reserved
    # task per process) needs ~100 s for this backlog; beat alone queues five sweeps a second.
    from extensions_host.background.tasks import lifecycle_sweep

    settings.AGENT_RUNTIME = "echo"
    for _ in range(100):
        lifecycle_sweep.delay()
    processes.worker(concurrency=2)
    client = api("service")
    assert client.post("/v1/conversations", {"id": "backlog"}, format="json").status_code == 201
    submitted = client.post(
        "/v1/conversations/backlog/submissions",
        {"request_id": "r1", "parts": [{"type": "text", "text": "still heard"}]},
        format="json",
    )
    assert submitted.status_code == 201, submitted.content

    def answered():
        entries = client.get("/v1/conversations/backlog/entries").json()["results"]
        return [e for e in entries if e["role"] == "assistant"] or None

    try:
        replies = wait_until(answered, timeout=40, interval=0.2)
    except AssertionError:
        print(processes.logs())
        raise
    assert "still heard" in str(replies[0]["content"])
