"""Declared jobs (grant `timers`, spec 03): cron (croniter) or every N seconds; a task action
(the extension's function, in its own frame) or a prompt action (a submission into a named
conversation, needs `send` too). Ids `ext:<extension>:<name>`.

Beat's sweep hands each due job to a `run_job` task of its own (`jobs_dispatch_due`), so every
job has its task's whole time limit. A run is one group-commit page: the job's row is locked
(`FOR NO KEY UPDATE SKIP LOCKED`, so a job never runs twice at once and two beats never run one
instant twice), its due instants are counted, the action runs in a savepoint frame, and the
row's next instant, outcome and counters commit together with the action's effects. A crash
rolls all of it back; the next sweep runs the instant again (within the grace) or counts it as
missed.

- **Missed runs**: of the instants due when the sweep sees them, the latest runs and the older
  ones are counted (`missed_runs`, `last_missed_at`); so is the latest when it is older than
  `HOST_JOB_MISFIRE_GRACE_SECONDS` (the host or the extension was down), unless
  `catch_up="once"` runs it. `next_run_at` never moves past an instant without running,
  counting or holding it.
- **Overlap**: instants that came due while a run (any run) held the job are skipped and
  counted (`overlap_skips`, `overlap="skip"`, default), or the latest of them runs right after
  (`buffer_one`) and the others are counted.
- **Triggers** (a manual run, a `Retry`'s re-offer) take the run; the scheduled instant due at
  the same time is held behind it (a `JobTrigger` row of `HELD_ACTOR`) and runs on the next
  sweep, alone, as a scheduled run; a trigger due then runs first and it stays held (or is
  counted, when a later instant came due meanwhile: that one is held instead).
- An instant that waited for a run of the job (held, or buffered) has its misfire grace counted
  from that run's end, not from when it came due: however long the run took, it runs after it.
- A failed run (a typed error, a defect, a refused prompt) records the outcome and emits a
  `job.failed` notification; a defect also stops the extension (frame rules); `Retry` re-offers
  the run after its delay (bounded like every retry).
- **A changed schedule** (an upgrade declares another `schedule`/`every_seconds`) takes effect
  when a process running the new declaration first sees the job (the row keeps the schedule
  its `next_run_at` follows): old instants that came due and did not run are dealt with as
  missed runs are (the latest runs in its grace or with `catch_up="once"`, the others are
  counted), else the new schedule's latest instant within the grace runs at once; then the
  new schedule's instants follow (`_schedule_move`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import math
import re
from dataclasses import dataclass
from typing import Any, cast

from croniter import croniter
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, Min, OuterRef, Q

from core import clock
from core.errors import MSG_NOT_FOUND, HostError
from core.services import audit_record
from extensions_host import registry
from extensions_host.background.declarations import Job, JobRun, PromptAction, job_id, jobs_of
from extensions_host.background.models import HELD_ACTOR, JobState, JobTrigger, Outcome
from extensions_host.background.services.common import (
    eligible_ids,
    enqueue,
    enqueue_call,
    page_with_retries,
)
from extensions_host.background.services.notifications import job_failed_notify
from extensions_host.contributions.outside import extension_available
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import FrameOutcome, FramePage, HookContext, run_frame
from extensions_host.runtime.stops import bounded_reason
from extensions_host.runtime.transient import with_transient_retries
from extensions_host.sdk import DefinitionError
from extensions_host.surfaces.services.send import send_admit
from extensions_host.surfaces.types import REQUEST_ID_MAX, Accepted

SWEEP_PAGE = 16
# due jobs handed out to their own tasks per tick (beat's next tick hands out the rest)
DISPATCH_PAGE = 256
# iterating a cron expression over a long outage is bounded; past it the count is a floor
COUNT_CAP = 100_000

MSG_JOB_NOT_FOUND = "Job not found"


# --- schedule arithmetic (epoch ms, UTC) ---------------------------------------------------


def next_after(job: Job, after_ms: int) -> int:
    """The first scheduled instant strictly after `after_ms`."""
    if job.every_seconds is not None:
        period = job.every_seconds * 1000
        return (after_ms // period + 1) * period
    assert job.schedule is not None
    base = clock.from_ms(after_ms)
    return round(croniter(job.schedule, base).get_next(float) * 1000)


def instants_between(job: Job, start_ms: int, end_ms: int) -> tuple[int, int | None, int | None]:
    """(count, first, last) of scheduled instants `t` with `start_ms <= t <= end_ms`."""
    if end_ms < start_ms:
        return 0, None, None
    first: int | None
    if job.every_seconds is not None:
        period = job.every_seconds * 1000
        first = -(-start_ms // period) * period
        if first > end_ms:
            return 0, None, None
        count = (end_ms - first) // period + 1
        return count, first, first + (count - 1) * period
    count, first, last = 0, None, None
    cursor = next_after(job, start_ms - 1)
    while cursor <= end_ms and count < COUNT_CAP:
        count += 1
        first = cursor if first is None else first
        last = cursor
        cursor = next_after(job, cursor)
    return count, first, last


# --- declarations and state ------------------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    job_id: str
    loaded: LoadedExtension
    job: Job


def jobs_declared() -> dict[str, Declared]:
    """Every job of every extension loaded here, by id."""
    found: dict[str, Declared] = {}
    for extension_id, loaded in registry.loaded().items():
        for job in jobs_of(loaded.definition):
            jid = job_id(extension_id, job.name)
            found[jid] = Declared(job_id=jid, loaded=loaded, job=job)
    return found


def jobs_ensure(declared: dict[str, Declared]) -> None:
    """A newly declared job gets a row whose first run is its next instant (never at once); a
    job declared with another schedule than its row follows moves to it (`_schedule_move`)."""
    if not declared:
        return
    known = dict(JobState.objects.filter(pk__in=list(declared)).values_list("pk", "schedule"))
    now = clock.now_ms()
    JobState.objects.bulk_create(
        [
            JobState(
                id=item.job_id,
                extension_id=item.loaded.id,
                name=item.job.name,
                next_run_at=next_after(item.job, now),
                schedule=item.job.schedule_text,
            )
            for item in declared.values()
            if item.job_id not in known
        ],
        ignore_conflicts=True,
    )
    moved = {
        jid: item
        for jid, item in declared.items()
        if jid in known and known[jid] != item.job.schedule_text
    }
    if moved:
        _schedules_move(moved)


def _schedules_move(moved: dict[str, Declared]) -> None:
    """Move these jobs' rows to their declared schedule, each re-read under its lock. A row a
    run holds right now is skipped (`SKIP LOCKED`: beat's sweep never waits for a run): the
    next sweep, or that job's next run task, moves it."""
    with transaction.atomic():
        rows = JobState.objects.select_for_update(no_key=True, skip_locked=True).filter(
            pk__in=list(moved)
        )
        for row in rows:
            job = moved[row.pk].job
            if row.schedule == job.schedule_text:
                continue  # moved meanwhile by another process
            if not row.schedule and _on_schedule(job, row.next_run_at):
                # a row older than the `schedule` column, already on this schedule: adopt it
                row.schedule = job.schedule_text
                row.save(update_fields=["schedule", "updated_at"])
                continue
            _schedule_move(row, job, clock.now_ms())


def _schedule_move(row: JobState, job: Job, now: int) -> None:
    """Move `next_run_at` from the schedule the row followed to `job`'s (an upgrade changed
    it). The change counts from when a process running the new declaration first sees the job
    (beat's job sweep, every tick), late by at most the misfire grace, like any instant:

    - instants of the old schedule that came due and did not run are dealt with as the sweep
      would have: the latest runs (held, as an instant behind a run is) while in its grace or
      with `catch_up="once"`, the others are counted as missed; the new schedule then starts at
      its next instant;
    - otherwise the new schedule's latest instant within the grace (and after the job's last
      run) runs at once, as an instant the sweep saw late; without one, its next instant.

    `next_run_at` never lands on an instant the new schedule does not have."""
    pointer = row.next_run_at
    if pointer is not None and pointer <= now:
        old = _declared_as(job, row.schedule) if row.schedule else None
        # a schedule that cannot be read back: only the instant the row points at is known
        count, _, last = (
            instants_between(old, pointer, now) if old is not None else (1, pointer, pointer)
        )
        waiting = _due_run(row, old or job, now, count=count, last=last)
        if waiting is not None:
            _hold(row, waiting, not_before=now)
        row.next_run_at = next_after(job, now)
    else:
        grace_ms = settings.HOST_JOB_MISFIRE_GRACE_SECONDS * 1000
        since = max(now - grace_ms, row.last_run_at or 0, row.last_scheduled_for or 0)
        _, _, last = instants_between(job, since + 1, now)
        row.next_run_at = last if last is not None else next_after(job, now)
    row.schedule = job.schedule_text
    row.save()


_EVERY = re.compile(r"every (\d+)s")


def _declared_as(job: Job, schedule: str) -> Job | None:
    """`job` as declared with `schedule` (a `Job.schedule_text`); None when it does not read
    back as a schedule."""
    every = _EVERY.fullmatch(schedule)
    try:
        if every is not None:
            return dataclasses.replace(job, schedule=None, every_seconds=int(every[1]))
        return dataclasses.replace(job, schedule=schedule, every_seconds=None)
    except DefinitionError:
        return None


def _on_schedule(job: Job, instant: int | None) -> bool:
    """Whether `instant` is one of the job's scheduled instants."""
    return instant is not None and next_after(job, instant - 1) == instant


# --- the sweep and one run -------------------------------------------------------------------


def jobs_due(*, limit: int, lock: bool = False) -> list[str]:
    """Ids of the due jobs (a due instant or a manual trigger) of running, timer-granted
    extensions, oldest first; new declarations get their row (first run: their next instant).
    `lock` (inside a transaction): rows taken `FOR NO KEY UPDATE SKIP LOCKED`, so a job running
    right now (its run holds its row) is left out."""
    running = set(eligible_ids("timers"))
    declared = {k: v for k, v in jobs_declared().items() if v.loaded.id in running}
    if not declared:
        return []
    jobs_ensure(declared)
    now = clock.now_ms()
    triggered = JobTrigger.objects.filter(job=OuterRef("pk"), not_before__lte=now)
    due = (
        JobState.objects.filter(pk__in=list(declared))
        .filter(Q(next_run_at__lte=now) | Exists(triggered))
        .order_by("next_run_at", "pk")
    )
    if lock:
        due = due.select_for_update(no_key=True, skip_locked=True)
    return list(due.values_list("pk", flat=True)[:limit])


def jobs_dispatch_due(*, limit: int = DISPATCH_PAGE) -> list[str]:
    """Beat's job sweep (the `run_jobs` task, every tick): hand each due job to a `run_job`
    task of its own, after commit, and run none here. One task runs one job, so each job has
    its task's whole time limit (one task running several jobs in a row would share one limit,
    and hitting it inside a later job's frame would read as that job overrunning its
    deadline). A job still due at the next tick (its task has not run yet) is handed out
    again: `job_run` is safe against duplicate tasks (`busy` while one runs, `idle` after).
    Returns the ids handed out; past `limit`, the next tick hands out the rest."""
    from extensions_host.background import tasks

    def step() -> list[str]:
        with transaction.atomic(durable=True):
            due = jobs_due(limit=limit, lock=True)
            for jid in due:
                enqueue_call(tasks.run_job.delay, jid)
            return due

    return with_transient_retries(step)


def jobs_run_due(*, limit: int = SWEEP_PAGE) -> bool:
    """Run due jobs one after another in this process: the author harness
    (`TestHost.run_jobs`) and tests, where no task time limit is shared. Celery never runs
    this: its sweep is `jobs_dispatch_due`. Returns True when more may be due."""
    due = jobs_due(limit=limit)
    for jid in due:
        job_run(job_id=jid)
    return len(due) == limit


def job_run(*, job_id: str) -> str:
    """Run one job if it is due or triggered. Returns `ok`, `failed`, `retry`, `busy` (running
    elsewhere), `idle` (nothing due), `skipped` (extension not running here)."""
    declared = jobs_declared().get(job_id)
    if declared is None or not eligible_ids("timers", ids=[declared.loaded.id]):
        return "skipped"
    jobs_ensure({job_id: declared})
    # the action is the page's only frame: it starts whatever its deadline (the job's
    # `deadline_s`, else the extension's or the staff override, else the worker default)
    return page_with_retries(lambda page: _run_locked(page, declared))


def _run_locked(page: FramePage, declared: Declared) -> str:
    job = declared.job
    row = (
        JobState.objects.select_for_update(no_key=True, skip_locked=True)
        .filter(pk=declared.job_id)
        .first()
    )
    if row is None:
        return "busy"  # running right now (another worker holds the row)
    now = clock.now_ms()
    offered = list(
        JobTrigger.objects.filter(job_id=row.pk, not_before__lte=now).order_by("not_before", "pk")
    )
    count, _, last = (
        instants_between(job, row.next_run_at, now)
        if row.next_run_at is not None and row.next_run_at <= now
        else (0, None, None)
    )
    if count == 0 and not offered:
        return "idle"
    held = sorted((t for t in offered if t.held), key=lambda t: (t.scheduled_for, t.pk))
    triggers = [t for t in offered if not t.held]
    attempt = 0
    run: JobRun | None
    if triggers:
        # a manual run or a `Retry` re-offer takes this run; the scheduled instants due too
        # (those held behind earlier runs included) wait behind it: the latest is held
        run, attempt = _trigger_run(row, triggers, now)
        waiting = _due_run(row, job, now, count=count, last=last, held=held)
        consumed = triggers + held
    else:
        # an instant held behind an earlier run goes first, alone; the scheduled instants due
        # now wait behind it in turn
        consumed = held[:1]
        run = _due_run(row, job, now, count=0, last=None, held=consumed)
        waiting = _due_run(row, job, now, count=count, last=last)
        if run is None:
            run, waiting = waiting, None
    status = "idle"
    if run is not None:
        outcome = _run_action(page, declared, run, attempt)
        status = _record(row, declared, run, outcome, now, attempt)
    JobTrigger.objects.filter(pk__in=[t.pk for t in consumed]).delete()
    finished = clock.now_ms()
    row.next_run_at = (
        _after_overlap(row, job, now, finished) if run is not None else next_after(job, now)
    )
    if waiting is not None:
        _hold(row, waiting, not_before=finished)
    row.save()
    return status


def _trigger_run(row: JobState, triggers: list[JobTrigger], now: int) -> tuple[JobRun, int]:
    """The run the due triggers ask for (they coalesce into one): a manual run now, else the
    retry of the instant it re-offers; and its retry attempt."""
    retry = next((t for t in triggers if t.scheduled_for is not None), None)
    manual = any(t.scheduled_for is None for t in triggers)
    scheduled = retry.scheduled_for if retry is not None and not manual else now
    run = JobRun(job_id=row.pk, scheduled_for=scheduled or now, fired_at=now, manual=manual)
    return run, max(t.retry_attempt for t in triggers)


def _hold(row: JobState, run: JobRun, *, not_before: int) -> None:
    """Keep a scheduled run that could not start now for the job's next turn (a `HELD_ACTOR`
    trigger: it carries the instant and the missed runs counted with it)."""
    JobTrigger.objects.create(
        job_id=row.pk,
        actor=HELD_ACTOR,
        not_before=not_before,
        scheduled_for=run.scheduled_for,
        missed_runs=run.missed_runs,
    )


def _due_run(
    row: JobState,
    job: Job,
    now: int,
    *,
    count: int,
    last: int | None,
    held: list[JobTrigger] | None = None,
) -> JobRun | None:
    """The run of the latest due scheduled instant while it is in its misfire grace (or as the
    catch-up run, `catch_up="once"`); the older ones, and the latest past its grace, are
    counted as missed. Due: the instants `held` behind earlier runs (each carries the instants
    counted when it was held), then `count` of the schedule, the latest `last`.

    The grace starts when the instant came due or, for one that waited for the job's last run
    (held behind it, or buffered by `buffer_one`), when that run ended: it waited for the job,
    not for a host that was down."""
    held = held or []
    instants = [t.scheduled_for for t in held if t.scheduled_for is not None]
    if last is not None:
        instants.append(last)
    if not instants:
        return None
    latest = instants[-1]
    released = (row.last_run_at or 0) + (row.last_duration_ms or 0)
    in_grace = now - max(latest, released) <= settings.HOST_JOB_MISFIRE_GRACE_SECONDS * 1000
    missed = len(held) + count - (1 if in_grace else 0)
    if missed:
        row.missed_runs += missed
        if not in_grace:
            row.last_missed_at = latest
        else:  # the instant before the latest
            row.last_missed_at = _previous(job, latest, row) if count > 1 else instants[-2]
    if not in_grace and job.catch_up != "once":
        return None
    carried = sum(t.missed_runs for t in held)
    return JobRun(job_id=row.pk, scheduled_for=latest, fired_at=now, missed_runs=missed + carried)


def _previous(job: Job, last: int, row: JobState) -> int | None:
    """The instant before `last` (the latest missed one when `last` itself still runs)."""
    if row.next_run_at is None:
        return None
    return instants_between(job, row.next_run_at, last - 1)[2]


def _after_overlap(row: JobState, job: Job, started: int, finished: int) -> int:
    """The next instant after a run from `started` to `finished`: instants that came due while
    the run held the job are skipped and counted (`skip`), or the latest of them is run right
    after (`buffer_one`: it is the next instant, due now), the others counted."""
    count, _, last = instants_between(job, started + 1, finished)
    if count and job.overlap == "buffer_one":
        row.overlap_skips += count - 1
        assert last is not None
        return last
    row.overlap_skips += count
    return next_after(job, max(started, finished))


def _run_action(page: FramePage, declared: Declared, run: JobRun, attempt: int) -> FrameOutcome:
    job = declared.job
    action = job.action

    if isinstance(action, PromptAction):

        def call(ctx: HookContext) -> Any:
            return _prompt(ctx, action, run)

    else:

        def call(ctx: HookContext) -> Any:
            return action(ctx, run)

    return run_frame(
        extension_id=declared.loaded.id,
        hook=f"job {job.name}",
        call=call,
        failures="return",
        boundary="worker",
        deadline_s=job.deadline_s,
        page=page,
        retry_attempt=attempt,
        item=f"{run.scheduled_for}",
    )


def _prompt(ctx: HookContext, action: PromptAction, run: JobRun) -> dict[str, Any]:
    """`ctx.send`'s one rule (a missing conversation is created, the same errors and send
    rate); its request id names the run, so a re-run of the same instant admits nothing new."""
    # queued when busy (the default `when_busy`): `NotReady` is for "reject" only
    accepted = cast(
        Accepted,
        send_admit(
            extension_id=ctx.extension_id,
            grants=ctx.grants,
            conversation_id=action.conversation_id,
            prompt={
                "request_id": _request_id(run),
                "text": action.text,
            },
            correlation=run.job_id,
        ),
    )
    return {"submission_id": accepted.submission_id}


def _request_id(run: JobRun) -> str:
    """`job:<job id>:<instant>`; a job id too long for the bound is named by its digest, so the
    instant, which tells one run's prompt from the next, is never cut off."""
    suffix = f":{run.scheduled_for}"
    request_id = f"job:{run.job_id}{suffix}"
    if len(request_id) <= REQUEST_ID_MAX:
        return request_id
    return f"job:{hashlib.sha256(run.job_id.encode()).hexdigest()[:40]}{suffix}"


def _record(
    row: JobState,
    declared: Declared,
    run: JobRun,
    outcome: FrameOutcome,
    started: int,
    attempt: int,
) -> str:
    extension_id = declared.loaded.id
    row.last_run_at = started
    row.last_scheduled_for = run.scheduled_for
    row.last_duration_ms = max(clock.now_ms() - started, 0)
    if outcome.status == "ok":
        row.runs += 1
        row.last_outcome = Outcome.OK
        row.last_error = ""
        return "ok"
    if outcome.status == "retry":
        JobTrigger.objects.create(
            job_id=row.pk,
            actor="retry",
            not_before=clock.now_ms() + math.ceil((outcome.retry_after or 1) * 1000),
            scheduled_for=run.scheduled_for,
            retry_attempt=attempt + 1,
        )
        return "retry"
    if outcome.status == "skipped":
        # stopped (or another revision) between the sweep and the frame: the instant is lost,
        # so it is counted
        row.missed_runs += 1
        row.last_missed_at = run.scheduled_for
        row.last_outcome = Outcome.SKIPPED
        return "skipped"
    reason = outcome.reason or (outcome.error.message if outcome.error else "failed")
    reason = bounded_reason(reason, extension_id)
    row.runs += 1
    row.failures += 1
    row.last_outcome = Outcome.FAILED
    row.last_error = reason
    job_failed_notify(
        title=f"Job {declared.job.name} of {extension_id} failed",
        body=reason,
        job_id=row.pk,
    )
    return "failed"


# --- manual trigger --------------------------------------------------------------------------


def job_trigger(*, job_id: str, actor: str) -> JobTrigger:
    """Staff run a job now (admin action, `POST /v1/jobs/{id}/trigger`). The run respects the
    overlap rule: while the job runs, the trigger waits for it. A job of an extension that may
    not run it now is 503 `extensions/unavailable`, as its commands are (stopped: the reason)."""
    declared = jobs_declared().get(job_id)
    if declared is None:
        raise HostError("store", "not_found", MSG_JOB_NOT_FOUND)
    extension_available(extension_id=declared.loaded.id, grant="timers")
    jobs_ensure({job_id: declared})
    with transaction.atomic(durable=True):
        trigger = JobTrigger.objects.create(job_id=job_id, actor=actor, not_before=clock.now_ms())
        audit_record(actor=actor, action="job_triggered", target=job_id)
        from extensions_host.background import tasks

        enqueue(lambda: tasks.run_job.delay(job_id))
    return trigger


# --- reads -----------------------------------------------------------------------------------


def jobs_list() -> list[dict[str, Any]]:
    """Every declared job with its schedule, next/last run, outcome and missed runs."""
    declared = jobs_declared()
    states = JobState.objects.in_bulk(list(declared))
    # an instant held behind a run is the next run (due now), before `next_run_at`
    held = dict(
        JobTrigger.objects.filter(
            job_id__in=list(declared), actor=HELD_ACTOR, scheduled_for__isnull=False
        )
        .values("job_id")
        .annotate(first=Min("scheduled_for"))
        .values_list("job_id", "first")
    )
    rows = []
    for jid, item in sorted(declared.items()):
        state = states.get(jid)
        pending = (state.next_run_at if state else None, held.get(jid))
        next_run = min((at for at in pending if at is not None), default=None)
        rows.append(
            {
                "id": jid,
                "extension_id": item.loaded.id,
                "name": item.job.name,
                "schedule": item.job.schedule_text,
                "action": item.job.action_kind,
                "overlap": item.job.overlap,
                "catch_up": item.job.catch_up,
                "next_run_at": _at(next_run),
                "last_run_at": _at(state.last_run_at if state else None),
                "last_outcome": (state.last_outcome or None) if state else None,
                "last_error": state.last_error if state else "",
                "runs": state.runs if state else 0,
                "failures": state.failures if state else 0,
                "missed_runs": state.missed_runs if state else 0,
                "last_missed_at": _at(state.last_missed_at if state else None),
                "overlap_skips": state.overlap_skips if state else 0,
            }
        )
    return rows


def job_get(*, job_id: str) -> dict[str, Any]:
    for row in jobs_list():
        if row["id"] == job_id:
            return row
    raise HostError("store", "not_found", MSG_NOT_FOUND)


def _at(ms: int | None) -> dt.datetime | None:
    return None if ms is None else clock.from_ms(ms)
