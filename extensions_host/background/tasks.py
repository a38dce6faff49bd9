"""Thin Celery tasks of background work: each calls one service (beat entries in
`config/celery.py`).

All are `acks_late` (a task whose worker died is redelivered), idempotent (row locks, cursors
and ledgers make a second run a no-op) and time-limited (soft limit above the work budget plus
the longest a page can run: 300 s, one frame's longest deadline). Sweeps are bounded per call
and re-enqueue themselves while work remains, so a backlog drains at full speed and no call
runs past its limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

from celery import Task, shared_task
from django.conf import settings
from django.db import transaction

from core.db import is_transient
from core.errors import HostError
from extensions_host.background.services import (
    idle,
    jobs,
    lifecycle,
    settled,
    timers,
    workers,
)


class TimeLimits(TypedDict):
    """A task's time limits in seconds, as `shared_task` takes them."""

    soft_time_limit: int
    time_limit: int


# a call starts pages for HOST_SWEEP_BUDGET_SECONDS, and its last page runs at most 300 s (a
# frame has its hook's whole deadline, up to 300 s, never cut by the page): the soft limit is
# derived from both in the settings, with headroom, so it never interrupts a hook in time
SWEEP_LIMITS: TimeLimits = {
    "soft_time_limit": settings.HOST_SWEEP_SOFT_TIME_LIMIT_SECONDS,
    "time_limit": settings.HOST_SWEEP_SOFT_TIME_LIMIT_SECONDS + 10,
}
# a delivery task that met the database down retries on its own, with backoff: its consumer's
# kick stays set meanwhile, so no trigger would enqueue it again before the kick goes stale
DELIVERY_RETRIES = 12
DELIVERY_BACKOFF_MAX_S = 8


def _again(send: object) -> None:
    transaction.on_commit(send, robust=True)  # type: ignore[arg-type]


def _delivering(task: Task, deliver: Callable[[], bool], again: Callable[[], object]) -> None:
    """Run one consumer's delivery; re-enqueue while more is waiting; retry after transient
    database trouble (a restart, a lost connection)."""
    try:
        more = deliver()
    except Exception as exc:
        if not (is_transient(exc) or (isinstance(exc, HostError) and exc.cause == "unavailable")):
            raise
        countdown = min(2**task.request.retries, DELIVERY_BACKOFF_MAX_S)
        raise task.retry(exc=exc, countdown=countdown, max_retries=DELIVERY_RETRIES) from exc
    if more:
        _again(again)


@shared_task(acks_late=True, ignore_result=True, **SWEEP_LIMITS)
def fire_timers(wake_at: int | None = None, help_until: int | None = None) -> None:
    """Fire due timers (beat every tick, the precise wake's `eta` task with `wake_at`, and a
    helper with `help_until` when timers fall behind)."""
    if timers.timers_fire_due(wake_at=wake_at, help_until=help_until):
        _again(fire_timers.delay)


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=10, time_limit=20)
def settled_sweep() -> None:
    """Beat's safety net: one delivery task per consumer that is behind."""
    settled.settled_sweep()


@shared_task(bind=True, acks_late=True, ignore_result=True, **SWEEP_LIMITS)
def deliver_settled(self: Task, extension_id: str) -> None:
    """Deliver settled runs to one consumer."""
    _delivering(
        self,
        lambda: settled.settled_deliver_all(extension_id=extension_id),
        lambda: deliver_settled.delay(extension_id),
    )


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=10, time_limit=20)
def lifecycle_sweep() -> None:
    """Beat's safety net for the outbox: fan out, and kick extensions with deliverable
    events."""
    lifecycle.lifecycle_sweep()


@shared_task(acks_late=True, ignore_result=True, **SWEEP_LIMITS)
def lifecycle_fanout() -> None:
    """Fan outbox events out into per-extension deliveries."""
    if lifecycle.lifecycle_fanout_all():
        _again(lifecycle_fanout.delay)


@shared_task(bind=True, acks_late=True, ignore_result=True, **SWEEP_LIMITS)
def deliver_lifecycle(self: Task, extension_id: str) -> None:
    """Deliver one extension's lifecycle events."""
    _delivering(
        self,
        lambda: lifecycle.lifecycle_deliver_all(extension_id=extension_id),
        lambda: deliver_lifecycle.delay(extension_id),
    )


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=320, time_limit=340)
def run_worker(extension_id: str, name: str) -> None:
    """One run of an idle worker (its own deadline ≤ 300 s bounds it)."""
    workers.worker_run(extension_id=extension_id, name=name)


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=10, time_limit=20)
def workers_sweep(after: int = 0) -> None:
    """Beat's safety net for idle workers: a run for each pending wake no run will take (its
    task was lost, its run's process died, its grant came back); a page per call."""
    last = workers.workers_wake_pending(after=after)
    if last is not None:
        _again(lambda: workers_sweep.delay(last))


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=10, time_limit=20)
def run_jobs() -> None:
    """Hand each due job to its own `run_job` task (beat every tick); runs none itself."""
    jobs.jobs_dispatch_due()


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=320, time_limit=340)
def run_job(job_id: str) -> None:
    """Run one job if due or triggered (the sweep's hand-out, a manual trigger): one job per
    task, so its deadline (≤ 300 s, plus the page's margin) is the task's alone."""
    jobs.job_run(job_id=job_id)


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=50, time_limit=60)
def detect_idle() -> None:
    """Emit `conversation_idle` for conversations idle past IDLE_AFTER_SECONDS."""
    _, more = idle.conversations_detect_idle()
    if more:
        _again(detect_idle.delay)


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=60, time_limit=90)
def background_prune() -> None:
    """Hourly: delete outbox events delivered to every subscriber more than an hour ago."""
    if lifecycle.lifecycle_prune() >= 1000:
        _again(background_prune.delay)
