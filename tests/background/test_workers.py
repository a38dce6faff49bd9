"""Idle workers: woken by lifecycle events, one run at a time with one coalesced pending wake,
outside any transaction, failures recorded and notified without a stop."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import OperationalError

from core.services import lifecycle_record
from extensions_host.background.declarations import Worker, WorkerWake, add_worker
from extensions_host.background.models import WorkerState
from extensions_host.background.services import workers as workers_service
from extensions_host.background.services.lifecycle import (
    lifecycle_deliver_all,
    lifecycle_fanout_all,
)
from extensions_host.background.services.workers import (
    worker_run,
    worker_wake,
    workers_summary,
    workers_wake_pending,
)
from extensions_host.contributions.models import Notification
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import current_frame
from extensions_host.runtime.deadlines import seconds_left
from extensions_host.sdk import DefinitionError, ExtensionStop, StateError
from extensions_host.services.roster import extension_admit_grants

from .conftest import resume, roster
from .exts import GRANTS, Effect, effects, make_ext


def with_worker(run: Any, *, wake_on: tuple[str, ...] = ("conversation_archived",), **kw: Any):
    ext = make_ext("alpha")
    add_worker(ext, Worker("tidy", wake_on=wake_on, run=run, **kw))
    return ext


def test_a_lifecycle_event_wakes_the_worker_which_runs_outside_a_transaction(install, sent):
    seen: list[tuple[WorkerWake, bool]] = []

    def run(ctx: Any, wake: WorkerWake) -> None:
        seen.append((wake, current_frame() is None))
        ctx.transact(lambda tx: tx.collection("effect").put(Effect(key=wake.conversation_id)))

    install(with_worker(run))
    lifecycle_record(kind="conversation_archived", conversation_id="c7", payload={})
    lifecycle_fanout_all()
    lifecycle_deliver_all(extension_id="alpha")

    assert worker_run(extension_id="alpha", name="tidy") == "ok"

    ((wake, outside_frames),) = seen
    assert outside_frames
    assert wake == WorkerWake(event="conversation_archived", conversation_id="c7")
    assert set(effects("alpha")) == {"c7"}
    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert (state.last_outcome, state.runs, state.pending_wake) == ("ok", 1, None)


def test_wakes_during_a_run_coalesce_into_one_pending_wake_last_wins(
    install, sent, django_capture_on_commit_callbacks
):
    wakes: list[str] = []

    def run(ctx: Any, wake: WorkerWake) -> None:
        wakes.append(wake.conversation_id)
        if len(wakes) == 1:  # two events arrive while this run is in flight
            for cid in ("second", "third"):
                worker_wake(
                    extension_id="alpha",
                    name="tidy",
                    wake=WorkerWake(event="conversation_archived", conversation_id=cid),
                )
            assert worker_run(extension_id="alpha", name="tidy") == "busy"

    install(with_worker(run))
    worker_wake(
        extension_id="alpha",
        name="tidy",
        wake=WorkerWake(event="conversation_archived", conversation_id="first"),
    )
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        assert worker_run(extension_id="alpha", name="tidy") == "ok"
    assert sent.of("run_worker")  # the pending wake asked for the next run
    assert worker_run(extension_id="alpha", name="tidy") == "ok"
    assert worker_run(extension_id="alpha", name="tidy") == "idle"

    assert wakes == ["first", "third"]


def test_a_wake_that_arrived_during_a_run_is_sent_a_run_when_that_run_finishes(
    install, sent, django_capture_on_commit_callbacks
):
    # the wake's own task came while the run was in flight (and found it busy): the finishing
    # run is what sends the next one
    wakes: list[str] = []

    def run(ctx: Any, wake: WorkerWake) -> None:
        wakes.append(wake.conversation_id)
        if len(wakes) == 1:
            worker_wake(
                extension_id="alpha",
                name="tidy",
                wake=WorkerWake(event="conversation_archived", conversation_id="second"),
            )
            assert worker_run(extension_id="alpha", name="tidy") == "busy"  # its task's run

    install(with_worker(run))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        assert worker_run(extension_id="alpha", name="tidy") == "ok"

    # the wake's own task (spent above on a busy worker) and the finishing run's
    assert [args for args, _ in sent.of("run_worker")] == [("alpha", "tidy")] * 2
    assert worker_run(extension_id="alpha", name="tidy") == "ok"
    assert wakes == ["c", "second"]


def test_a_run_past_its_deadline_keeps_its_lease_for_the_grace(install, sent, fake_clock):
    # a run a little past its deadline is still finishing, not dead: no other run takes over
    seen: list[str] = []

    def run(ctx: Any, wake: WorkerWake) -> None:
        seen.append(wake.conversation_id)
        if len(seen) == 1:
            fake_clock.advance(seconds=2)  # its deadline (1 s) has passed
            worker_wake(
                extension_id="alpha", name="tidy", wake=WorkerWake("conversation_created", "second")
            )
            seen.append(worker_run(extension_id="alpha", name="tidy", delivery="other"))

    install(
        with_worker(run, deadline_s=1, wake_on=("conversation_archived", "conversation_created"))
    )
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))

    worker_run(extension_id="alpha", name="tidy", delivery="first")

    assert seen == ["c", "busy"]


def test_a_late_finish_of_a_run_leaves_the_lease_another_run_took_over(install, sent, fake_clock):
    def run(ctx: Any, wake: WorkerWake) -> None:
        # meanwhile this run's lease ran out and another process's run took the worker over
        WorkerState.objects.filter(extension_id="alpha").update(
            running_token="other", running_until=fake_clock.now_ms() + 61_000
        )
        worker_wake(
            extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "d")
        )

    install(with_worker(run))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))

    assert worker_run(extension_id="alpha", name="tidy") == "ok"

    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert state.running_token == "other"
    assert worker_run(extension_id="alpha", name="tidy") == "busy"  # one run at a time


def test_a_failing_run_is_recorded_and_notified_as_job_failed_without_a_stop(install, sent):
    calls: list[int] = []

    def run(ctx: Any, wake: WorkerWake) -> None:
        calls.append(1)
        raise RuntimeError("model unavailable")

    install(with_worker(run))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))

    assert worker_run(extension_id="alpha", name="tidy") == "failed"
    assert worker_run(extension_id="alpha", name="tidy") == "idle"  # not retried in a loop

    assert calls == [1]
    assert roster("alpha").status == ExtensionStatus.RUNNING
    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert state.last_outcome == "failed"
    assert state.last_error == "worker tidy defect: model unavailable"
    note = Notification.objects.get()
    assert (note.type, note.job_id) == ("job.failed", "ext:alpha:worker:tidy")
    assert "model unavailable" in note.body


def test_a_run_over_its_deadline_fails(install, sent):
    def run(ctx: Any, wake: WorkerWake) -> None:
        time.sleep(2)

    install(with_worker(run, deadline_s=0.05))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    started = time.monotonic()

    assert worker_run(extension_id="alpha", name="tidy") == "failed"

    assert time.monotonic() - started < 1.5
    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert state.last_error == "worker tidy exceeded its deadline"


def test_a_run_that_runs_out_of_its_time_inside_transact_fails_and_rolls_back_not_a_stop(
    install, sent
):
    """The transact's deadline is cut to the run's time left (less a margin): running into it
    is the run's overrun, a failed run (spec 03), never the extension's stop."""

    def body(tx):
        tx.collection("effect").put(Effect(key="late"))
        time.sleep(2)  # interrupted at the transact's deadline (SIGALRM on this main thread)

    def run(ctx: Any, wake: WorkerWake) -> None:
        ctx.transact(body)

    install(with_worker(run, deadline_s=0.3))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    started = time.monotonic()

    assert worker_run(extension_id="alpha", name="tidy") == "failed"

    assert time.monotonic() - started < 1.5
    assert roster("alpha").status == ExtensionStatus.RUNNING
    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert state.last_error == "worker tidy exceeded its deadline"
    assert effects("alpha") == {}


def test_a_defect_inside_transact_stops_the_extension_as_in_any_frame(install, sent):
    def run(ctx: Any, wake: WorkerWake) -> None:
        ctx.transact(lambda tx: 1 / 0)

    install(with_worker(run))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))

    assert worker_run(extension_id="alpha", name="tidy") == "failed"
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == "transact defect: division by zero"


async def _async_run(ctx: Any, wake: WorkerWake) -> None:
    return None


def _stops(ctx: Any, wake: WorkerWake) -> None:
    raise ExtensionStop("upstream quota spent")


def _typed(ctx: Any, wake: WorkerWake) -> None:
    raise StateError("conflict", "someone else wrote it")


@pytest.mark.parametrize(
    ("run", "error"),
    [
        (_stops, "upstream quota spent"),  # its own reason, as anywhere else
        (_typed, "worker tidy: StateError: someone else wrote it"),
        (_async_run, "worker tidy defect: returned an awaitable; handlers must be synchronous"),
    ],
    ids=["extension-stop", "typed-error", "async"],
)
def test_a_failed_run_reads_like_any_code_run_outside_a_frame(install, sent, run, error):
    install(with_worker(run))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))

    assert worker_run(extension_id="alpha", name="tidy") == "failed"

    assert WorkerState.objects.get(extension_id="alpha", name="tidy").last_error == error
    assert roster("alpha").status == ExtensionStatus.RUNNING  # a failed run, not a stop


def test_a_run_told_to_exit_re_raises_and_is_recorded_by_the_redelivery(install, sent):
    def run(ctx: Any, wake: WorkerWake) -> None:
        raise SystemExit(1)  # gunicorn/Celery told the process to exit mid-run

    install(with_worker(run))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))

    with pytest.raises(SystemExit):
        worker_run(extension_id="alpha", name="tidy", delivery="task-1")

    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert WorkerState.objects.get(extension_id="alpha", name="tidy").running_token  # in flight
    # the redelivered task (same id) records the cut run and releases the worker at once
    assert worker_run(extension_id="alpha", name="tidy", delivery="task-1") == "idle"
    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert (state.running_token, state.last_outcome) == ("", "failed")
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_stopped_extensions_worker_waits_and_runs_after_resume(
    install, sent, django_capture_on_commit_callbacks
):
    runs: list[str] = []
    install(with_worker(lambda ctx, wake: runs.append(wake.conversation_id)))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")

    assert worker_run(extension_id="alpha", name="tidy") == "skipped"
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        resume("alpha")
    assert [args for args, _ in sent.of("run_worker")] == [("alpha", "tidy")]
    assert worker_run(extension_id="alpha", name="tidy") == "ok"
    assert runs == ["c"]


def test_one_run_at_a_time_a_crashed_runs_lease_expires(install, sent, fake_clock):
    install(with_worker(lambda ctx, wake: None, deadline_s=1))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    WorkerState.objects.filter(extension_id="alpha").update(
        running_token="dead", running_until=fake_clock.now_ms() + 61_000
    )

    assert worker_run(extension_id="alpha", name="tidy") == "busy"
    fake_clock.advance(seconds=62)
    assert worker_run(extension_id="alpha", name="tidy") == "ok"


def test_beats_worker_sweep_runs_a_pending_wake_whose_task_was_lost(
    install, sent, django_capture_on_commit_callbacks
):
    from config.celery import beat_schedule
    from extensions_host.background import tasks

    runs: list[str] = []
    install(with_worker(lambda ctx, wake: runs.append(wake.conversation_id)))
    # its run task is never sent (the test's transaction never commits): as if the broker lost it
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))

    with django_capture_on_commit_callbacks(execute=True):
        tasks.workers_sweep()

    assert [args for args, _ in sent.of("run_worker")] == [("alpha", "tidy")]
    assert worker_run(extension_id="alpha", name="tidy") == "ok"
    assert runs == ["c"]
    assert beat_schedule(tick=1.0)["wake-workers"]["task"] == tasks.workers_sweep.name


def test_the_worker_sweep_leaves_a_wake_to_a_live_run_and_to_a_stopped_extensions_resume(
    install, sent, fake_clock, django_capture_on_commit_callbacks
):
    install(with_worker(lambda ctx, wake: None, deadline_s=1))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    WorkerState.objects.filter(extension_id="alpha").update(
        running_token="live", running_until=fake_clock.now_ms() + 61_000
    )

    with django_capture_on_commit_callbacks(execute=True):
        workers_wake_pending()
    assert sent.of("run_worker") == []  # the run in flight takes it when it finishes

    fake_clock.advance(seconds=62)  # that run's process died: its lease ran out
    with django_capture_on_commit_callbacks(execute=True):
        workers_wake_pending()
    assert [args for args, _ in sent.of("run_worker")] == [("alpha", "tidy")]

    sent.clear()
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")
    with django_capture_on_commit_callbacks(execute=True):
        workers_wake_pending()
    assert sent.of("run_worker") == []


def test_the_worker_sweep_takes_a_page_per_call_and_re_enqueues_itself_for_the_rest(
    install, sent, monkeypatch, django_capture_on_commit_callbacks
):
    from extensions_host.background import tasks

    ext = with_worker(lambda ctx, wake: None)
    add_worker(ext, Worker("file", wake_on=["conversation_archived"], run=lambda ctx, wake: None))
    install(ext)
    for name in ("tidy", "file"):
        worker_wake(extension_id="alpha", name=name, wake=WorkerWake("conversation_archived", "c"))
    tidy, file = (WorkerState.objects.get(name=n).pk for n in ("tidy", "file"))
    monkeypatch.setattr(workers_service, "SWEEP_PAGE", 1)

    with django_capture_on_commit_callbacks(execute=True):
        tasks.workers_sweep()
    assert [args for args, _ in sent.of("run_worker")] == [("alpha", "tidy")]
    assert [args for args, _ in sent.of("workers_sweep")] == [(tidy,)]

    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        tasks.workers_sweep(tidy)
        tasks.workers_sweep(file)  # the full page's follow-up finds nothing more
    assert [args for args, _ in sent.of("run_worker")] == [("alpha", "file")]
    assert [args for args, _ in sent.of("workers_sweep")] == [(file,)]


def test_a_pending_wake_runs_when_its_grant_is_admitted_again(
    install, sent, django_capture_on_commit_callbacks
):
    runs: list[str] = []
    install(with_worker(lambda ctx, wake: runs.append(wake.conversation_id)))
    extension_admit_grants(extension_id="alpha", grants=["state"], actor="staff")
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    assert worker_run(extension_id="alpha", name="tidy") == "skipped"  # the wake waits

    with django_capture_on_commit_callbacks(execute=True):
        extension_admit_grants(extension_id="alpha", grants=sorted(GRANTS), actor="staff")

    assert [args for args, _ in sent.of("run_worker")] == [("alpha", "tidy")]
    assert worker_run(extension_id="alpha", name="tidy") == "ok"
    assert runs == ["c"]


def test_workers_are_listed_with_their_last_run_and_outcome(install, sent):
    install(with_worker(lambda ctx, wake: None))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    worker_run(extension_id="alpha", name="tidy")

    (row,) = workers_summary()

    assert row["id"] == "ext:alpha:worker:tidy"
    assert row["wake_on"] == ["conversation_archived"]
    assert (row["last_outcome"], row["runs"], row["running"]) == ("ok", 1, False)


@pytest.mark.parametrize(
    ("wake_on", "message"),
    [((), "required"), (("shutdown",), "shutdown"), (("nope",), "unknown")],
)
def test_a_worker_needs_a_non_empty_wake_on_without_shutdown(wake_on, message):
    with pytest.raises(DefinitionError, match=message):
        Worker("w", wake_on=wake_on, run=lambda ctx, wake: None)


def test_activate_runs_before_the_first_worker_run_of_a_process(install, sent):
    client: dict[str, str] = {}
    seen: list[str | None] = []
    ext = with_worker(lambda ctx, wake: seen.append(client.get("value")))
    ext.activate(lambda ctx: client.setdefault("value", "connected"))
    install(ext)
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))

    assert worker_run(extension_id="alpha", name="tidy") == "ok"

    assert seen == ["connected"]


def test_a_failing_activate_stops_the_extension_and_its_wake_waits_for_the_resume(install, sent):
    runs: list[str] = []
    broken = {"now": True}

    def activate(ctx: Any) -> None:
        if broken["now"]:
            raise RuntimeError("no credentials")

    ext = with_worker(lambda ctx, wake: runs.append(wake.conversation_id))
    ext.activate(activate)
    install(ext)
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))

    assert worker_run(extension_id="alpha", name="tidy") == "stopped"

    assert runs == []
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == "activation defect: no credentials"
    assert roster("alpha").failing_hook == "activation"
    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert state.pending_wake == {"event": "conversation_archived", "conversation_id": "c"}
    broken["now"] = False
    resume("alpha")
    assert worker_run(extension_id="alpha", name="tidy") == "ok"
    assert runs == ["c"]


# --- host trouble, dead runs, the sweep's tasks ----------------------------------------------


def _store_read_fails(ctx: Any, wake: WorkerWake) -> None:
    ctx.collection("effect").get("k")  # the read meets the host's lost database: store/unavailable


def _host_service_fails(ctx: Any, wake: WorkerWake) -> None:
    raise OperationalError("database is locked")  # from a host service the run called


@pytest.mark.parametrize("run", [_store_read_fails, _host_service_fails], ids=["read", "service"])
def test_store_trouble_in_a_run_keeps_the_wake_and_is_not_the_extensions_failure(
    install, sent, monkeypatch, django_capture_on_commit_callbacks, run
):
    def locked(**kwargs: Any) -> None:
        raise OperationalError("database is locked")

    install(with_worker(run))
    monkeypatch.setattr("extensions_host.services.records.record_get", locked)
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        assert worker_run(extension_id="alpha", name="tidy") == "unavailable"

    assert sent.of("run_worker") == []  # no loop while the database is down: beat's sweep
    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert state.pending_wake == {"event": "conversation_archived", "conversation_id": "c"}
    assert (state.runs, state.last_outcome, state.running_token) == (0, "", "")
    assert not Notification.objects.exists()  # spec 02 §1: host trouble is never its fault
    assert roster("alpha").status == ExtensionStatus.RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        workers_wake_pending()
    assert [args for args, _ in sent.of("run_worker")] == [("alpha", "tidy")]


def test_store_trouble_in_a_run_leaves_a_wake_that_arrived_meanwhile_pending(install, sent):
    def run(ctx: Any, wake: WorkerWake) -> None:
        worker_wake(
            extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "new")
        )
        raise OperationalError("database is locked")

    install(with_worker(run))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "old"))

    assert worker_run(extension_id="alpha", name="tidy") == "unavailable"

    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert state.pending_wake == {"event": "conversation_archived", "conversation_id": "new"}


def test_the_worker_sweep_sends_no_run_to_a_worker_without_a_pending_wake(
    install, sent, django_capture_on_commit_callbacks
):
    install(with_worker(lambda ctx, wake: None))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    assert worker_run(extension_id="alpha", name="tidy") == "ok"
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        workers_wake_pending()

    assert sent.of("run_worker") == []


def test_a_dead_run_whose_lease_ran_out_is_recorded_once_by_the_task_that_takes_over(
    install, sent, fake_clock
):
    runs: list[str] = []

    def run(ctx: Any, wake: WorkerWake) -> None:
        runs.append(wake.conversation_id)
        if wake.conversation_id == "first":
            raise SystemExit(1)  # as if its process died mid-run: it never finishes

    install(with_worker(run, deadline_s=1))
    worker_wake(
        extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "first")
    )
    with pytest.raises(SystemExit):
        worker_run(extension_id="alpha", name="tidy", delivery="task-1")
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "next"))
    assert workers_summary()[0]["running"] is True
    fake_clock.advance(seconds=62)  # the lease (deadline + grace) ran out; no redelivery came
    assert workers_summary()[0]["running"] is False

    assert worker_run(extension_id="alpha", name="tidy", delivery="sweep-task") == "ok"
    assert worker_run(extension_id="alpha", name="tidy", delivery="task-1") == "idle"  # late

    assert runs == ["first", "next"]
    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert (state.runs, state.last_outcome, state.running_token) == (2, "ok", "")
    (note,) = Notification.objects.all()
    assert (note.type, note.body) == ("job.failed", "worker tidy crashed its worker")


def test_a_dead_runs_lease_that_ran_out_is_recorded_even_when_no_wake_is_pending(
    install, sent, fake_clock
):
    install(with_worker(lambda ctx, wake: None, deadline_s=1))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    WorkerState.objects.filter(extension_id="alpha").update(
        pending_wake=None,
        running_token="dead",
        running_since=fake_clock.now_ms(),
        running_until=fake_clock.now_ms() + 61_000,
    )
    fake_clock.advance(seconds=62)

    assert worker_run(extension_id="alpha", name="tidy") == "idle"
    assert worker_run(extension_id="alpha", name="tidy") == "idle"

    state = WorkerState.objects.get(extension_id="alpha", name="tidy")
    assert (state.runs, state.last_outcome, state.running_token) == (1, "failed", "")
    assert Notification.objects.filter(type="job.failed").count() == 1


def test_the_run_tasks_the_worker_sweep_sends_expire_unrun_under_a_backlog(
    install, sent, django_capture_on_commit_callbacks
):
    install(with_worker(lambda ctx, wake: None))
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        workers_wake_pending()

    # a wake whose task is merely queued gets one more each sweep: they expire, not pile up
    assert sent.of("run_worker") == [
        (("alpha", "tidy"), {"expires": workers_service.SWEEP_RUN_EXPIRES_S})
    ]
    assert 30 < workers_service.SWEEP_RUN_EXPIRES_S <= 300


# --- the run's deadline: the one rule of every hook ---------------------------------------------


def deadline_of_a_run(
    *, ext_deadline_s: float | None = None, **worker: Any
) -> tuple[Any, list[float]]:
    """An extension declared with `ext_deadline_s` whose worker records the seconds its run has
    when it starts (install it, then `run_once`)."""
    left: list[float] = []
    ext = make_ext("alpha", deadline_s=ext_deadline_s)
    add_worker(
        ext,
        Worker(
            "tidy",
            wake_on=["conversation_archived"],
            run=lambda ctx, wake: left.append(seconds_left()),
            **worker,
        ),
    )
    return ext, left


def run_once(left: list[float]) -> float:
    worker_wake(extension_id="alpha", name="tidy", wake=WorkerWake("conversation_archived", "c"))
    assert worker_run(extension_id="alpha", name="tidy") == "ok"
    [seconds] = left
    return seconds


def test_a_run_gets_its_extensions_deadline_s(install, sent, settings):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 100
    ext, left = deadline_of_a_run(ext_deadline_s=2)
    install(ext)
    assert 1.9 < run_once(left) <= 2


def test_a_run_gets_the_staff_deadline_override_of_its_extension(install, sent):
    ext, left = deadline_of_a_run()
    install(ext)
    RosterEntry.objects.filter(pk="alpha").update(deadline_seconds=120)
    assert 119 < run_once(left) <= 120


def test_a_workers_own_deadline_s_comes_before_its_extensions(install, sent):
    ext, left = deadline_of_a_run(ext_deadline_s=60, deadline_s=7)
    install(ext)
    assert 6 < run_once(left) <= 7
