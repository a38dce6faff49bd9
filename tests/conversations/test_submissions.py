"""Submissions: request-id idempotency, when_busy, not_before, withdrawal (spec 01)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction

from conversations import services
from conversations.models import Entry, Submission
from conversations.selectors import run_has_pending_steer
from conversations.services import Origin
from core import clock
from core.errors import HostError

pytestmark = pytest.mark.django_db

TEXT = [{"type": "text", "text": "hello"}]


def submit(client, body, cid="c1"):
    return client.post(f"/v1/conversations/{cid}/submissions", body, format="json")


def test_the_same_request_id_and_content_returns_the_existing_submission(api, owner, kit):
    kit.conversation()
    client = api(owner)
    first = submit(client, {"request_id": "r1", "parts": TEXT})
    again = submit(client, {"request_id": "r1", "parts": TEXT})
    assert first.status_code == 201 and first.json()["idempotent"] is False
    assert again.status_code == 200 and again.json()["idempotent"] is True
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["entry_id"] == first.json()["entry_id"]
    assert Submission.objects.count() == 1
    assert Entry.objects.count() == 1


def test_the_same_request_id_with_another_not_before_is_a_409(owner, kit):
    kit.conversation()
    later = clock.now() + dt.timedelta(minutes=5)
    kit.submit(request_id="r1", not_before=later)

    with pytest.raises(HostError) as refused:
        kit.submit(request_id="r1", not_before=later + dt.timedelta(minutes=5))

    assert refused.value.cause == "conflict"
    assert Submission.objects.get().not_before == later


def test_the_same_request_id_with_different_content_is_a_409(api, owner, kit):
    kit.conversation()
    client = api(owner)
    submit(client, {"request_id": "r1", "parts": TEXT})
    other = submit(client, {"request_id": "r1", "parts": [{"type": "text", "text": "bye"}]})
    assert other.status_code == 409
    assert other.json()["error"]["cause"] == "conflict"
    assert other.json()["error"]["message"] == "Request id was already used with different content"
    assert Submission.objects.count() == 1


def test_when_busy_reject_on_a_busy_conversation_is_a_409_conversation_is_busy(api, owner, kit):
    kit.conversation()
    client = api(owner)
    assert (
        submit(client, {"request_id": "idle", "parts": TEXT, "when_busy": "reject"}).status_code
        == 201
    )
    kit.claim()
    busy = submit(client, {"request_id": "r2", "parts": TEXT, "when_busy": "reject"})
    assert busy.status_code == 409
    assert busy.json()["error"] == {
        "category": "contract",
        "cause": "conflict",
        "message": "Conversation is busy",
    }
    assert not Submission.objects.filter(request_id="r2").exists()


def test_when_busy_steer_admits_a_steer_that_the_live_run_takes_in_order(api, owner, kit, runtime):
    kit.conversation()
    kit.submit()
    run = kit.claim()
    client = api(owner)
    first = submit(client, {"request_id": "s1", "parts": TEXT, "when_busy": "steer"}).json()
    second = submit(client, {"request_id": "s2", "parts": TEXT, "when_busy": "steer"}).json()
    assert first["delivery"] == second["delivery"] == "steer"
    assert run_has_pending_steer(run=run) is True
    taken = runtime.post(f"/v1/runs/{run.pk}/steers", {}, format="json")
    assert taken.status_code == 200
    assert [s["id"] for s in taken.json()["submissions"]] == [first["id"], second["id"]]
    assert all(
        s["status"] == "claimed" and s["run_id"] == run.pk for s in taken.json()["submissions"]
    )
    assert run_has_pending_steer(run=run) is False
    assert runtime.post(f"/v1/runs/{run.pk}/steers", {}, format="json").json() == {
        "submissions": []
    }
    detail = runtime.get(f"/v1/runs/{run.pk}").json()
    assert len(detail["inputs"]) == 3


def test_when_busy_queue_waits_for_the_next_run(api, owner, kit):
    kit.conversation()
    kit.submit(request_id="first")
    run = kit.claim()
    queued = submit(api(owner), {"request_id": "later", "parts": TEXT}).json()
    assert queued["status"] == "queued" and queued["delivery"] == "follow_up"
    assert services.run_claim(conversation_id=None) is None  # the conversation is busy
    kit.settle(run)
    nxt = kit.claim()
    assert [s.request_id for s in nxt.submissions.all()] == ["later"]


def test_the_entry_is_created_at_admission_in_admission_order(api, owner, kit):
    kit.conversation()
    client = api(owner)
    ids = [
        submit(client, {"request_id": f"r{n}", "parts": [{"type": "text", "text": str(n)}]}).json()[
            "entry_id"
        ]
        for n in range(3)
    ]
    entries = client.get("/v1/conversations/c1/entries").json()["results"]
    assert [e["id"] for e in entries] == ids
    assert [e["role"] for e in entries] == ["user"] * 3
    assert [e["content"][0]["text"] for e in entries] == ["0", "1", "2"]


def test_parts_may_reference_images_and_files_by_url_or_path(api, owner, kit):
    kit.conversation()
    parts = [
        {"type": "text", "text": "see"},
        {"type": "image", "url": "https://x/y.png"},
        {"type": "file", "path": "docs/a.pdf", "name": "a.pdf", "mime_type": "application/pdf"},
    ]
    response = submit(api(owner), {"parts": parts})
    assert response.status_code == 201
    assert response.json()["parts"] == parts
    missing_ref = submit(api(owner), {"parts": [{"type": "image"}]})
    assert missing_ref.status_code == 400


def test_not_before_keeps_a_submission_out_of_claims_until_then(api, owner, kit, fake_clock):
    kit.conversation()
    later = clock.now() + dt.timedelta(minutes=5)
    response = submit(api(owner), {"parts": TEXT, "not_before": later.isoformat()})
    assert response.status_code == 201
    assert services.run_claim(conversation_id="c1") is None
    assert services.run_claim() is None
    fake_clock.advance(seconds=299)
    assert services.run_claim() is None
    fake_clock.advance(seconds=1)
    claim = services.run_claim()
    assert claim is not None and claim.run.conversation_id == "c1"


def test_withdraw_marks_a_queued_submission_and_its_entry(api, owner, kit):
    kit.conversation()
    submission = kit.submit()
    client = api(owner)
    response = client.delete(f"/v1/conversations/c1/submissions/{submission.pk}")
    assert response.status_code == 200
    assert response.json()["status"] == "withdrawn"
    assert Entry.objects.get(pk=submission.entry.pk).withdrawn is True
    again = client.delete(f"/v1/conversations/c1/submissions/{submission.pk}")
    assert again.status_code == 200
    assert services.run_claim(conversation_id="c1") is None  # never claimed


def test_only_a_queued_submission_can_be_withdrawn(api, owner, kit):
    kit.conversation()
    submission = kit.submit()
    kit.claim()
    response = api(owner).delete(f"/v1/conversations/c1/submissions/{submission.pk}")
    assert response.status_code == 409
    assert response.json()["error"]["message"] == "Submission is no longer queued"
    assert Entry.objects.get(pk=submission.entry.pk).withdrawn is False


def test_withdrawing_a_submission_of_another_conversation_is_a_404(api, owner, kit):
    kit.conversation("a")
    kit.conversation("b")
    other = kit.submit("b")
    response = api(owner).delete(f"/v1/conversations/a/submissions/{other.pk}")
    assert response.status_code == 404
    other.refresh_from_db()
    assert other.status == "queued"


def test_text_over_64_kib_in_total_is_refused_before_anything_is_written(api, owner, kit):
    kit.conversation()
    client = api(owner)
    half = "x" * (32 * 1024)
    exactly = submit(
        client, {"parts": [{"type": "text", "text": half}, {"type": "text", "text": half}]}
    )
    assert exactly.status_code == 201
    over = submit(
        client, {"parts": [{"type": "text", "text": half}, {"type": "text", "text": half + "é"}]}
    )
    assert over.status_code == 413
    assert over.json()["error"]["message"] == "Submission text is too large"
    assert Submission.objects.count() == 1


MIB = 1024 * 1024


def test_a_submission_whose_entry_would_exceed_one_mebibyte_is_refused_before_anything_is_written(
    kit, owner
):
    """Spec 01: entry content ≤ 1 MiB encoded. The parts become the entry, so their `meta`
    counts, not only the 64 KiB of text (an extension's `submit(parts=…)` reaches this)."""
    kit.conversation()
    parts = [{"type": "text", "text": "hi", "meta": {"blob": "x" * (MIB + 10)}}]
    with pytest.raises(HostError) as refused, transaction.atomic():
        services.submission_admit(
            conversation_id="c1", parts=parts, origin=Origin.of_user(owner), request_id="big"
        )
    assert (refused.value.status, refused.value.message) == (413, "Entry content is too large")
    assert refused.value.details == {"parts": [f"At most {MIB} bytes encoded."]}
    assert not Submission.objects.exists() and not Entry.objects.exists()


def test_the_api_refuses_an_entry_over_one_mebibyte_even_under_a_larger_body_limit(
    api, owner, kit, settings
):
    settings.HOST_MAX_BODY_BYTES = 4 * MIB
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * MIB
    kit.conversation()
    meta = {"blob": "x" * (MIB + 10)}
    response = submit(api(owner), {"parts": [{"type": "text", "text": "hi", "meta": meta}]})
    assert response.status_code == 413, response.content[:300]
    assert response.json()["error"]["cause"] == "too_large"
    assert not Entry.objects.exists()


@pytest.mark.parametrize("escaped", ["\\u0000", "\\ud800"])
def test_text_that_cannot_be_stored_is_a_400(api, owner, kit, escaped):
    kit.conversation()
    body = '{"parts": [{"type": "text", "text": "a' + escaped + 'b"}]}'
    response = api(owner).post(
        "/v1/conversations/c1/submissions", data=body, content_type="application/json"
    )
    assert response.status_code == 400
    assert Submission.objects.count() == 0


def test_admission_wakes_the_echo_runtime_after_commit_only_in_echo_mode(
    api, owner, kit, settings, django_capture_on_commit_callbacks, monkeypatch
):
    from conversations import tasks

    woken: list[str] = []
    monkeypatch.setattr(tasks.echo_sweep, "delay", lambda: woken.append("echo"))
    kit.conversation()
    settings.AGENT_RUNTIME = "echo"
    with django_capture_on_commit_callbacks(execute=True):
        submit(api(owner), {"parts": TEXT})
    assert woken == ["echo"]
    settings.AGENT_RUNTIME = "external"
    with django_capture_on_commit_callbacks(execute=True):
        submit(api(owner), {"parts": TEXT})
    assert woken == ["echo"]


def test_a_rejected_submission_enqueues_nothing(
    api, owner, kit, settings, django_capture_on_commit_callbacks, monkeypatch
):
    from conversations import tasks

    woken: list[str] = []
    monkeypatch.setattr(tasks.echo_sweep, "delay", lambda: woken.append("echo"))
    settings.AGENT_RUNTIME = "echo"
    kit.conversation()
    kit.submit()
    kit.claim()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        submit(api(owner), {"parts": TEXT, "when_busy": "reject"})
    assert callbacks == [] and woken == []
