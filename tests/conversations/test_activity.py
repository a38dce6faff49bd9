"""Activity is stamped at exactly two moments: admission and settlement (spec 01)."""

from __future__ import annotations

import pytest

from conversations import services
from conversations.models import Conversation
from core import clock

pytestmark = pytest.mark.django_db


def activity(cid: str = "c1"):
    return Conversation.objects.get(pk=cid).last_activity_at


def test_activity_is_stamped_only_at_admission_and_settlement(api, owner, kit, runtime, fake_clock):
    client = api(owner)
    client.post("/v1/conversations", {"id": "c1"}, format="json")
    created = activity()
    assert created == clock.now()

    def nothing_stamps(action):
        before = activity()
        fake_clock.advance(seconds=7)
        action()
        assert activity() == before, action

    nothing_stamps(lambda: client.patch("/v1/conversations/c1", {"name": "n"}, format="json"))
    nothing_stamps(
        lambda: client.patch("/v1/conversations/c1", {"sharing": "users"}, format="json")
    )

    fake_clock.advance(seconds=10)
    first = client.post(
        "/v1/conversations/c1/submissions",
        {"parts": [{"type": "text", "text": "q"}]},
        format="json",
    ).json()
    assert activity() == clock.now()  # admission

    nothing_stamps(
        lambda: client.post("/v1/conversations/c1/fork", {"at": first["entry_id"]}, format="json")
    )
    queued = kit.submit(say="to withdraw", request_id="w")
    nothing_stamps(lambda: client.delete(f"/v1/conversations/c1/submissions/{queued.pk}"))
    run_id = None

    def claim():
        nonlocal run_id
        run_id = runtime.post("/v1/conversations/c1/runs", {}, format="json").json()["id"]

    nothing_stamps(claim)
    nothing_stamps(lambda: runtime.post(f"/v1/runs/{run_id}/heartbeat", {}, format="json"))
    nothing_stamps(lambda: runtime.post(f"/v1/runs/{run_id}/steers", {}, format="json"))
    answer_id = None

    def append():
        nonlocal answer_id
        answer_id = runtime.post(
            "/v1/conversations/c1/entries",
            {"run_id": run_id, "role": "assistant", "content": [{"type": "text", "text": "a"}]},
            format="json",
        ).json()["id"]

    nothing_stamps(append)
    fake_clock.advance(seconds=10)
    runtime.post(
        f"/v1/runs/{run_id}/settle",
        {"status": "answered", "answer_entry_id": answer_id},
        format="json",
    )
    assert activity() == clock.now()  # settlement

    kit.submit(say="again", request_id="again")
    services.run_claim(conversation_id="c1")

    def expire():
        fake_clock.advance(seconds=301)
        services.runs_expire_leases()

    nothing_stamps(expire)
    nothing_stamps(lambda: client.patch("/v1/conversations/c1", {"archived": True}, format="json"))
