"""Jobs: schedules, stopped extensions, missed runs and catch-up, overlap, manual trigger,
failures, prompt actions, retries, the API."""

from __future__ import annotations

from typing import Any

import pytest

from conversations.models import Conversation, Submission
from core import clock
from extensions_host.background.declarations import Job, JobRun, PromptAction, add_job
from extensions_host.background.models import HELD_ACTOR, JobState, JobTrigger
from extensions_host.background.services.jobs import (
    instants_between,
    job_run,
    job_trigger,
    jobs_due,
    jobs_list,
    jobs_run_due,
    next_after,
)
from extensions_host.contributions.models import Notification
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import current_frame
from extensions_host.sdk import CommandError, DefinitionError, Retry
from extensions_host.services.errors import MSG_UNAVAILABLE, stopped_message

from .conftest import resume, roster
from .exts import JOB, Runs, job_ext, job_retrying, make_ext


def state() -> JobState:
    return JobState.objects.get(pk=JOB)


def test_an_every_seconds_job_runs_once_per_instant(install, fake_clock, sent):
    runs = Runs()
    install(job_ext(runs))
    jobs_run_due()  # declares it: its first run is the next instant, not now
    first = state().next_run_at
    assert first == next_after(Job("x", action=runs, every_seconds=10), fake_clock.now_ms())

    fake_clock.set(first)
    jobs_run_due()
    jobs_run_due()  # the same instant again: nothing
    fake_clock.set(first + 10_000)
    jobs_run_due()

    assert runs.instants == [first, first + 10_000]
    assert state().next_run_at == first + 20_000
    assert state().runs == 2


def test_cron_schedules_use_croniter_in_utc(fake_clock):
    job = Job("c", action=lambda ctx, run: None, schedule="*/5 * * * *")
    start = fake_clock.now_ms()  # 2026-01-01T00:00:00Z

    assert next_after(job, start) == start + 5 * 60_000
    assert instants_between(job, start, start + 30 * 60_000) == (
        7,
        start,
        start + 30 * 60_000,
    )


def test_a_job_of_a_stopped_extension_does_not_run_and_its_missed_runs_are_counted(
    install, fake_clock, sent, settings
):
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    runs = Runs()
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")

    fake_clock.set(first + 45_000)  # instants first, +10, +20, +30, +40 pass while stopped
    jobs_run_due()
    assert runs.runs == []
    assert state().next_run_at == first  # never moved forward silently

    resume("alpha")
    jobs_run_due()

    assert runs.runs == []  # catch_up="skip": counted, not run
    assert (state().missed_runs, state().last_missed_at) == (5, first + 40_000)
    assert state().next_run_at == first + 50_000
    assert jobs_list()[0]["missed_runs"] == 5


def test_a_run_whose_extension_stopped_after_the_check_counts_its_instant_as_missed(
    install, fake_clock, sent, monkeypatch
):
    """The stop lands between `job_run`'s check of the extension and its frame: the frame is
    skipped, and the instant it would have run is lost, so it is counted."""
    runs = Runs()
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")
    monkeypatch.setattr(
        "extensions_host.background.services.jobs.eligible_ids", lambda kind, ids: ids
    )  # the check saw it running
    fake_clock.set(first)

    assert job_run(job_id=JOB) == "skipped"

    assert runs.runs == []
    row = state()
    assert (row.missed_runs, row.last_missed_at) == (1, first)
    assert (row.last_outcome, row.runs, row.failures) == ("skipped", 0, 0)
    assert row.next_run_at == first + 10_000
    assert not Notification.objects.exists()


def test_catch_up_once_runs_a_single_catch_up_run(install, fake_clock, sent, settings):
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    runs = Runs()
    install(job_ext(runs, catch_up="once"))
    jobs_run_due()
    first = state().next_run_at

    fake_clock.set(first + 45_000)
    jobs_run_due()
    jobs_run_due()

    assert runs.instants == [first + 40_000]
    assert runs.runs[0].missed_runs == 5
    assert state().missed_runs == 5


def test_skip_overlap_counts_instants_that_came_due_during_the_run_and_does_not_run_them(
    install, fake_clock, sent
):
    runs = Runs(fake_clock, advance_ms=25_000)  # each run takes 25 s; the period is 10 s
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at

    fake_clock.set(first)
    jobs_run_due()
    jobs_run_due()

    assert runs.instants == [first]
    assert state().overlap_skips == 2
    assert state().next_run_at == first + 30_000


def test_buffer_one_runs_once_right_after_an_overlapping_run(install, fake_clock, sent):
    runs = Runs(fake_clock, advance_ms=25_000)
    install(job_ext(runs, overlap="buffer_one"))
    jobs_run_due()
    first = state().next_run_at

    fake_clock.set(first)
    jobs_run_due()
    runs.advance_ms = 0
    jobs_run_due()

    assert runs.instants == [first, first + 20_000]
    assert state().overlap_skips == 1


def test_buffer_one_runs_the_buffered_instant_even_when_the_run_outlasted_the_grace(
    install, fake_clock, sent, settings
):
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 60
    runs = Runs(fake_clock, advance_ms=170_000)  # longer than the period and the grace
    install(job_ext(runs, every_seconds=100, overlap="buffer_one", deadline_s=300))
    jobs_run_due()
    first = state().next_run_at

    fake_clock.set(first)
    jobs_run_due()  # first + 100 s comes due during the run, 70 s before it ends
    runs.advance_ms = 0
    jobs_run_due()

    assert runs.instants == [first, first + 100_000]  # run once right after, not a misfire
    assert (state().missed_runs, state().overlap_skips) == (0, 0)
    assert state().next_run_at == first + 200_000


def test_a_buffered_instant_is_a_misfire_when_the_host_was_down_after_the_run(
    install, fake_clock, sent, settings
):
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 60
    runs = Runs(fake_clock, advance_ms=170_000)
    install(job_ext(runs, every_seconds=200, overlap="buffer_one", deadline_s=300))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first + 50_000)  # a late start: first + 200 s comes due during the run
    jobs_run_due()
    runs.advance_ms = 0

    fake_clock.set(first + 220_000 + 61_000)  # back 61 s after the run ended
    jobs_run_due()

    assert runs.instants == [first]
    assert (state().missed_runs, state().last_missed_at) == (1, first + 200_000)
    assert state().next_run_at == first + 400_000


def test_a_retry_due_with_a_scheduled_instant_runs_and_the_instant_runs_on_the_next_sweep(
    install, fake_clock, sent
):
    runs = Runs()
    runs.fail = Retry(10, "later")  # re-offered exactly at the next instant
    install(job_ext(runs))  # every 10 s
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first)
    assert job_run(job_id=JOB) == "retry"
    runs.fail = None

    fake_clock.set(first + 10_000)  # the retry of `first` and the instant first + 10 s
    assert job_run(job_id=JOB) == "ok"
    assert runs.instants == [first]
    # still due, never moved silently: held behind the retry's run, the next run
    assert jobs_list()[0]["next_run_at"] == clock.from_ms(first + 10_000)
    assert jobs_run_due() is False  # the next sweep
    fake_clock.set(first + 20_000)
    jobs_run_due()

    assert runs.instants == [first, first + 10_000, first + 20_000]
    assert (state().missed_runs, state().overlap_skips, state().runs) == (0, 0, 3)


def test_a_manual_trigger_due_with_a_scheduled_instant_leaves_the_instant_due(
    install, fake_clock, sent
):
    runs = Runs()
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first - 5)
    job_trigger(job_id=JOB, actor="staff")

    fake_clock.set(first)
    jobs_run_due()
    assert [(r.scheduled_for, r.manual) for r in runs.runs] == [(first, True)]
    jobs_run_due()

    assert [(r.scheduled_for, r.manual) for r in runs.runs] == [(first, True), (first, False)]
    assert state().missed_runs == 0
    assert state().next_run_at == first + 10_000


def test_an_instant_held_behind_a_trigger_past_the_grace_is_counted_as_missed(
    install, fake_clock, sent, settings
):
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    runs = Runs(fake_clock, advance_ms=5_000)  # the manual run takes 5 s
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    job_trigger(job_id=JOB, actor="staff")

    fake_clock.set(first)
    jobs_run_due()
    runs.advance_ms = 0
    fake_clock.set(first + 5_000 + 2_000)  # the host was down for 2 s after the manual run
    jobs_run_due()

    assert [r.manual for r in runs.runs] == [True]
    assert (state().missed_runs, state().last_missed_at) == (1, first)
    assert state().next_run_at == first + 10_000
    assert not JobTrigger.objects.exists()


def test_an_instant_held_behind_a_trigger_runs_after_it_however_long_the_trigger_ran(
    install, fake_clock, sent, settings
):
    """Its grace counts from the end of the run it waited for, as a buffered instant's."""
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    runs = Runs(fake_clock, advance_ms=5_000)  # the manual run outlasts the grace
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    job_trigger(job_id=JOB, actor="staff")

    fake_clock.set(first)
    jobs_run_due()
    runs.advance_ms = 0
    jobs_run_due()  # right after the manual run: `first` runs, 5 s late

    assert [(r.scheduled_for, r.manual) for r in runs.runs] == [(first, True), (first, False)]
    assert (state().missed_runs, state().overlap_skips) == (0, 0)
    assert state().next_run_at == first + 10_000


def test_skip_overlap_counts_instants_that_came_due_during_a_trigger_run_and_runs_the_held_one(
    install, fake_clock, sent
):
    """The overlap rule applies after a manual run as after a scheduled one; the instant the
    manual run held runs next."""
    runs = Runs(fake_clock, advance_ms=25_000)  # each run takes 25 s; the period is 10 s
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first - 5)
    job_trigger(job_id=JOB, actor="staff")

    fake_clock.set(first)
    jobs_run_due()  # the manual run, first .. first + 25 s; `first` held behind it
    runs.advance_ms = 0
    jobs_run_due()
    jobs_run_due()

    assert [(r.scheduled_for, r.manual) for r in runs.runs] == [(first, True), (first, False)]
    # first + 10 s and first + 20 s came due while the manual run held the job
    assert (state().overlap_skips, state().missed_runs) == (2, 0)
    assert state().next_run_at == first + 30_000


def test_skip_overlap_applies_after_a_long_retry_re_offer_too(install, fake_clock, sent):
    runs = Runs(fake_clock)
    runs.fail = Retry(10, "later")  # re-offered exactly at the next instant
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first)
    assert job_run(job_id=JOB) == "retry"
    runs.fail = None
    runs.advance_ms = 25_000

    fake_clock.set(first + 10_000)
    jobs_run_due()  # the retry of `first`, first + 10 s .. first + 35 s; first + 10 s held
    runs.advance_ms = 0
    jobs_run_due()
    jobs_run_due()

    assert runs.instants == [first, first + 10_000]
    assert (state().overlap_skips, state().missed_runs) == (2, 0)  # first + 20 s, first + 30 s
    assert state().next_run_at == first + 40_000


def test_buffer_one_runs_the_held_instant_then_the_latest_that_came_due_during_a_trigger_run(
    install, fake_clock, sent
):
    runs = Runs(fake_clock, advance_ms=25_000)
    install(job_ext(runs, overlap="buffer_one"))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first - 5)
    job_trigger(job_id=JOB, actor="staff")

    fake_clock.set(first)
    jobs_run_due()  # the manual run, first .. first + 25 s
    runs.advance_ms = 0
    jobs_run_due()
    jobs_run_due()
    jobs_run_due()

    assert [(r.scheduled_for, r.manual) for r in runs.runs] == [
        (first, True),
        (first, False),  # the held instant
        (first + 20_000, False),  # the latest that came due during the manual run
    ]
    assert (state().overlap_skips, state().missed_runs) == (1, 0)
    assert state().next_run_at == first + 30_000


def test_a_second_trigger_keeps_the_held_instant_held_until_a_later_instant_is_due(
    install, fake_clock, sent
):
    runs = Runs()
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first - 5)
    job_trigger(job_id=JOB, actor="staff")
    fake_clock.set(first)
    jobs_run_due()  # `first` held behind the manual run
    job_trigger(job_id=JOB, actor="staff")

    jobs_run_due()  # the second manual run: `first` stays held
    assert jobs_list()[0]["next_run_at"] == clock.from_ms(first)
    job_trigger(job_id=JOB, actor="staff")
    fake_clock.set(first + 10_000)
    jobs_run_due()  # the third, with first + 10 s due: it is held, `first` counted
    jobs_run_due()

    assert [(r.scheduled_for, r.manual) for r in runs.runs] == [
        (first, True),
        (first, True),
        (first + 10_000, True),
        (first + 10_000, False),
    ]
    assert (state().missed_runs, state().last_missed_at) == (1, first)


def test_a_held_catch_up_run_reports_the_instants_missed_before_it(
    install, fake_clock, sent, settings
):
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    runs = Runs()
    install(job_ext(runs, catch_up="once"))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first + 45_000)  # five instants passed while the host was down
    job_trigger(job_id=JOB, actor="staff")

    jobs_run_due()  # the manual run; the catch-up run is held behind it
    jobs_run_due()

    assert [(r.scheduled_for, r.manual) for r in runs.runs] == [
        (first + 45_000, True),
        (first + 40_000, False),
    ]
    assert runs.runs[1].missed_runs == 5
    assert state().missed_runs == 5


def test_a_manual_trigger_runs_the_job_now(install, fake_clock, sent, api, staff):
    runs = Runs()
    install(job_ext(runs))

    response = api(staff).post(f"/v1/jobs/{JOB}/trigger")

    assert response.status_code == 202, response.content
    assert response.json() == {"job_id": JOB, "queued": True}
    assert JobTrigger.objects.filter(job_id=JOB, actor="staff").exists()
    assert job_run(job_id=JOB) == "ok"
    assert runs.runs[0].manual is True
    assert not JobTrigger.objects.exists()
    assert job_run(job_id=JOB) == "idle"


def test_manual_trigger_needs_an_admin_a_known_job_and_a_running_extension(
    install, sent, api, owner, staff
):
    install(job_ext(Runs()))

    assert api(owner).post(f"/v1/jobs/{JOB}/trigger").status_code == 403
    missing = api(staff).post("/v1/jobs/ext:alpha:nope/trigger")
    assert (missing.status_code, missing.json()["error"]["cause"]) == (404, "not_found")
    # like its commands (spec 07: a stopped extension is 503 `unavailable`)
    RosterEntry.objects.filter(pk="alpha").update(admitted_grants=["state"])
    ungranted = api(staff).post(f"/v1/jobs/{JOB}/trigger")
    assert (ungranted.status_code, ungranted.json()["error"]) == (
        503,
        {"category": "extensions", "cause": "unavailable", "message": MSG_UNAVAILABLE},
    )
    RosterEntry.objects.filter(pk="alpha").update(
        admitted_grants=["state", "timers"],
        status=ExtensionStatus.STOPPED,
        reason="job tick defect",
    )
    stopped = api(staff).post(f"/v1/jobs/{JOB}/trigger")
    assert (stopped.status_code, stopped.json()["error"]["message"]) == (
        503,
        stopped_message("alpha", "job tick defect"),
    )
    assert not JobTrigger.objects.exists()


def test_the_jobs_list_shows_schedule_next_and_last_run_and_outcome(
    install, fake_clock, sent, api, owner
):
    install(job_ext(Runs()))
    jobs_run_due()
    fake_clock.set(state().next_run_at)
    jobs_run_due()

    response = api(owner).get("/v1/jobs")

    assert response.status_code == 200
    (job,) = response.json()["results"]
    assert job["id"] == JOB
    assert (job["schedule"], job["action"], job["overlap"], job["catch_up"]) == (
        "every 10s",
        "task",
        "skip",
        "skip",
    )
    assert (job["last_outcome"], job["runs"], job["missed_runs"]) == ("ok", 1, 0)
    assert job["next_run_at"] is not None and job["last_run_at"] is not None
    assert api(None).get("/v1/jobs").status_code == 401


def test_a_failed_run_emits_job_failed_a_typed_error_does_not_stop(install, fake_clock, sent):
    runs = Runs()
    runs.fail = CommandError("rejected", "quota at the provider")
    install(job_ext(runs))
    jobs_run_due()
    fake_clock.set(state().next_run_at)

    jobs_run_due()

    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert (state().last_outcome, state().failures) == ("failed", 1)
    note = Notification.objects.get()
    assert (note.type, note.job_id) == ("job.failed", JOB)
    assert "quota at the provider" in note.body


def test_a_defect_in_a_job_stops_the_extension_and_emits_job_failed(install, fake_clock, sent):
    runs = Runs()
    runs.fail = ZeroDivisionError("division by zero")
    install(job_ext(runs))
    jobs_run_due()
    fake_clock.set(state().next_run_at)

    jobs_run_due()

    assert roster("alpha").reason == "job tick defect: division by zero"
    assert Notification.objects.filter(type="job.failed", job_id=JOB).count() == 1


def test_retry_re_offers_the_run_for_the_same_instant_after_the_delay(install, fake_clock, sent):
    runs, first = job_retrying(install, fake_clock)

    runs.fail = None
    fake_clock.advance(seconds=29)
    jobs_run_due()
    assert first not in runs.instants
    fake_clock.advance(seconds=1)
    jobs_run_due()

    assert first in runs.instants
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_job_retries_are_bounded_and_then_count_as_a_defect(install, fake_clock, sent, settings):
    # each re-offer carries its attempt: a run that keeps asking for a Retry is a defect at
    # the first one past the limit, not re-offered for ever
    settings.HOST_RETRY_LIMIT = 2
    runs = Runs()
    runs.fail = Retry(1, "still down")
    install(job_ext(runs, every_seconds=3600))
    jobs_run_due()
    fake_clock.set(state().next_run_at)

    outcomes = []
    for _ in range(3):
        outcomes.append(job_run(job_id=JOB))
        fake_clock.advance(seconds=1)

    assert outcomes == ["retry", "retry", "failed"]
    alpha = roster("alpha")
    assert alpha.status == ExtensionStatus.STOPPED
    assert alpha.reason == "job tick defect: retried 2 times: still down"


def test_instants_held_behind_earlier_runs_each_run_alone_oldest_first(install, fake_clock, sent):
    runs = Runs()
    install(job_ext(runs, every_seconds=3600))
    jobs_run_due()
    now = fake_clock.now_ms()
    for at in (now - 1000, now - 2000):  # two instants held (a schedule move, a run's wait)
        JobTrigger.objects.create(job_id=JOB, actor=HELD_ACTOR, not_before=now, scheduled_for=at)

    assert job_run(job_id=JOB) == "ok"
    assert job_run(job_id=JOB) == "ok"

    assert runs.instants == [now - 2000, now - 1000]
    assert not JobTrigger.objects.exists()


def test_a_job_waiting_out_its_retry_delay_is_not_handed_out_before_it(install, fake_clock, sent):
    job_retrying(install, fake_clock, every_seconds=3600)

    fake_clock.advance(seconds=29)
    assert jobs_due(limit=10) == []  # beat's sweep sends it no task while it waits
    fake_clock.advance(seconds=1)
    assert jobs_due(limit=10) == [JOB]


def test_a_prompt_job_submits_into_its_conversation_and_needs_send(
    install, fake_clock, sent, conversation
):
    conversation("inbox")
    install(job_ext(PromptAction(conversation_id="inbox", text="Anything new?")))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first)

    jobs_run_due()

    submission = Submission.objects.get(conversation_id="inbox")
    assert submission.parts == [{"type": "text", "text": "Anything new?"}]
    assert submission.origin_extension_id == "alpha"
    assert submission.request_id == f"job:{JOB}:{first}"

    RosterEntry.objects.filter(pk="alpha").update(admitted_grants=["state", "timers"])
    fake_clock.set(first + 10_000)
    jobs_run_due()
    assert state().last_error == "Extension is not granted send"
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_each_run_of_a_prompt_job_with_a_long_id_submits_its_own_prompt(
    install, fake_clock, sent, conversation
):
    # `ext:<63-char id>:<64-char name>` leaves no room for the instant in a 128-char request id
    conversation("inbox")
    ext = make_ext("a" * 63)
    add_job(
        ext,
        Job("t" * 64, action=PromptAction(conversation_id="inbox", text="Hi"), every_seconds=10),
    )
    install(ext)
    jobs_run_due()
    first = JobState.objects.get().next_run_at
    fake_clock.set(first)
    jobs_run_due()
    fake_clock.set(first + 10_000)
    jobs_run_due()

    request_ids = sorted(Submission.objects.values_list("request_id", flat=True))
    assert len(request_ids) == 2
    assert {request_id.rsplit(":", 1)[1] for request_id in request_ids} == {
        str(first),
        str(first + 10_000),
    }
    assert all(len(request_id) <= 128 for request_id in request_ids)


def test_a_prompt_job_creates_a_missing_conversation_like_send(install, fake_clock, sent):
    # one rule with `ctx.send` (spec 04): created on demand, owned by the extension's user
    install(job_ext(PromptAction(conversation_id="inbox", text="Anything new?")))
    jobs_run_due()
    fake_clock.set(state().next_run_at)

    jobs_run_due()

    assert state().last_outcome == "ok"
    inbox = Conversation.objects.get(pk="inbox")
    assert (inbox.owner.get_username(), inbox.source) == ("ext:alpha", "ext:alpha")
    assert Submission.objects.get(conversation_id="inbox").origin_extension_id == "alpha"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one"),
        ({"every_seconds": 1, "schedule": "* * * * *"}, "exactly one"),
        ({"schedule": "not cron"}, "not a cron"),
        ({"every_seconds": 0}, ">= 1"),
        ({"every_seconds": 5, "overlap": "queue"}, "overlap"),
        ({"every_seconds": 5, "catch_up": "all"}, "catch_up"),
    ],
)
def test_a_job_declaration_is_checked(options, message):
    with pytest.raises(DefinitionError, match=message):
        Job("j", action=lambda ctx, run: None, **options)


# --- beat's sweep: one task per due job --------------------------------------------------------


def two_jobs(runs: Runs) -> Any:
    ext = make_ext("alpha")
    add_job(ext, Job("tick", action=runs, every_seconds=10))
    add_job(ext, Job("tock", action=runs, every_seconds=10))
    return ext


def test_the_run_jobs_task_hands_each_due_job_to_its_own_task_and_runs_none(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    from extensions_host.background import tasks

    runs = Runs()
    install(two_jobs(runs))
    tasks.run_jobs()  # declares them: their first run is the next instant
    fake_clock.set(state().next_run_at)

    with django_capture_on_commit_callbacks(execute=True):
        tasks.run_jobs()

    # one job per task: a task's time limit is never shared by a second job's frame, so a
    # limit hit in one job can never be taken for another extension's job overrunning
    assert runs.runs == []
    assert sorted(args for args, _ in sent.of("run_job")) == [
        ("ext:alpha:tick",),
        ("ext:alpha:tock",),
    ]
    assert sent.of("run_jobs") == []  # no self re-enqueue: the next tick hands out the rest
    for (job_id,), _ in sent.of("run_job"):
        tasks.run_job(job_id)
    assert len(runs.runs) == 2
    assert {r.job_id for r in runs.runs} == {"ext:alpha:tick", "ext:alpha:tock"}


def test_a_due_job_is_handed_out_only_after_the_sweep_commits(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    from extensions_host.background.services.jobs import jobs_dispatch_due

    install(job_ext(Runs()))
    jobs_dispatch_due()
    fake_clock.set(state().next_run_at)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert jobs_dispatch_due() == [JOB]
    assert sent.of("run_job") == []
    for callback in callbacks:
        callback()
    assert [args for args, _ in sent.of("run_job")] == [(JOB,)]


def test_a_broker_failure_handing_out_due_jobs_is_logged_and_the_other_jobs_still_go(
    install, fake_clock, sent, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    from extensions_host.background import tasks
    from extensions_host.background.services.jobs import jobs_dispatch_due

    install(two_jobs(Runs()))
    jobs_dispatch_due()
    fake_clock.set(state().next_run_at)
    handed: list[str] = []

    def delay(job_id: str) -> None:
        if job_id == "ext:alpha:tick":
            raise ConnectionError("broker unreachable")
        handed.append(job_id)

    monkeypatch.setattr(tasks.run_job, "delay", delay)

    # on-commit callbacks are robust: the failed send is logged (Django names the callback by
    # its `__qualname__`), never raised into the committed sweep, and the next job is sent
    with django_capture_on_commit_callbacks(execute=True):
        assert sorted(jobs_dispatch_due()) == ["ext:alpha:tick", "ext:alpha:tock"]
    assert handed == ["ext:alpha:tock"]
    assert "broker unreachable" in caplog.text


def test_duplicate_run_job_tasks_for_one_due_job_run_it_once(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    from extensions_host.background.services.jobs import jobs_dispatch_due

    runs = Runs()
    install(job_ext(runs))
    jobs_dispatch_due()
    first = state().next_run_at
    fake_clock.set(first)

    with django_capture_on_commit_callbacks(execute=True):
        jobs_dispatch_due()
        jobs_dispatch_due()  # a second tick before the first task ran: handed out again
    assert [args for args, _ in sent.of("run_job")] == [(JOB,), (JOB,)]

    assert job_run(job_id=JOB) == "ok"
    assert job_run(job_id=JOB) == "idle"  # the duplicate finds nothing due
    assert runs.instants == [first]
    assert state().runs == 1


def test_a_trigger_is_audited_with_the_staff_username_not_a_display_name(
    install, sent, api, make_user
):
    from core.models import AuditEntry

    admin = make_user("ops", is_staff=True, is_superuser=True, first_name="Olga", last_name="P")
    install(job_ext(Runs()))

    assert api(admin).post(f"/v1/jobs/{JOB}/trigger").status_code == 202

    entry = AuditEntry.objects.get(action="job_triggered")
    assert (entry.actor, entry.target) == ("ops", JOB)
    assert JobTrigger.objects.get().actor == "ops"


# --- the action's deadline -------------------------------------------------------------------


def deadline_job(deadlines: list[float], *, ext_deadline_s: float | None = None, **job: Any):
    """An extension whose job records the deadline of its action's frame."""

    def action(ctx: Any, run: JobRun) -> None:
        frame = current_frame()
        assert frame is not None
        deadlines.append(frame.deadline_s)

    ext = make_ext("alpha", deadline_s=ext_deadline_s)
    add_job(ext, Job("tick", action=action, every_seconds=10, **job))
    return ext


def run_due_once(fake_clock: Any) -> None:
    jobs_run_due()  # declares it
    fake_clock.set(state().next_run_at)
    jobs_run_due()


def test_a_job_gets_its_extensions_own_deadline(install, fake_clock, sent, settings):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 100
    deadlines: list[float] = []
    install(deadline_job(deadlines, ext_deadline_s=20))
    run_due_once(fake_clock)
    assert deadlines == [20]


def test_a_job_gets_the_staff_deadline_override_of_its_extension(install, fake_clock, sent):
    deadlines: list[float] = []
    install(deadline_job(deadlines, ext_deadline_s=20))
    RosterEntry.objects.filter(pk="alpha").update(deadline_seconds=120)
    run_due_once(fake_clock)
    assert deadlines == [120]


def test_a_jobs_own_deadline_s_comes_before_its_extensions(install, fake_clock, sent):
    deadlines: list[float] = []
    install(deadline_job(deadlines, ext_deadline_s=20, deadline_s=7))
    run_due_once(fake_clock)
    assert deadlines == [7]


# --- a changed schedule ----------------------------------------------------------------------


def release(runs: Runs, version: str, **job: Any):
    """Version `version` of the extension, declaring the job with the schedule `job`."""
    ext = make_ext("alpha", version=version)
    add_job(ext, Job("tick", action=runs, **job))
    return ext


def test_a_changed_schedule_takes_effect_after_an_upgrade(install, fake_clock, sent, api, owner):
    runs = Runs()
    start = fake_clock.now_ms()  # midnight UTC
    install(release(runs, "1.0.0", every_seconds=86_400))
    jobs_run_due()  # declared: first run at the next midnight
    fake_clock.advance(seconds=1)

    install(release(runs, "2.0.0", every_seconds=60))  # now every minute
    fake_clock.advance(seconds=5 * 60)
    jobs_run_due()

    # seen late (no sweep ran since the upgrade): the latest instant in its grace runs, as any
    # instant seen late does
    assert runs.instants == [start + 300_000]
    assert state().next_run_at == start + 360_000
    assert state().schedule == "every 60s"
    (job,) = api(owner).get("/v1/jobs").json()["results"]
    assert job["schedule"] == "every 60s"
    assert job["next_run_at"] == clock.from_ms(start + 360_000).isoformat().replace("+00:00", "Z")
    fake_clock.set(start + 360_000)
    jobs_run_due()
    assert runs.instants == [start + 300_000, start + 360_000]


def test_a_schedule_moved_later_is_not_handed_out_before_its_new_instant(install, fake_clock, sent):
    runs = Runs()
    start = fake_clock.now_ms()
    install(release(runs, "1.0.0", every_seconds=60))
    jobs_run_due()
    fake_clock.advance(seconds=61)  # the old schedule's instant at +60 s came due

    install(release(runs, "2.0.0", every_seconds=3600))
    jobs_run_due()

    # the old instant, due within its grace when the change was seen, runs as a late instant
    assert runs.instants == [start + 60_000]
    assert state().next_run_at == start + 3_600_000
    assert jobs_due(limit=10) == []  # not handed out again every tick
    assert jobs_list()[0]["next_run_at"] == clock.from_ms(start + 3_600_000)


def test_old_instants_missed_before_a_schedule_change_are_counted_not_run(
    install, fake_clock, sent, settings
):
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    runs = Runs()
    install(release(runs, "1.0.0", every_seconds=10))
    jobs_run_due()
    first = state().next_run_at
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")
    fake_clock.set(first + 45_000)  # instants first … +40 pass while stopped

    install(release(runs, "2.0.0", every_seconds=60))
    resume("alpha")
    jobs_run_due()

    assert runs.runs == []  # catch_up="skip": counted, not run
    assert (state().missed_runs, state().last_missed_at) == (5, first + 40_000)
    assert state().next_run_at == next_after(
        Job("x", action=runs, every_seconds=60), first + 45_000
    )


def test_a_schedule_change_does_not_run_again_the_instant_the_job_last_ran(
    install, fake_clock, sent, settings
):
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 60
    runs = Runs()
    start = fake_clock.now_ms()  # midnight UTC
    install(release(runs, "1.0.0", every_seconds=60))
    jobs_run_due()
    fake_clock.set(start + 60_000)
    jobs_run_due()
    assert runs.instants == [start + 60_000]
    fake_clock.advance(seconds=5)

    # every 30 s: its latest instant within the grace (+60 s) is the one that just ran
    install(release(runs, "2.0.0", every_seconds=30))
    jobs_run_due()

    assert runs.instants == [start + 60_000]
    assert state().next_run_at == start + 90_000


def test_a_job_row_from_before_schedules_were_recorded_keeps_its_next_run(
    install, fake_clock, sent
):
    install(job_ext(Runs()))
    jobs_run_due()
    next_run = state().next_run_at
    JobState.objects.filter(pk=JOB).update(schedule="")  # as the migration leaves it

    jobs_run_due()

    assert (state().schedule, state().next_run_at) == ("every 10s", next_run)
