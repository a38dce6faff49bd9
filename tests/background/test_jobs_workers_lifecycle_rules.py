"""Jobs, idle workers, the lifecycle outbox and idle detection: rules a mutation sweep found
unprotected. Jobs: schedule arithmetic on an instant, schedule changes (an old instant due right
now, a legacy row, the new schedule's next instant, the last late run), the due sweep
(eligibility, oldest first, more), the inclusive misfire grace and the missed-run figures,
coalesced triggers (manual wins, the retry attempt kept), failure bookkeeping and the jobs list.
Workers: the sweep's declared check, a skipped activation, the lease (deadline + grace), dead-run
and run figures, what store errors are host trouble, the crash stop's kept wake, the summary.
Lifecycle: fan-out order and paging, events of no conversation, the delivered count, a stopped
page, a withdrawn grant, which workers wake, a page left full, bounded and delayed retries, the
task budget and kick, prune paging and marks. Idle: the inclusive cutoff, archived conversations
and the watermark's compare-and-set. The handlers' read API: entry id 0, a bool cursor, the
`withdrawn` and `role` filters. Shutdown: at most the worker default deadline."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import ProgrammingError

from conversations.models import Conversation, Submission
from core import clock
from core.errors import HostError
from core.models import LifecycleEvent
from core.services import lifecycle_record
from extensions_host.background.declarations import (
    Job,
    PromptAction,
    Worker,
    WorkerWake,
    add_job,
    add_worker,
)
from extensions_host.background.models import (
    HELD_ACTOR,
    JobState,
    JobTrigger,
    LifecycleConsumer,
    LifecycleDelivery,
    LifecycleFanout,
    Mark,
    WorkerState,
)
from extensions_host.background.services.idle import (
    IDLE_WATERMARK,
    _watermark_advance,
    conversations_detect_idle,
    idle_watermark_lower,
)
from extensions_host.background.services.jobs import (
    job_get,
    job_run,
    job_trigger,
    jobs_due,
    jobs_list,
    jobs_run_due,
    next_after,
)
from extensions_host.background.services.lifecycle import (
    lifecycle_deliver,
    lifecycle_deliver_all,
    lifecycle_fanout,
    lifecycle_fanout_all,
    lifecycle_pending_extensions,
    lifecycle_prune,
)
from extensions_host.background.services.workers import (
    worker_run,
    worker_wake,
    workers_summary,
    workers_wake_pending,
)
from extensions_host.contributions.models import Notification
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime.stops import REASON_MAX
from extensions_host.sdk import CommandError, Retry, StateError

from .conftest import roster
from .exts import JOB, Runs, job_ext, job_retrying, make_ext


def state(job_id: str = JOB) -> JobState:
    return JobState.objects.get(pk=job_id)


def listed(job_id: str = JOB) -> dict[str, Any]:
    return next(row for row in jobs_list() if row["id"] == job_id)


def stop(extension_id: str = "alpha") -> None:
    RosterEntry.objects.filter(pk=extension_id).update(status=ExtensionStatus.STOPPED, reason="x")


# --- schedule arithmetic ----------------------------------------------------------------------


def test_the_next_instant_is_strictly_after_an_instant_of_the_schedule():
    """`next_after` of an instant is the following one, never the instant itself."""
    job = Job("x", action=lambda ctx, run: None, every_seconds=10)

    assert next_after(job, 20_000) == 30_000
    assert next_after(job, 19_999) == 20_000


def test_a_job_declared_on_one_of_its_instants_does_not_run_at_once(install, fake_clock, sent):
    """A new job's first run is its next instant, even when the host clock sits on one."""
    runs = Runs()
    now = fake_clock.now_ms()
    assert now % 10_000 == 0  # midnight UTC: an instant of every 10 s
    install(job_ext(runs))

    jobs_run_due()

    assert runs.runs == []
    assert state().next_run_at == now + 10_000


# --- a changed schedule -----------------------------------------------------------------------


def test_an_old_instant_due_exactly_when_the_change_is_seen_still_runs(install, fake_clock, sent):
    """The old schedule's instant that came due at the very moment the new declaration is seen
    is one of the old instants due (`<=`), run, not dropped for the new schedule."""
    runs = Runs()
    start = fake_clock.now_ms()
    install(job_ext(runs, every_seconds=60))
    jobs_run_due()
    fake_clock.set(start + 60_000)  # the old instant is due right now

    install(job_ext(runs, version="2.0.0", every_seconds=3600))
    jobs_run_due()

    assert runs.instants == [start + 60_000]
    assert state().next_run_at == start + 3_600_000


def test_after_old_instants_were_dealt_with_the_new_schedule_gives_the_next_instant(
    install, fake_clock, sent, settings
):
    """The row then follows the new schedule: its next instant, not the old schedule's."""
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    runs = Runs()
    start = fake_clock.now_ms()
    install(job_ext(runs, every_seconds=10))
    jobs_run_due()
    stop()
    fake_clock.set(start + 65_000)  # old instants +10 … +60 s passed while stopped

    install(job_ext(runs, version="2.0.0", every_seconds=60))
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.RUNNING, reason="")
    jobs_run_due()

    assert runs.runs == []
    assert (state().missed_runs, state().last_missed_at) == (6, start + 60_000)
    assert state().next_run_at == start + 120_000  # every 60 s; the old one would say +70 s


def test_a_legacy_row_off_its_declared_schedule_is_moved_onto_it(
    install, fake_clock, sent, settings
):
    """A row from before the `schedule` column is adopted only when its next instant is one of
    the declared schedule's; otherwise it moves onto the schedule."""
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    install(job_ext(Runs()))
    jobs_run_due()
    fake_clock.advance(seconds=5)
    now = fake_clock.now_ms()
    JobState.objects.filter(pk=JOB).update(schedule="", next_run_at=now + 3_000)

    assert jobs_due(limit=10) == []

    assert (state().schedule, state().next_run_at) == ("every 10s", now + 5_000)


def test_a_legacy_row_on_its_declared_schedule_is_adopted_without_running(
    install, fake_clock, sent
):
    """Its next instant is kept: it is not handed out as a late instant of a new schedule."""
    install(job_ext(Runs()))
    jobs_run_due()
    next_run = state().next_run_at
    JobState.objects.filter(pk=JOB).update(schedule="")

    assert jobs_due(limit=10) == []

    assert (state().schedule, state().next_run_at) == ("every 10s", next_run)


def test_a_schedule_change_does_not_run_an_instant_at_or_before_the_jobs_last_late_run(
    install, fake_clock, sent, settings
):
    """The new schedule's latest instant runs at once only when it is after the job's last
    run (its start), not merely after the instant that run was for."""
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 60
    runs = Runs()
    start = fake_clock.now_ms()
    install(job_ext(runs, every_seconds=60))
    jobs_run_due()
    fake_clock.set(start + 90_000)
    jobs_run_due()  # the +60 s instant runs 30 s late, at +90 s
    assert runs.instants == [start + 60_000]
    fake_clock.set(start + 95_000)

    install(job_ext(runs, version="2.0.0", every_seconds=30))  # instants +60 s, +90 s, …
    jobs_run_due()

    assert runs.instants == [start + 60_000]
    assert state().next_run_at == start + 120_000


# --- the due sweep ----------------------------------------------------------------------------


def test_a_stopped_extensions_due_job_is_not_handed_out_and_not_run(install, fake_clock, sent):
    """Neither the sweep nor a `run_job` task that arrives anyway touches it: its instant stays
    due for the resume, not counted as missed."""
    install(job_ext(Runs()))
    jobs_run_due()
    first = state().next_run_at
    stop()
    fake_clock.set(first)

    assert jobs_due(limit=10) == []
    assert job_run(job_id=JOB) == "skipped"

    assert (state().next_run_at, state().missed_runs, state().last_outcome) == (first, 0, "")


def test_due_jobs_are_handed_out_oldest_instant_first(install, fake_clock, sent):
    """Past the page's limit, the job due longest goes first, whatever its id."""
    ext = make_ext("alpha")
    add_job(ext, Job("aaa", action=Runs(), every_seconds=60))
    add_job(ext, Job("zzz", action=Runs(), every_seconds=10))
    install(ext)
    jobs_run_due()
    fake_clock.advance(seconds=60)  # both due; zzz since +10 s, aaa since +60 s

    assert jobs_due(limit=1) == ["ext:alpha:zzz"]


def test_running_due_jobs_reports_more_when_the_page_was_full(install, fake_clock, sent):
    """`jobs_run_due` says more may be due when it ran a whole page."""
    runs = Runs()
    ext = make_ext("alpha")
    add_job(ext, Job("tick", action=runs, every_seconds=10))
    add_job(ext, Job("tock", action=runs, every_seconds=10))
    install(ext)
    jobs_run_due()
    fake_clock.advance(seconds=10)

    assert jobs_run_due(limit=1) is True
    assert jobs_run_due(limit=1) is True  # the second job: a full page again
    assert jobs_run_due(limit=1) is False
    assert len(runs.runs) == 2


# --- misfire grace and missed runs ----------------------------------------------------------


def test_an_instant_exactly_its_grace_late_still_runs(install, fake_clock, sent, settings):
    """The grace is inclusive: an instant seen exactly `HOST_JOB_MISFIRE_GRACE_SECONDS` late
    runs."""
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    runs = Runs()
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first + 1_000)

    jobs_run_due()

    assert runs.instants == [first]
    assert state().missed_runs == 0


def test_instants_missed_before_a_late_run_in_its_grace_name_the_one_before_it(
    install, fake_clock, sent
):
    """Of three instants due at once, the latest runs; the two before it are counted, the last
    missed being the one just before the latest."""
    runs = Runs()
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first + 25_000)  # first, +10 s, +20 s

    jobs_run_due()

    assert runs.instants == [first + 20_000]
    assert (state().missed_runs, state().last_missed_at) == (2, first + 10_000)


def test_past_the_grace_the_last_missed_instant_is_the_latest_of_held_and_scheduled_ones(
    install, fake_clock, sent, settings
):
    """A manual run with an instant held from before and scheduled instants due: all past the
    grace, all counted, and the last missed is the latest of them."""
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    runs = Runs()
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first + 25_000)  # first, +10 s, +20 s are due
    now = fake_clock.now_ms()
    JobTrigger.objects.create(
        job_id=JOB, actor=HELD_ACTOR, not_before=now, scheduled_for=first - 10_000
    )
    job_trigger(job_id=JOB, actor="staff")

    assert job_run(job_id=JOB) == "ok"

    assert [r.manual for r in runs.runs] == [True]
    assert (state().missed_runs, state().last_missed_at) == (4, first + 20_000)
    assert not JobTrigger.objects.exists()


# --- coalesced triggers -----------------------------------------------------------------------


def test_a_manual_trigger_due_with_a_retry_runs_as_the_manual_run_now(install, fake_clock, sent):
    """They coalesce into one run: manual, for now, not the retried instant."""
    runs, _ = job_retrying(install, fake_clock, every_seconds=3600)
    runs.fail = None
    fake_clock.advance(seconds=30)  # the retry is due
    job_trigger(job_id=JOB, actor="staff")

    assert job_run(job_id=JOB) == "ok"

    assert [(r.scheduled_for, r.manual) for r in runs.runs] == [(fake_clock.now_ms(), True)]
    assert not JobTrigger.objects.exists()


def test_a_manual_trigger_coalesced_with_a_retry_keeps_the_retrys_attempt(
    install, fake_clock, sent, settings
):
    """The coalesced run carries the highest attempt: a manual trigger does not reset the
    retry bound."""
    settings.HOST_RETRY_LIMIT = 1
    runs = Runs()
    runs.fail = Retry(1, "still down")
    install(job_ext(runs, every_seconds=3600))
    jobs_run_due()
    fake_clock.set(state().next_run_at)
    assert job_run(job_id=JOB) == "retry"
    fake_clock.advance(seconds=1)
    job_trigger(job_id=JOB, actor="staff")

    assert job_run(job_id=JOB) == "failed"

    assert roster("alpha").reason == "job tick defect: retried 1 times: still down"


# --- outcomes and the jobs list ----------------------------------------------------------------


def test_a_failed_run_counts_as_a_run_and_a_failure_in_the_list(install, fake_clock, sent):
    """A failure is counted in `runs` and `failures` and its error shown, until an ok run
    clears the error."""
    runs = Runs()
    runs.fail = CommandError("rejected", "quota at the provider")
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first)
    jobs_run_due()

    row = listed()
    assert (row["runs"], row["failures"], row["last_outcome"]) == (1, 1, "failed")
    assert "quota at the provider" in row["last_error"]

    runs.fail = None
    fake_clock.set(first + 10_000)
    jobs_run_due()

    row = listed()
    assert (row["runs"], row["failures"], row["last_outcome"], row["last_error"]) == (
        2,
        1,
        "ok",
        "",
    )


def test_a_failures_reason_is_bounded(install, fake_clock, sent):
    """The error kept and notified is bounded like every failure reason."""
    runs = Runs()
    runs.fail = CommandError("rejected", "x" * 3000)
    install(job_ext(runs))
    jobs_run_due()
    fake_clock.set(state().next_run_at)

    jobs_run_due()

    assert state().last_outcome == "failed"
    assert len(state().last_error) <= REASON_MAX
    assert len(Notification.objects.get().body) <= REASON_MAX


def test_the_list_shows_missed_runs_last_missed_and_overlap_skips(
    install, fake_clock, sent, settings
):
    settings.HOST_JOB_MISFIRE_GRACE_SECONDS = 1
    runs = Runs(fake_clock, advance_ms=25_000)
    install(job_ext(runs))
    jobs_run_due()
    first = state().next_run_at
    fake_clock.set(first + 15_000)  # first and +10 s are due, the latest 5 s late: missed

    jobs_run_due()  # nothing runs
    fake_clock.set(first + 20_000)
    jobs_run_due()  # first + 20 s runs, 25 s long: +30 s and +40 s are skipped

    row = listed()
    assert runs.instants == [first + 20_000]
    assert (row["missed_runs"], row["last_missed_at"]) == (2, clock.from_ms(first + 10_000))
    assert row["overlap_skips"] == 2


def test_a_job_that_never_ran_lists_no_outcome(install, sent):
    install(job_ext(Runs()))
    jobs_run_due()

    row = listed()
    assert (row["last_outcome"], row["last_run_at"], row["runs"]) == (None, None, 0)


def test_a_pending_retry_is_not_listed_as_the_next_run(install, fake_clock, sent):
    """Only an instant held behind a run is the next run; a retry waiting out its delay is
    not (the list shows the schedule's next instant)."""
    _, first = job_retrying(install, fake_clock)

    assert listed()["next_run_at"] == clock.from_ms(first + 10_000)


def test_of_several_held_instants_the_earliest_is_listed_as_the_next_run(install, fake_clock, sent):
    install(job_ext(Runs(), every_seconds=3600))
    jobs_run_due()
    now = fake_clock.now_ms()
    for at in (now - 1000, now - 2000):
        JobTrigger.objects.create(job_id=JOB, actor=HELD_ACTOR, not_before=now, scheduled_for=at)

    assert listed()["next_run_at"] == clock.from_ms(now - 2000)


def test_the_jobs_list_is_in_id_order(install, sent):
    ext = make_ext("alpha")
    for name in ("zzz", "mmm", "aaa"):
        add_job(ext, Job(name, action=Runs(), every_seconds=10))
    install(ext)

    assert [row["id"] for row in jobs_list()] == [
        "ext:alpha:aaa",
        "ext:alpha:mmm",
        "ext:alpha:zzz",
    ]


def test_getting_an_unknown_job_is_not_found(install, sent):
    install(job_ext(Runs()))

    assert job_get(job_id=JOB)["id"] == JOB
    with pytest.raises(HostError) as raised:
        job_get(job_id="ext:alpha:nope")
    assert raised.value.cause == "not_found"


def test_a_manual_trigger_sends_the_jobs_run_task_after_commit(
    install, sent, django_capture_on_commit_callbacks
):
    install(job_ext(Runs()))

    with django_capture_on_commit_callbacks(execute=True):
        job_trigger(job_id=JOB, actor="staff")

    assert [args for args, _ in sent.of("run_job")] == [(JOB,)]


def test_a_prompt_jobs_request_id_of_exactly_the_bound_names_the_job_in_full(
    install, fake_clock, sent, conversation
):
    """`job:<job id>:<instant>` of exactly 128 characters is kept as it is, not digested."""
    conversation("inbox")
    ext = make_ext("b" * 41)
    add_job(
        ext,
        Job("t" * 64, action=PromptAction(conversation_id="inbox", text="Hi"), every_seconds=10),
    )
    install(ext)
    jobs_run_due()
    row = JobState.objects.get()
    first = row.next_run_at
    fake_clock.set(first)

    jobs_run_due()

    request_id = Submission.objects.get().request_id
    assert request_id == f"job:{row.pk}:{first}"
    assert len(request_id) == 128


# --- idle workers -----------------------------------------------------------------------------


def with_worker(run: Any, **kw: Any) -> Any:
    ext = make_ext("alpha")
    add_worker(ext, Worker("tidy", wake_on=("conversation_archived",), run=run, **kw))
    return ext


def wake(conversation_id: str = "c", name: str = "tidy") -> None:
    worker_wake(
        extension_id="alpha",
        name=name,
        wake=WorkerWake(event="conversation_archived", conversation_id=conversation_id),
    )


def worker_state(name: str = "tidy") -> WorkerState:
    return WorkerState.objects.get(extension_id="alpha", name=name)


def test_the_worker_sweep_sends_no_run_to_a_worker_no_longer_declared(
    install, sent, django_capture_on_commit_callbacks
):
    """A pending wake of a worker the running code does not declare (an upgrade dropped it)
    gets no run task."""
    install(with_worker(lambda ctx, w: None))
    wake(name="gone")  # a row the current declaration has no worker for
    wake()
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        workers_wake_pending()

    assert [args for args, _ in sent.of("run_worker")] == [("alpha", "tidy")]


def test_a_run_whose_extension_stopped_before_its_activation_is_skipped_not_stopped(
    install, sent, monkeypatch
):
    """The stop lands between the check and `activate`: the run is skipped (not a failed
    activation) and its wake waits for the resume."""
    runs: list[str] = []
    ext = with_worker(lambda ctx, w: runs.append(w.conversation_id))
    ext.activate(lambda ctx: None)
    install(ext)
    wake()
    stop()
    monkeypatch.setattr(
        "extensions_host.background.services.workers.eligible_ids", lambda kind, ids: ids
    )  # the check saw it running

    assert worker_run(extension_id="alpha", name="tidy") == "skipped"

    assert runs == []
    assert (roster("alpha").status, roster("alpha").reason) == (ExtensionStatus.STOPPED, "x")
    assert worker_state().pending_wake == {"event": "conversation_archived", "conversation_id": "c"}


def test_a_runs_lease_lasts_its_deadline_and_then_the_grace(install, sent, fake_clock):
    """A run in flight holds the worker for its deadline plus `LEASE_GRACE_MS`, not the grace
    alone: a long run is not taken over while it may still be running."""
    seen: list[str] = []

    def run(ctx: Any, w: WorkerWake) -> None:
        seen.append(w.conversation_id)
        if w.conversation_id == "first":
            raise SystemExit(1)  # it never finishes: its lease is all that is left of it

    install(with_worker(run, deadline_s=100))
    wake("first")
    with pytest.raises(SystemExit):
        worker_run(extension_id="alpha", name="tidy", delivery="task-1")
    wake("second")

    fake_clock.advance(seconds=150)  # past the grace alone, within deadline + grace
    assert worker_run(extension_id="alpha", name="tidy", delivery="other") == "busy"
    fake_clock.advance(seconds=11)  # 161 s: past 100 s + 60 s
    assert worker_run(extension_id="alpha", name="tidy", delivery="other") == "ok"

    assert seen == ["first", "second"]


def test_a_dead_run_is_recorded_from_its_claim_for_as_long_as_it_held_the_worker(
    install, sent, fake_clock
):
    """The redelivery records the dead run as started when it was claimed, lasting until the
    redelivery found it."""

    def run(ctx: Any, w: WorkerWake) -> None:
        raise SystemExit(1)  # its process died mid-run

    install(with_worker(run))
    wake()
    claimed = fake_clock.now_ms()
    with pytest.raises(SystemExit):
        worker_run(extension_id="alpha", name="tidy", delivery="task-1")
    fake_clock.advance(seconds=5)

    assert worker_run(extension_id="alpha", name="tidy", delivery="task-1") == "idle"

    row = worker_state()
    assert (row.last_outcome, row.last_run_at, row.last_duration_ms) == ("failed", claimed, 5_000)


def test_a_run_whose_extension_is_gone_by_the_time_it_runs_fails(install, sent, monkeypatch):
    """No context for the extension's code (its roster row went meanwhile): a failed run, not
    an ok one."""
    runs: list[str] = []
    install(with_worker(lambda ctx, w: runs.append(w.conversation_id)))
    wake()
    monkeypatch.setattr(
        "extensions_host.background.services.workers.detached_context", lambda **kw: None
    )

    assert worker_run(extension_id="alpha", name="tidy") == "failed"

    assert runs == []
    assert worker_state().last_error == "worker tidy: extension is not installed here"


def _not_found(ctx: Any, w: WorkerWake) -> None:
    raise HostError("store", "not_found", "Conversation not found")


def _schema(ctx: Any, w: WorkerWake) -> None:
    raise ProgrammingError("column does not exist")


@pytest.mark.parametrize("run", [_not_found, _schema], ids=["store-not-found", "programming"])
def test_store_errors_other_than_trouble_are_the_runs_failure(install, sent, run):
    """Only `store/unavailable` and transient database errors keep the wake as host trouble;
    another store error or a non-transient database error is a failed, notified run."""
    install(with_worker(run))
    wake()

    assert worker_run(extension_id="alpha", name="tidy") == "failed"

    row = worker_state()
    assert (row.runs, row.last_outcome, row.pending_wake) == (1, "failed", None)
    assert Notification.objects.filter(type="job.failed").count() == 1


def test_a_run_stopped_for_its_crashes_keeps_its_wake_for_the_resume_and_sends_no_run(
    install, sent, monkeypatch, django_capture_on_commit_callbacks
):
    """Past the crash limit the extension is stopped instead of running: the wake is put back
    for the resume, and no run task is sent for it now (it would only be skipped)."""
    runs: list[str] = []

    @contextlib.contextmanager
    def exhausted(**kwargs: Any) -> Iterator[bool]:
        yield True  # `CRASH_LIMIT` earlier runs never finished

    install(with_worker(lambda ctx, w: runs.append(w.conversation_id)))
    wake()
    sent.clear()
    monkeypatch.setattr("extensions_host.background.services.workers.delivery_counted", exhausted)

    with django_capture_on_commit_callbacks(execute=True):
        assert worker_run(extension_id="alpha", name="tidy") == "stopped"

    assert runs == []
    assert sent.of("run_worker") == []
    assert roster("alpha").reason == "worker tidy crashed its worker"
    assert worker_state().pending_wake == {"event": "conversation_archived", "conversation_id": "c"}


def test_a_run_is_recorded_from_its_start_for_as_long_as_it_took(install, sent, fake_clock):
    def run(ctx: Any, w: WorkerWake) -> None:
        fake_clock.advance(seconds=3)  # a run that takes 3 s

    install(with_worker(run))
    wake()
    started = fake_clock.now_ms()

    assert worker_run(extension_id="alpha", name="tidy") == "ok"

    row = worker_state()
    assert (row.last_run_at, row.last_duration_ms) == (started, 3_000)


def test_a_finished_run_without_a_newer_wake_sends_no_further_run(
    install, sent, django_capture_on_commit_callbacks
):
    """Only a wake that arrived during the run asks for the next run."""
    install(with_worker(lambda ctx, w: None))
    wake()
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        assert worker_run(extension_id="alpha", name="tidy") == "ok"

    assert sent.of("run_worker") == []


def test_the_workers_summary_shows_the_pending_wake_and_the_last_runs_start(
    install, sent, fake_clock
):
    install(with_worker(lambda ctx, w: None))
    wake("first")
    started = fake_clock.now_ms()
    assert worker_run(extension_id="alpha", name="tidy") == "ok"
    wake("second")

    (row,) = workers_summary()

    assert row["pending_wake"] == {"event": "conversation_archived", "conversation_id": "second"}
    assert (row["last_run_at"], row["runs"], row["running"]) == (started, 1, False)


def test_a_woken_worker_that_never_ran_lists_no_outcome(install, sent):
    install(with_worker(lambda ctx, w: None))
    wake()  # its state row exists, with no run yet

    (row,) = workers_summary()

    assert (row["last_outcome"], row["last_run_at"], row["runs"]) == (None, None, 0)


def test_a_failed_runs_reason_is_bounded(install, sent):
    def run(ctx: Any, w: WorkerWake) -> None:
        raise RuntimeError("x" * 3000)

    install(with_worker(run))
    wake()

    assert worker_run(extension_id="alpha", name="tidy") == "failed"

    assert worker_state().last_error.startswith("worker tidy defect: xxx")
    assert len(worker_state().last_error) <= REASON_MAX
    assert len(Notification.objects.get().body) <= REASON_MAX


# --- the lifecycle outbox ---------------------------------------------------------------------


class Seen:
    """Lifecycle handlers that record `(kind, payload)` and fail on demand."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.fail: dict[str, BaseException] = {}

    def handlers(self, *kinds: str) -> dict[str, Any]:
        def make(kind: str) -> Any:
            def handle(ctx: Any, event: Any) -> None:
                failure = self.fail.get(kind)
                if failure is not None:
                    raise failure
                self.seen.append((kind, dict(event.data)))

            return handle

        return {kind: make(kind) for kind in kinds}


def record(kind: str, conversation_id: str = "", **payload: Any) -> int:
    return lifecycle_record(kind=kind, conversation_id=conversation_id, payload=payload).pk


def archived_answered_with(install: Any, retry: Retry) -> Seen:
    """`alpha` handles `conversation_archived` with `retry`; one such event is fanned out and
    delivered once."""
    seen = Seen()
    seen.fail["conversation_archived"] = retry
    install(make_ext("alpha", lifecycle=seen.handlers("conversation_archived")))
    record("conversation_archived", "a")
    lifecycle_fanout_all()
    lifecycle_deliver_all(extension_id="alpha")
    return seen


def test_a_fan_out_page_takes_the_oldest_events_and_reports_more(install, sent):
    """Past its limit a fan-out page takes the outbox in id order and says more are waiting."""
    install(make_ext("alpha", lifecycle=Seen().handlers("conversation_archived")))
    first = record("conversation_archived", "a", n=1)
    second = record("conversation_archived", "a", n=2)

    assert lifecycle_fanout(limit=1) == ({"alpha"}, True)
    assert list(LifecycleFanout.objects.values_list("event_id", flat=True)) == [first]
    assert lifecycle_fanout(limit=1) == ({"alpha"}, True)  # a full page: maybe more
    assert lifecycle_fanout(limit=1) == (set(), False)
    assert sorted(LifecycleFanout.objects.values_list("event_id", flat=True)) == [first, second]


def test_events_without_a_conversation_do_not_wait_behind_each_other(install, sent):
    """Per-conversation order holds events of one conversation back; events of none (users
    deleted) are not one conversation: a retried one holds back no other."""
    delivered: list[str] = []

    def on_user_deleted(ctx: Any, event: Any) -> None:
        if event["user"] == "u1":
            raise Retry(10, "later")
        delivered.append(event["user"])

    install(make_ext("alpha", lifecycle={"user_deleted": on_user_deleted}))
    record("user_deleted", user="u1")
    record("user_deleted", user="u2")
    lifecycle_fanout_all()

    lifecycle_deliver_all(extension_id="alpha")

    assert delivered == ["u2"]
    assert LifecycleDelivery.objects.filter(extension_id="alpha").count() == 1


def test_the_consumer_counts_every_event_a_page_delivered(install, sent):
    install(make_ext("alpha", lifecycle=Seen().handlers("conversation_archived")))
    for cid in ("a", "b", "c"):
        record("conversation_archived", cid)
    lifecycle_fanout_all()

    lifecycle_deliver_all(extension_id="alpha")

    assert LifecycleConsumer.objects.get(pk="alpha").delivered == 3


def test_a_page_that_stopped_its_extension_reports_nothing_more(install, sent):
    """A failing handler stops the extension mid-page: the page reports no more deliverable
    events, although it delivered some before."""
    seen = Seen()
    seen.fail["conversation_archived"] = RuntimeError("broken")
    install(
        make_ext("alpha", lifecycle=seen.handlers("conversation_created", "conversation_archived"))
    )
    record("conversation_created", "a")
    record("conversation_archived", "b")
    lifecycle_fanout_all()

    assert lifecycle_deliver(extension_id="alpha") is False

    assert [kind for kind, _ in seen.seen] == ["conversation_created"]
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert LifecycleDelivery.objects.filter(extension_id="alpha").count() == 1


def test_an_extension_whose_lifecycle_grant_was_withdrawn_gets_no_delivery(install, sent):
    """Its pending events wait (the grant may be admitted again); its handler is not called."""
    seen = Seen()
    install(make_ext("alpha", lifecycle=seen.handlers("conversation_archived")))
    record("conversation_archived", "a")
    lifecycle_fanout_all()
    RosterEntry.objects.filter(pk="alpha").update(admitted_grants=["state"])

    assert lifecycle_deliver(extension_id="alpha") is False

    assert seen.seen == []
    assert LifecycleDelivery.objects.filter(extension_id="alpha").count() == 1


def test_an_event_wakes_only_the_workers_that_wake_on_its_kind(install, sent):
    ext = make_ext("alpha")
    add_worker(ext, Worker("tidy", wake_on=("conversation_archived",), run=lambda ctx, w: None))
    add_worker(ext, Worker("greet", wake_on=("conversation_created",), run=lambda ctx, w: None))
    install(ext)
    record("conversation_created", "a")
    lifecycle_fanout_all()

    lifecycle_deliver_all(extension_id="alpha")

    pending = dict(WorkerState.objects.values_list("name", "pending_wake"))
    assert pending == {"greet": {"event": "conversation_created", "conversation_id": "a"}}


def test_a_page_left_full_by_retried_events_still_reports_more(
    install, sent, monkeypatch, settings
):
    """A page with no time left for the next event's whole deadline says so, even when the
    events it ran were all retried (none delivered): the task goes on with the next page."""
    from extensions_host.runtime import pages

    class PageClock:
        now = 1000.0

        def monotonic(self) -> float:
            return self.now

    page_clock = PageClock()
    monkeypatch.setattr(pages, "time", page_clock)
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 300
    delivered: list[str] = []

    def on_created(ctx: Any, event: Any) -> None:
        page_clock.now += 0.25
        if event.conversation_id != "c3":
            raise Retry(10, "later")
        delivered.append(event.conversation_id)

    install(make_ext("alpha", lifecycle={"conversation_created": on_created}))
    for cid in ("c1", "c2", "c3"):
        record("conversation_created", cid)
    lifecycle_fanout_all()

    assert lifecycle_deliver(extension_id="alpha") is True  # c3 left for the next page
    assert delivered == []
    assert lifecycle_deliver(extension_id="alpha") is True
    assert delivered == ["c3"]


def test_lifecycle_retries_are_bounded_and_then_count_as_a_defect(
    install, sent, fake_clock, settings
):
    """Each re-offer carries its attempt: a handler that keeps asking for a `Retry` is a defect
    at the first one past the limit."""
    settings.HOST_RETRY_LIMIT = 1
    archived_answered_with(install, Retry(1, "still down"))
    assert roster("alpha").status == ExtensionStatus.RUNNING
    fake_clock.advance(seconds=1)
    lifecycle_deliver_all(extension_id="alpha")

    assert roster("alpha").reason == "conversation_archived defect: retried 1 times: still down"


def test_a_retried_event_waits_out_its_whole_delay(install, sent, fake_clock):
    seen = archived_answered_with(install, Retry(10, "later"))
    del seen.fail["conversation_archived"]

    fake_clock.advance(seconds=9)
    lifecycle_deliver_all(extension_id="alpha")
    assert seen.seen == []
    fake_clock.advance(seconds=1)
    lifecycle_deliver_all(extension_id="alpha")
    assert [kind for kind, _ in seen.seen] == ["conversation_archived"]


def test_a_delivery_task_out_of_budget_reports_more(install, sent):
    """Its budget spent after a page that delivered, the task asks to be enqueued again."""
    install(make_ext("alpha", lifecycle=Seen().handlers("conversation_archived")))
    record("conversation_archived", "a")
    lifecycle_fanout_all()

    assert lifecycle_deliver_all(extension_id="alpha", budget_s=0) is True
    assert lifecycle_deliver_all(extension_id="alpha", budget_s=0) is False


def test_a_delivery_task_clears_its_kick_so_the_next_event_sends_another(
    install, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", lifecycle=Seen().handlers("conversation_archived")))
    with django_capture_on_commit_callbacks(execute=True):
        record("conversation_archived", "a")
        lifecycle_fanout_all()
    assert [args for args, _ in sent.of("deliver_lifecycle")] == [("alpha",)]

    lifecycle_deliver_all(extension_id="alpha")  # the task runs
    with django_capture_on_commit_callbacks(execute=True):
        record("conversation_archived", "b")
        lifecycle_fanout_all()

    assert [args for args, _ in sent.of("deliver_lifecycle")] == [("alpha",), ("alpha",)]


def test_a_retried_event_is_pending_again_the_moment_its_delay_ends(install, sent, fake_clock):
    """Beat's safety net counts a retried event deliverable at exactly its `not_before`."""
    archived_answered_with(install, Retry(10, "later"))
    assert lifecycle_pending_extensions() == []

    fake_clock.advance(seconds=10)

    assert lifecycle_pending_extensions() == ["alpha"]


def test_a_stopped_subscriber_gets_its_deliveries_but_no_delivery_task(
    install, sent, django_capture_on_commit_callbacks
):
    """Stopped extensions are fanned out to (they catch up after resume); only running ones
    are sent a delivery task."""
    install(
        make_ext("alpha", lifecycle=Seen().handlers("conversation_archived")),
        make_ext("beta", lifecycle=Seen().handlers("conversation_archived")),
    )
    stop("beta")
    record("conversation_archived", "a")

    with django_capture_on_commit_callbacks(execute=True):
        lifecycle_fanout_all()

    assert set(LifecycleDelivery.objects.values_list("extension_id", flat=True)) == {
        "alpha",
        "beta",
    }
    assert [args for args, _ in sent.of("deliver_lifecycle")] == [("alpha",)]


def test_an_event_of_no_conversation_gives_its_handler_nothing_to_read(install, sent):
    """A `user_deleted` event has no conversation: a read is a typed `unavailable` error, not
    a read of a conversation named ""."""
    causes: list[str] = []

    def on_user_deleted(ctx: Any, event: Any) -> None:
        try:
            event.entries()
        except StateError as exc:
            causes.append(exc.kind)

    install(make_ext("alpha", lifecycle={"user_deleted": on_user_deleted}))
    record("user_deleted", user="u1")

    lifecycle_fanout_all()
    lifecycle_deliver_all(extension_id="alpha")

    assert causes == ["unavailable"]


def test_the_prune_is_bounded_per_call_and_drops_the_events_fan_out_marks(
    install, sent, fake_clock
):
    install(make_ext("alpha", lifecycle=Seen().handlers("conversation_archived")))
    for cid in ("a", "b"):
        record("conversation_archived", cid)
    lifecycle_fanout_all()
    lifecycle_deliver_all(extension_id="alpha")
    fake_clock.advance(seconds=2 * 3600)

    assert lifecycle_prune(limit=1) == 1
    assert LifecycleFanout.objects.count() == 1
    assert lifecycle_prune(limit=1) == 1
    assert not LifecycleFanout.objects.exists()


def test_re_saving_an_outbox_event_does_not_kick_the_fan_out(
    install, sent, django_capture_on_commit_callbacks
):
    """Only a new outbox row asks for a fan-out."""
    install(make_ext("alpha", lifecycle=Seen().handlers("conversation_archived")))
    event = lifecycle_record(kind="conversation_archived", conversation_id="a", payload={})
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        event.save()

    assert sent.of("lifecycle_fanout") == []


# --- idle detection ---------------------------------------------------------------------------


def test_a_conversation_is_idle_at_exactly_idle_after_seconds(
    install, conversation, fake_clock, settings, sent
):
    settings.IDLE_AFTER_SECONDS = 60
    install()
    conversation("quiet")
    fake_clock.advance(seconds=60)

    assert conversations_detect_idle() == (1, False)

    (event,) = LifecycleEvent.objects.filter(kind="conversation_idle")
    assert event.payload == {"conversation_id": "quiet", "idle_ms": 60_000}


def test_archived_conversations_take_no_place_in_an_idle_page(
    install, conversation, fake_clock, settings, sent
):
    """The page is filled with candidates only: an archived conversation is not one."""
    settings.IDLE_AFTER_SECONDS = 60
    install()
    conversation("archived")
    conversation("quiet")
    Conversation.objects.filter(pk="archived").update(archived=True)
    fake_clock.advance(seconds=61)

    assert conversations_detect_idle(limit=1) == (1, True)

    assert list(
        LifecycleEvent.objects.filter(kind="conversation_idle").values_list(
            "conversation_id", flat=True
        )
    ) == ["quiet"]


def test_an_unarchive_that_lowered_the_idle_watermark_during_a_sweep_wins(install, sent):
    """The sweep moves the watermark from the value it read only (compare-and-set): a lower
    one an unarchive set meanwhile stays, so the next sweep sees that conversation."""
    Mark.objects.create(name=IDLE_WATERMARK, value=1_000_000)  # what the sweep read
    idle_watermark_lower(activity_at=clock.from_ms(500_000))  # an unarchive meanwhile

    _watermark_advance(read_ms=1_000_000, to_ms=2_000_000)

    assert Mark.objects.get(name=IDLE_WATERMARK).value == 500_000


def test_unarchiving_never_raises_the_idle_watermark(install, sent):
    """An unarchived conversation's activity above the watermark leaves it where it is (the
    scan still covers everything from there)."""
    Mark.objects.create(name=IDLE_WATERMARK, value=500_000)

    idle_watermark_lower(activity_at=clock.from_ms(1_000_000))

    assert Mark.objects.get(name=IDLE_WATERMARK).value == 500_000


def test_the_read_api_refuses_entry_id_zero_and_a_boolean_cursor(install, sent, conversation):
    """An entry id is a positive integer; a page cursor is an entry id, never a bool."""
    kinds: list[str] = []

    def on_archived(ctx: Any, event: Any) -> None:
        for read in (lambda: event.entry(0), lambda: event.entries(after=True)):
            try:
                read()
            except StateError as exc:
                kinds.append(exc.kind)

    install(make_ext("alpha", lifecycle={"conversation_archived": on_archived}))
    conversation("c1")
    record("conversation_archived", "c1")
    lifecycle_fanout_all()

    lifecycle_deliver_all(extension_id="alpha")

    assert kinds == ["bound", "bound"]


# --- shutdown ---------------------------------------------------------------------------------


def test_a_shutdown_gets_at_most_the_worker_default_deadline(install, settings):
    """The process is exiting: an extension's longer `deadline_s` does not let its `shutdown`
    run past the worker default."""
    import time

    from extensions_host.background.services.shutdown import lifecycle_shutdown_all

    settings.HOST_HOOK_DEADLINE_WORKER_MS = 50
    ext = make_ext("alpha", shutdown=lambda ctx: time.sleep(5), deadline_s=20)
    install(ext)
    started = time.monotonic()

    assert lifecycle_shutdown_all() == {"alpha": "timeout"}
    assert time.monotonic() - started < 2


def test_the_read_api_filters_on_withdrawn_and_checks_the_filter(install, sent, conversation):
    from conversations.models import Entry

    texts: list[list[str]] = []
    kinds: list[str] = []

    def on_archived(ctx: Any, event: Any) -> None:
        page = event.entries({"withdrawn": False})
        texts.append([e.content[0]["text"] for e in page.entries])
        try:
            event.entries({"withdrawn": "no"})
        except StateError as exc:
            kinds.append(exc.kind)

    install(make_ext("alpha", lifecycle={"conversation_archived": on_archived}))
    conversation("c1")
    for text, withdrawn in (("kept", False), ("gone", True)):
        Entry.objects.create(
            conversation_id="c1",
            role="user",
            content=[{"type": "text", "text": text}],
            withdrawn=withdrawn,
        )
    record("conversation_archived", "c1")
    lifecycle_fanout_all()

    lifecycle_deliver_all(extension_id="alpha")

    assert (texts, kinds) == ([["kept"]], ["bound"])


def test_the_read_api_takes_every_entry_role_and_no_other(install, sent, conversation):
    from conversations.models import Entry

    roles: list[list[str]] = []
    kinds: list[str] = []

    def on_archived(ctx: Any, event: Any) -> None:
        roles.append([e.role for e in event.entries({"role": "extension"}).entries])
        try:
            event.entries({"role": "nope"})
        except StateError as exc:
            kinds.append(exc.kind)

    install(make_ext("alpha", lifecycle={"conversation_archived": on_archived}))
    conversation("c1")
    for role in ("user", "extension"):
        Entry.objects.create(
            conversation_id="c1", role=role, content=[{"type": "text", "text": role}]
        )
    record("conversation_archived", "c1")
    lifecycle_fanout_all()

    lifecycle_deliver_all(extension_id="alpha")

    assert (roles, kinds) == ([["extension"]], ["bound"])
