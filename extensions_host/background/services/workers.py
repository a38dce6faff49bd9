"""Idle workers (grant `lifecycle`, spec 03).

A lifecycle event of a kind in a worker's `wake_on` sets the worker's one pending wake (last
wins) in the delivering frame and, after commit, enqueues a run. A run claims the worker row
(compare-and-set on a token with a lease, so one run at a time across the cluster), takes the
pending wake, and calls `run(ctx, wake)` **outside** any transaction (it may call slow
services; it writes through `ctx.transact`, whose defects stop the extension as in any frame).
Before its first run in a process (and again after a resume or a new revision) the extension's
`activate` runs, as before a frame; a failing one stops the extension and the wake waits for
the resume. A run that raises or overruns its deadline is recorded as failed and notified as
`job.failed`, not retried in a loop and not a stop by itself. A run that meets the host's store
trouble (spec 02 §1: never the extension's fault) is neither: its wake is put back. A wake that
arrived during the run is taken by the next run, enqueued when this one finishes. A pending wake
whose run task never comes (lost, or skipped while the extension was stopped or ungranted, or
put back after store trouble) is re-driven by a resume, by its grant admitted again, and by
beat's worker sweep (`workers_wake_pending`).

A run that kills its process (segfault, `os._exit`, out of memory) never reaches its finish:
- its task is redelivered (acks late, reject on worker lost) with the same task id, which is the
  claim token, so the redelivery recognises its own dead run: it records it as failed (`<hook>
  crashed its worker`), releases the lease at once instead of leaving the worker blocked until
  the lease expires, and takes the pending wake if there is one; a run of another task (the
  sweep's) that comes once the lease ran out does the same, and the late redelivery then finds
  nothing to record;
- its runs are counted outside the database (`crashes.py`, one count per worker: the wake a dead
  run took is not run again): a run that finds `CRASH_LIMIT` earlier runs that never finished
  stops the extension with `worker <name> crashed its worker` instead of running, and puts its
  wake back for the resume. A run that finishes, however (ok or failed), clears the count.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from hashlib import sha256
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, transaction

from core import clock
from core.db import is_transient
from core.errors import HostError
from extensions_host import registry
from extensions_host.background.declarations import Worker, WorkerWake, workers_of
from extensions_host.background.models import Outcome, WorkerState
from extensions_host.background.services.common import eligible_ids, enqueue, enqueue_call
from extensions_host.background.services.notifications import job_failed_notify
from extensions_host.runtime import detached_context, extension_stop
from extensions_host.runtime.crashes import crashed_reason, delivery_counted
from extensions_host.runtime.current import PROCESS_EXIT
from extensions_host.runtime.frames import hook_deadline
from extensions_host.runtime.outside import activate_outside, bounded, outside_reason
from extensions_host.runtime.roster_rows import roster_view
from extensions_host.runtime.stops import bounded_reason
from extensions_host.runtime.transient import with_transient_retries

if TYPE_CHECKING:
    from extensions_host.background.models import LeasedWorkerState

logger = logging.getLogger("extensions_host.background")

# a run whose process died is given up (and the worker runnable again) this long after its
# deadline
LEASE_GRACE_MS = 60_000


# the crash count of a worker: one per worker, not per wake (a dead run's wake is not re-run)
CRASH_ITEM = "run"

# worker rows per call of the pending-wake sweep (the task re-enqueues itself for the rest)
SWEEP_PAGE = 256
# A run task this sweep sends expires unrun after this long in the queue: a wake whose task is
# merely queued looks like one whose task was lost, so under a broker backlog every sweep (each
# 30 s) sends it one more; with the expiry at most a few stay queued per wake, and the next
# sweep sends a fresh one while the wake is still pending. A wake's own task never expires.
SWEEP_RUN_EXPIRES_S = 120.0


def worker_id(extension_id: str, name: str) -> str:
    return f"ext:{extension_id}:worker:{name}"


def worker_hook(name: str) -> str:
    """The hook name of a worker's runs (failure reasons, stop reasons, crash counts)."""
    return f"worker {name}"


def worker_wake(*, extension_id: str, name: str, wake: WorkerWake) -> None:
    """Set the worker's pending wake (last wins) in the caller's transaction and enqueue a run
    after commit."""
    value = dataclasses.asdict(wake)
    updated = WorkerState.objects.filter(extension_id=extension_id, name=name).update(
        pending_wake=value
    )
    if not updated:
        WorkerState.objects.bulk_create(
            [WorkerState(extension_id=extension_id, name=name)], ignore_conflicts=True
        )
        WorkerState.objects.filter(extension_id=extension_id, name=name).update(pending_wake=value)
    from extensions_host.background import tasks

    enqueue(lambda: tasks.run_worker.delay(extension_id, name))


def workers_wake_pending(*, extension_ids: list[str] | None = None, after: int = 0) -> int | None:
    """Enqueue a run for every worker with a pending wake that no run will take: its extension
    may run it (`lifecycle` granted, running, loaded here), it is declared, and no run holds
    it (none, or its lease ran out). Rows with ids above `after` (among `extension_ids` when
    given), `SWEEP_PAGE` of them; returns the last id read when more may be waiting.

    Beat's sweep (a lost `run_worker` task, a run whose process died), a resume and a grant
    admitted again all come here. A duplicate run task is harmless (one run at a time)."""
    from extensions_host.background import tasks

    ids = eligible_ids("lifecycle", ids=extension_ids)
    if not ids:
        return None
    # one row per declared worker, so a plain scan (no index of its own)
    page = list(
        WorkerState.objects.lease_free(clock.now_ms())
        .filter(extension_id__in=ids, pending_wake__isnull=False, pk__gt=after)
        .order_by("pk")
        .values_list("pk", "extension_id", "name")[:SWEEP_PAGE]
    )
    for _, extension_id, name in page:
        if _declared(extension_id, name) is not None:
            enqueue_call(
                tasks.run_worker.apply_async, (extension_id, name), expires=SWEEP_RUN_EXPIRES_S
            )
    return page[-1][0] if len(page) == SWEEP_PAGE else None


def _declared(extension_id: str, name: str) -> tuple[Any, Worker] | None:
    loaded = registry.get(extension_id)
    if loaded is None:
        return None
    for worker in workers_of(loaded.definition):
        if worker.name == name:
            return loaded, worker
    return None


def worker_run(*, extension_id: str, name: str, delivery: str | None = None) -> str:
    """Run the worker once if it has a pending wake and no run in flight. Returns what
    happened: `ok`, `failed`, `busy` (another run is in flight), `idle` (no wake), `skipped`
    (extension not running or worker not declared here), `stopped` (earlier runs kept killing
    their process, or `activate` failed: the extension is stopped instead), `unavailable` (the
    run met the host's store trouble: the wake is kept for a later run).

    `delivery` identifies this delivery of the run task (default: the current Celery task's
    id, which a redelivery keeps): a redelivery whose earlier delivery died mid-run takes over
    its lease."""
    declared = _declared(extension_id, name)
    if declared is None or not eligible_ids("lifecycle", ids=[extension_id]):
        return "skipped"  # a stopped extension's pending wake waits for its resume
    loaded, worker = declared
    activation = activate_outside(loaded, boundary="worker")
    if activation is not None:
        # `activate` failed (the extension is stopped: its pending wake waits for the resume),
        # or the extension stopped or changed revision meanwhile
        return "stopped" if activation.status == "stopped" else "skipped"
    # the one rule of every hook: the worker's `deadline_s`, else the staff override, else the
    # extension's `deadline_s`, else the worker default
    limit = hook_deadline(roster_view(extension_id), loaded, worker.deadline_s, boundary="worker")
    token = _claim_token(delivery)
    wake = _claim(extension_id, name, token, limit)
    if isinstance(wake, str):
        return wake
    hook = worker_hook(name)
    started_ms = clock.now_ms()
    try:
        with delivery_counted(extension_id=extension_id, hook=hook, item=CRASH_ITEM) as exhausted:
            error = crashed_reason(hook) if exhausted else _invoke(loaded, worker, wake, limit)
    except StoreTrouble:
        # the host's store trouble, not the extension's (spec 02 §1): no failed run and no
        # `job.failed`; the wake is put back for a later run, which beat's worker sweep sends
        # (enqueuing one now would loop while the database is down)
        logger.warning("worker %s of %s: store unavailable, wake kept", name, extension_id)
        _finish(extension_id, name, token, started_ms, 0, None, keep=wake, record=False)
        return "unavailable"
    elapsed_ms = clock.now_ms() - started_ms
    if exhausted:
        extension_stop(extension_id=extension_id, hook=hook, reason=crashed_reason(hook))
    again = _finish(
        extension_id,
        name,
        token,
        started_ms,
        elapsed_ms,
        error,
        keep=wake if exhausted else None,
    )
    if again and not exhausted:
        from extensions_host.background import tasks

        enqueue(lambda: tasks.run_worker.delay(extension_id, name))
    if exhausted:
        return "stopped"
    return "ok" if error is None else "failed"


def _claim_token(delivery: str | None) -> str:
    """The run's claim token: derived from the task delivery (a redelivery of the same task
    recognises its own dead run), random outside a task."""
    if delivery is None:
        from celery import current_task

        request = getattr(current_task, "request", None) if current_task else None
        delivery = getattr(request, "id", None)
    if not delivery:
        return uuid.uuid4().hex
    return sha256(f"worker-run\x00{delivery}".encode()).hexdigest()[:32]


def _claim(extension_id: str, name: str, token: str, limit: float) -> WorkerWake | str:
    def step() -> WorkerWake | str:
        now = clock.now_ms()
        with transaction.atomic(durable=True):
            row = (
                WorkerState.objects.select_for_update()
                .with_lease(now)
                .filter(extension_id=extension_id, name=name)
                .first()
            )
            if row is None:
                return "idle"
            # a run that never finished: an earlier delivery of this very task (its process died
            # mid-run; a live process never runs two deliveries of one task at once), or any
            # run whose lease ran out (its process died, and another task, e.g. the sweep's,
            # comes first). Recorded once: the token is cleared with it.
            dead = bool(row.running_token) and (row.running_token == token or not row.lease_live)
            if dead:
                _record_dead_run(row, now)
            elif row.lease_live:
                return "busy"  # the run in flight takes the pending wake when it finishes
            if row.pending_wake is None:
                if dead:
                    row.save()
                return "idle"
            wake = WorkerWake(**row.pending_wake)
            row.pending_wake = None
            row.running_token = token
            row.running_since = now
            row.running_until = now + int(limit * 1000) + LEASE_GRACE_MS
            row.save()
            return wake

    return with_transient_retries(step)


def _record_dead_run(row: WorkerState, now: int) -> None:
    """Record the run in flight as failed (its process died) and release its lease."""
    reason = bounded_reason(crashed_reason(worker_hook(row.name)), row.extension_id)
    started = row.running_since or now
    row.running_token = ""
    row.running_since = None
    row.running_until = None
    row.runs += 1
    row.last_run_at = started
    row.last_duration_ms = max(now - started, 0)
    row.last_outcome = Outcome.FAILED
    row.last_error = reason
    job_failed_notify(
        title=f"Worker {row.name} of {row.extension_id} failed",
        body=reason,
        job_id=worker_id(row.extension_id, row.name),
    )


def _invoke(loaded: Any, worker: Worker, wake: WorkerWake, limit: float) -> str | None:
    """Call `run(ctx, wake)` outside any transaction; returns the failure reason or None. A
    failure is recorded, not a stop (a defect inside its `ctx.transact` already stopped the
    extension there)."""
    hook = worker_hook(worker.name)
    ctx = detached_context(extension_id=loaded.id, hook=hook)
    if ctx is None:
        return f"{hook}: extension is not installed here"
    started = time.monotonic()
    try:
        bounded(loaded, hook, limit, lambda: worker.run(ctx, wake))
    except PROCESS_EXIT:
        raise  # the process is told to exit: the run is recorded by the task's redelivery
    except BaseException as exc:
        if _store_trouble(exc):
            raise StoreTrouble from exc  # not the run's failure: `worker_run` keeps the wake
        return outside_reason(hook, exc, started=started, limit=limit)
    return None


class StoreTrouble(Exception):
    """A worker run met the host's store trouble, which is never the extension's fault."""


def _store_trouble(exc: BaseException) -> bool:
    """The host's transient store trouble as code outside a frame meets it: a read's
    `store/unavailable` (`transient.store_unavailable`, also a `ctx.transact` out of retries),
    or a transient database error from a host service it called."""
    if isinstance(exc, HostError):
        return (exc.category, exc.cause) == ("store", "unavailable")
    return isinstance(exc, DatabaseError) and is_transient(exc)


def _finish(
    extension_id: str,
    name: str,
    token: str,
    started_ms: int,
    elapsed_ms: int,
    error: str | None,
    *,
    keep: WorkerWake | None = None,
    record: bool = True,
) -> bool:
    """Record the run's outcome (unless not `record`) and release its lease; `keep` puts a wake
    that was not run back as the pending one (unless a newer wake arrived). Returns whether a
    wake is pending."""
    reason = bounded_reason(error, extension_id) if error is not None else ""

    def step() -> bool:
        with transaction.atomic(durable=True):
            row = (
                WorkerState.objects.select_for_update()
                .filter(extension_id=extension_id, name=name)
                .first()
            )
            if row is None:
                return False
            if row.running_token == token:
                row.running_token = ""
                row.running_since = None
                row.running_until = None
            if record:
                row.runs += 1
                row.last_run_at = started_ms
                row.last_duration_ms = max(elapsed_ms, 0)
                row.last_outcome = Outcome.FAILED if error else Outcome.OK
                row.last_error = reason
            if keep is not None and row.pending_wake is None:
                row.pending_wake = dataclasses.asdict(keep)
            row.save()
            if error and record:
                job_failed_notify(
                    title=f"Worker {name} of {extension_id} failed",
                    body=reason,
                    job_id=worker_id(extension_id, name),
                )
            return row.pending_wake is not None

    return with_transient_retries(step)


def workers_summary() -> list[dict[str, Any]]:
    """Every declared worker with its last run and outcome (for `GET /v1/meta`)."""
    # declared: the plugin keeps `lease_live` only on a row type written out
    states: dict[tuple[str, str], LeasedWorkerState] = {
        (s.extension_id, s.name): s for s in WorkerState.objects.with_lease(clock.now_ms())
    }
    result = []
    for extension_id, loaded in registry.loaded().items():
        for worker in workers_of(loaded.definition):
            state = states.get((extension_id, worker.name))
            result.append(
                {
                    "id": worker_id(extension_id, worker.name),
                    "extension_id": extension_id,
                    "name": worker.name,
                    "wake_on": list(worker.wake_on),
                    "running": bool(state and state.lease_live),
                    "pending_wake": state.pending_wake if state else None,
                    "runs": state.runs if state else 0,
                    "last_run_at": state.last_run_at if state else None,
                    "last_outcome": (state.last_outcome or None) if state else None,
                    "last_error": state.last_error if state else "",
                }
            )
    return result
