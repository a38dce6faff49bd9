"""Runs: claim, claim_key, heartbeat, entry appends, settle, lease expiry, settled events."""

from __future__ import annotations

import datetime as dt

import pytest

from conversations import capture, services
from conversations.models import Conversation, Entry, Run, SettledCounter, Submission
from conversations.selectors import run_settled_event, run_settled_events
from core import clock
from core.errors import HostError

pytestmark = pytest.mark.django_db

EMPTY_CAPTURE = {
    "participants": [],
    "prompt_sections": [],
    "tool_modules": [],
    "skills": [],
    "files": [],
    "compaction_handoff": None,
}


def test_a_claim_returns_the_inputs_in_admission_order_and_the_capture(kit, runtime):
    kit.conversation()
    first, second = kit.submit(say="one"), kit.submit(say="two")
    response = runtime.post("/v1/conversations/c1/runs", {}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "claimed"
    assert [i["id"] for i in body["inputs"]] == [first.pk, second.pk]
    assert [i["parts"][0]["text"] for i in body["inputs"]] == ["one", "two"]
    assert body["capture"] == EMPTY_CAPTURE
    assert Run.objects.get().capture == EMPTY_CAPTURE
    assert set(Submission.objects.values_list("status", flat=True)) == {"claimed"}


def test_nothing_to_claim_is_a_204(kit, runtime):
    kit.conversation()
    assert runtime.post("/v1/conversations/c1/runs", {}, format="json").status_code == 204
    assert runtime.post("/v1/runs/claim", {}, format="json").status_code == 204
    assert runtime.post("/v1/conversations/nope/runs", {}, format="json").status_code == 404


def test_a_conversation_has_at_most_one_unsettled_run(kit, runtime):
    kit.conversation()
    kit.submit()
    kit.claim()
    kit.submit(say="more")
    busy = runtime.post("/v1/conversations/c1/runs", {}, format="json")
    assert busy.status_code == 409
    assert busy.json()["error"]["message"] == "Conversation is busy"
    assert runtime.post("/v1/runs/claim", {}, format="json").status_code == 204
    assert Run.objects.count() == 1


def test_claim_any_takes_the_oldest_work_first(kit, runtime):
    for cid in ("a", "b"):
        kit.conversation(cid)
    kit.submit("b")
    kit.submit("a")
    first = runtime.post("/v1/runs/claim", {}, format="json").json()
    second = runtime.post("/v1/runs/claim", {}, format="json").json()
    assert [first["conversation_id"], second["conversation_id"]] == ["b", "a"]


def test_a_claim_retried_with_the_same_claim_key_returns_the_same_run(kit, runtime):
    kit.conversation()
    kit.submit()
    first = runtime.post("/v1/runs/claim", {"claim_key": "k1"}, format="json")
    kit.submit(say="meanwhile")
    again = runtime.post("/v1/runs/claim", {"claim_key": "k1"}, format="json")
    scoped = runtime.post("/v1/conversations/c1/runs", {"claim_key": "k1"}, format="json")
    assert first.status_code == 201
    assert again.status_code == scoped.status_code == 200
    assert again.json()["id"] == scoped.json()["id"] == first.json()["id"]
    assert again.json()["inputs"] == first.json()["inputs"]
    assert again.json()["capture"] == EMPTY_CAPTURE
    assert Run.objects.count() == 1


def test_a_claim_key_of_another_conversation_is_a_409(kit, runtime):
    for cid in ("a", "b"):
        kit.conversation(cid)
        kit.submit(cid)
    kit.claim("a", claim_key="k1")
    response = runtime.post("/v1/conversations/b/runs", {"claim_key": "k1"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["message"] == "Claim key was used for another conversation"


def test_a_rejected_capture_releases_the_run_and_requeues_its_inputs(kit, runtime, monkeypatch):
    kit.conversation()
    kit.submit()
    stopped: list[str] = []

    def reject(run):
        raise capture.CaptureRejected(
            HostError("extensions", "rejected", "Extension prompt is invalid"),
            in_release_transaction=lambda: stopped.append("bad-ext"),
        )

    monkeypatch.setattr("conversations.services.runs.run_capture", reject)
    response = runtime.post("/v1/runs/claim", {}, format="json")
    assert response.status_code == 422
    assert response.json()["error"]["message"] == "Extension prompt is invalid"
    assert stopped == ["bad-ext"]
    assert Run.objects.get().status == "released"
    submission = Submission.objects.get()
    assert (submission.status, submission.run_id, submission.release_count) == ("queued", None, 0)
    monkeypatch.undo()
    assert runtime.post("/v1/runs/claim", {}, format="json").status_code == 201


def test_a_claim_retried_with_its_key_after_a_422_claims_afresh(kit, runtime, monkeypatch):
    """Spec 01: after a 422 the runtime claims again; a released run is never replayed."""
    kit.conversation()
    submission = kit.submit()

    def reject(run):
        raise capture.CaptureRejected(HostError("extensions", "rejected", "Prompt is invalid"))

    monkeypatch.setattr("conversations.services.runs.run_capture", reject)
    first = runtime.post("/v1/runs/claim", {"claim_key": "k1"}, format="json")
    assert first.status_code == 422
    monkeypatch.undo()
    again = runtime.post("/v1/runs/claim", {"claim_key": "k1"}, format="json")
    assert again.status_code == 201, again.content
    assert again.json()["status"] == "claimed"
    assert [i["id"] for i in again.json()["inputs"]] == [submission.pk]
    released = Run.objects.get(status="released")
    assert released.claim_key is None
    assert Run.objects.get(status="claimed").claim_key == "k1"
    # and the key now names the live run
    replay = runtime.post("/v1/conversations/c1/runs", {"claim_key": "k1"}, format="json")
    assert (replay.status_code, replay.json()["id"]) == (200, again.json()["id"])


def test_a_claim_retried_with_its_key_after_its_lease_expired_claims_afresh(
    kit, runtime, fake_clock, settings
):
    settings.RUN_LEASE_SECONDS = 60
    kit.conversation()
    submission = kit.submit()
    run = kit.claim(claim_key="lost")
    fake_clock.advance(seconds=61)
    assert services.runs_expire_leases() == (1, False)
    again = runtime.post("/v1/conversations/c1/runs", {"claim_key": "lost"}, format="json")
    assert again.status_code == 201, again.content
    assert again.json()["id"] != run.pk
    assert [i["id"] for i in again.json()["inputs"]] == [submission.pk]


def test_a_released_run_still_holding_its_claim_key_is_not_replayed(kit, runtime):
    """Rows released before releases gave up their key: the retry claims afresh too."""
    kit.conversation()
    kit.submit()
    old = kit.claim(claim_key="k1")
    Run.objects.filter(pk=old.pk).update(status="released")
    Submission.objects.update(status="queued", run=None)
    again = runtime.post("/v1/runs/claim", {"claim_key": "k1"}, format="json")
    assert again.status_code == 201, again.content
    assert again.json()["id"] != old.pk
    assert Run.objects.get(pk=old.pk).claim_key is None


def test_a_released_run_still_holding_its_claim_key_frees_it_for_another_conversation(kit, runtime):
    """A released run's key names nothing, so it is no conflict wherever it is used again."""
    for cid in ("a", "b"):
        kit.conversation(cid)
        kit.submit(cid)
    old = kit.claim("a", claim_key="k1")
    Run.objects.filter(pk=old.pk).update(status="released")
    again = runtime.post("/v1/conversations/b/runs", {"claim_key": "k1"}, format="json")
    assert again.status_code == 201, again.content
    assert again.json()["conversation_id"] == "b"
    assert Run.objects.get(pk=old.pk).claim_key is None


def test_a_heartbeat_extends_the_lease_from_now(kit, runtime, fake_clock, settings):
    settings.RUN_LEASE_SECONDS = 60
    kit.conversation()
    kit.submit()
    run = kit.claim()
    fake_clock.advance(seconds=50)
    response = runtime.post(f"/v1/runs/{run.pk}/heartbeat", {}, format="json")
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.lease_expires_at == clock.now() + dt.timedelta(seconds=60)
    fake_clock.advance(seconds=30)  # past the original lease, within the extended one
    assert services.runs_expire_leases() == (0, False)
    assert Run.objects.get().status == "claimed"


def test_a_heartbeat_on_a_settled_or_missing_run_is_refused(kit, runtime):
    kit.conversation()
    kit.submit()
    run = kit.settle(kit.claim())
    assert runtime.post(f"/v1/runs/{run.pk}/heartbeat", {}, format="json").status_code == 409
    assert runtime.post("/v1/runs/999999/heartbeat", {}, format="json").status_code == 404
    assert runtime.post(f"/v1/runs/{2**64}/heartbeat", {}, format="json").status_code == 404


def test_entry_appends_are_idempotent_on_entry_key(kit, runtime):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    body = {
        "run_id": run.pk,
        "entry_key": "a1",
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
    }
    first = runtime.post("/v1/conversations/c1/entries", body, format="json")
    again = runtime.post("/v1/conversations/c1/entries", body, format="json")
    changed = runtime.post(
        "/v1/conversations/c1/entries",
        body | {"content": [{"type": "text", "text": "bye"}]},
        format="json",
    )
    assert first.status_code == 201
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert changed.status_code == 409
    assert changed.json()["error"]["message"] == "Entry key was already used with different content"
    assert Entry.objects.filter(run=run).count() == 1


def test_the_runtime_appends_tool_calls_and_results(kit, runtime):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    content = [{"type": "tool_call", "id": "t1", "name": "search", "arguments": {"q": "x"}}]
    result = [{"type": "tool_result", "tool_call_id": "t1", "ok": True, "content": {"hits": 3}}]
    for role, parts in (("assistant", content), ("tool", result)):
        response = runtime.post(
            "/v1/conversations/c1/entries",
            {"run_id": run.pk, "role": role, "content": parts},
            format="json",
        )
        assert response.status_code == 201, response.content
        assert response.json()["content"] == parts


def test_appending_to_a_settled_run_or_another_conversations_run_is_refused(kit, runtime):
    kit.conversation("a")
    kit.conversation("b")
    kit.submit("a")
    run = kit.claim("a")
    body = {"run_id": run.pk, "role": "assistant", "content": [{"type": "text", "text": "x"}]}
    other = runtime.post("/v1/conversations/b/entries", body, format="json")
    assert other.status_code == 400
    kit.settle(run)
    settled = runtime.post("/v1/conversations/a/entries", body, format="json")
    assert settled.status_code == 409
    assert settled.json()["error"]["message"] == "Run is not claimed"


def test_entry_content_over_one_mebibyte_encoded_is_too_large(kit):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    with pytest.raises(HostError) as raised:
        services.entry_append(
            conversation_id="c1",
            run_id=run.pk,
            role="assistant",
            content=[{"type": "text", "text": "x" * (1024 * 1024)}],
        )
    assert raised.value.status == 413
    assert Entry.objects.filter(run=run).count() == 0


def test_settling_is_idempotent_and_a_different_outcome_is_a_409(kit, runtime):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    answer = kit.answer(run)
    settle = {"status": "answered", "answer_entry_id": answer.pk}
    first = runtime.post(f"/v1/runs/{run.pk}/settle", settle, format="json")
    again = runtime.post(f"/v1/runs/{run.pk}/settle", settle, format="json")
    other = runtime.post(
        f"/v1/runs/{run.pk}/settle", {"status": "unanswered", "reason": "nope"}, format="json"
    )
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert first.json()["outcome"] == {
        "status": "answered",
        "answer_entry_id": answer.pk,
        "reason": None,
    }
    assert first.json()["settled_sequence"] == 1
    assert other.status_code == 409
    assert other.json()["error"]["message"] == "Run is already settled with a different outcome"
    assert set(Submission.objects.values_list("status", flat=True)) == {"consumed"}
    assert SettledCounter.objects.get().value == 1


def test_settling_again_with_another_answer_entry_or_reason_is_a_409(kit):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    answer, other = kit.answer(run, "one"), kit.answer(run, "two")
    services.run_settle(run_id=run.pk, status="answered", answer_entry_id=answer.pk)
    with pytest.raises(HostError) as answered:
        services.run_settle(run_id=run.pk, status="answered", answer_entry_id=other.pk)
    assert answered.value.message == "Run is already settled with a different outcome"

    kit.submit()
    second = kit.claim()
    services.run_settle(run_id=second.pk, status="unanswered", reason="gave up")
    with pytest.raises(HostError) as unanswered:
        services.run_settle(run_id=second.pk, status="unanswered", reason="other")
    assert unanswered.value.message == "Run is already settled with a different outcome"
    assert Run.objects.get(pk=run.pk).answer_entry_id == answer.pk
    assert Run.objects.get(pk=second.pk).reason == "gave up"


def test_settling_a_released_run_is_a_409_that_says_it_was_released(kit, fake_clock, settings):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    fake_clock.advance(seconds=settings.RUN_LEASE_SECONDS + 1)
    services.runs_expire_leases()

    with pytest.raises(HostError) as refused:
        services.run_settle(run_id=run.pk, status="unanswered", reason="late")

    assert (refused.value.cause, refused.value.message) == (
        "conflict",
        "Run was released after its lease expired; claim again",
    )


def test_steers_are_taken_only_into_a_claimed_run_and_only_steers(kit):
    kit.conversation()
    kit.submit(say="first")
    run = kit.claim()
    follow_up = kit.submit(say="next")  # queued for the next run
    steer = kit.submit(say="steer", delivery="steer")

    assert [s.pk for s in services.run_steers_take(run_id=run.pk)] == [steer.pk]
    assert Submission.objects.get(pk=follow_up.pk).status == "queued"

    kit.settle(run)
    late = kit.submit(say="late", delivery="steer")
    with pytest.raises(HostError) as refused:
        services.run_steers_take(run_id=run.pk)
    assert refused.value.cause == "conflict"
    assert Submission.objects.get(pk=late.pk).status == "queued"  # left for the next run


def test_claim_any_passes_over_busy_conversations_to_reach_free_work(kit, monkeypatch):
    # a busy conversation's queued work is older, but it is not a candidate: with one
    # candidate per call, the free conversation is still claimed
    monkeypatch.setattr("conversations.services.runs.CLAIM_CANDIDATES", 1)
    kit.conversation("busy")
    kit.conversation("free")
    kit.submit("busy", say="one")
    kit.claim("busy")
    kit.submit("busy", say="waits for the next run")
    kit.submit("free")

    assert kit.claim(None).conversation_id == "free"


def test_the_lease_sweep_reports_more_when_it_handled_a_full_page(kit, fake_clock, settings):
    for cid in ("a", "b"):
        kit.conversation(cid)
        kit.submit(cid)
        kit.claim(cid)
    fake_clock.advance(seconds=settings.RUN_LEASE_SECONDS + 1)

    assert services.runs_expire_leases(limit=1) == (1, True)
    assert services.runs_expire_leases(limit=1) == (1, True)
    assert services.runs_expire_leases(limit=1) == (0, False)


def test_settle_validates_the_outcome(kit, runtime):
    kit.conversation("a")
    kit.conversation("b")
    kit.submit("a")
    kit.submit("b")
    run = kit.claim("a")
    foreign = kit.answer(kit.claim("b"))
    cases = [
        {"status": "answered"},
        {"status": "answered", "answer_entry_id": foreign.pk},
        {"status": "unanswered"},
        {"status": "unanswered", "reason": ""},
        {"status": "unanswered", "reason": "x" * 513},
        {"status": "answered", "answer_entry_id": foreign.pk, "reason": "both"},
    ]
    for body in cases:
        response = runtime.post(f"/v1/runs/{run.pk}/settle", body, format="json")
        assert response.status_code == 400, body
    assert Run.objects.get(pk=run.pk).status == "claimed"
    ok = runtime.post(
        f"/v1/runs/{run.pk}/settle", {"status": "unanswered", "reason": "x" * 512}, format="json"
    )
    assert ok.status_code == 200


def test_settled_sequences_count_up_without_gaps(kit):
    sequences = []
    for n in range(5):
        kit.conversation(f"c{n}")
        kit.submit(f"c{n}")
        sequences.append(kit.settle(kit.claim(f"c{n}")).settled_sequence)
    assert sequences == [1, 2, 3, 4, 5]


def test_the_counter_row_is_reseeded_past_existing_sequences_if_lost(kit):
    kit.conversation()
    kit.submit()
    kit.settle(kit.claim())
    SettledCounter.objects.all().delete()
    kit.submit()
    assert kit.settle(kit.claim()).settled_sequence == 2


def test_an_expired_lease_is_released_and_its_inputs_requeued(kit, fake_clock, settings):
    settings.RUN_LEASE_SECONDS = 300
    kit.conversation()
    submission = kit.submit()
    run = kit.claim()
    fake_clock.advance(seconds=299)
    assert services.runs_expire_leases() == (0, False)
    fake_clock.advance(seconds=1)
    assert services.runs_expire_leases() == (1, False)
    run.refresh_from_db()
    submission.refresh_from_db()
    assert run.status == "released"
    assert (submission.status, submission.run_id, submission.release_count) == ("queued", None, 1)
    with pytest.raises(HostError) as raised:
        services.run_settle(run_id=run.pk, status="unanswered", reason="late")
    assert raised.value.status == 409
    again = kit.claim()
    assert list(again.submissions.all()) == [submission]


def test_the_third_expired_lease_of_the_same_inputs_settles_unanswered(kit, fake_clock):
    kit.conversation()
    submission = kit.submit()
    for _ in range(2):
        kit.claim()
        fake_clock.advance(seconds=301)
        services.runs_expire_leases()
    run = kit.claim()
    fake_clock.advance(seconds=301)
    services.runs_expire_leases()
    run.refresh_from_db()
    submission.refresh_from_db()
    assert (run.status, run.outcome, run.reason) == ("settled", "unanswered", "lease expired")
    assert run.settled_sequence == 1
    assert (submission.status, submission.release_count) == ("consumed", 3)
    assert services.run_claim() is None


def test_the_run_view_shows_outcome_sequence_and_capture_for_the_runtime(api, owner, kit, runtime):
    kit.conversation()
    kit.submit()
    run = kit.settle(kit.claim())
    for_runtime = runtime.get(f"/v1/runs/{run.pk}").json()
    for_owner = api(owner).get(f"/v1/runs/{run.pk}").json()
    assert for_runtime["settled_sequence"] == for_owner["settled_sequence"] == 1
    assert for_owner["outcome"]["status"] == "answered"
    assert for_runtime["capture"] == EMPTY_CAPTURE
    assert for_owner["capture"] is None


def test_the_settled_event_pairs_inputs_with_their_texts(kit):
    kit.conversation()
    first, second = kit.submit(say="one"), kit.submit(say="two")
    run = kit.claim()
    Entry.objects.filter(pk=second.entry.pk).update(withdrawn=True)  # unresolvable
    settled = kit.settle(run, "the answer")
    event = run_settled_event(run_id=run.pk)
    assert event is not None
    assert event.as_dict() == {
        "sequence": 1,
        "conversation_id": "c1",
        "run_id": run.pk,
        "inputs": [first.pk, second.pk],
        "input_texts": ["one", ""],
        "outcome": {
            "status": "answered",
            "answer_entry_id": settled.answer_entry_id,
            "answer": {"content": [{"type": "text", "text": "the answer"}]},
        },
    }
    kit.submit(say="three")
    run2 = kit.claim()
    services.run_settle(run_id=run2.pk, status="unanswered", reason="gave up")
    batch = run_settled_events(after=0)
    assert [e.sequence for e in batch] == [1, 2]
    assert batch[1].outcome == {"status": "unanswered", "reason": "gave up"}
    assert [e.sequence for e in run_settled_events(after=1)] == [2]


def test_the_settled_event_batch_is_a_fixed_number_of_queries(kit, django_assert_num_queries):
    for n in range(10):
        kit.conversation(f"c{n}")
        kit.submit(f"c{n}")
        kit.settle(kit.claim(f"c{n}"))
    with django_assert_num_queries(2):
        assert len(run_settled_events(after=0, limit=64)) == 10


def test_settle_takes_a_bounded_number_of_queries(kit, django_assert_max_num_queries):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    answer = kit.answer(run)
    with django_assert_max_num_queries(10):
        services.run_settle(run_id=run.pk, status="answered", answer_entry_id=answer.pk)


def test_retention_deletes_archived_conversations_older_than_retention_days(
    kit, fake_clock, settings
):
    settings.RETENTION_DAYS = None
    for cid in ("old", "recent", "active"):
        kit.conversation(cid)
        kit.submit(cid)
    kit.settle(kit.claim("old"))
    Conversation.objects.filter(pk="old").update(archived=True, archived_at=clock.now())
    fake_clock.advance(seconds=2 * 86400)
    Conversation.objects.filter(pk="recent").update(archived=True, archived_at=clock.now())
    fake_clock.advance(seconds=29 * 86400 + 1)
    assert services.conversations_retention_sweep() == (0, False)
    settings.RETENTION_DAYS = 30
    assert services.conversations_retention_sweep() == (1, False)
    assert set(Conversation.objects.values_list("pk", flat=True)) == {"recent", "active"}
    assert not Entry.objects.filter(conversation_id="old").exists()
    assert not Run.objects.filter(conversation_id="old").exists()
    assert not Submission.objects.filter(conversation_id="old").exists()


def test_the_sweep_tasks_call_their_services(kit, fake_clock):
    from conversations import tasks

    kit.conversation()
    kit.submit()
    kit.claim()
    fake_clock.advance(seconds=301)
    tasks.expire_leases()
    assert Run.objects.get().status == "released"
    tasks.retention_sweep()  # RETENTION_DAYS unset: nothing happens
    assert Conversation.objects.count() == 1
