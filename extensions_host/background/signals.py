"""Registrations into hook points other apps expose (called once from `AppConfig.ready`).

- `ctx.timers` on every hook context (`extensions_host.runtime.register_capability`);
- `settled` and `timers` sections of `GET /v1/extensions/{id}` (`selectors.detail_sections`);
- in a resume's (or a new revision's) transaction: every pending item's `Retry` count reset
  (`services.roster.fresh_start_steps`);
- after a resume: a timer wake, settled replay, lifecycle replay, pending worker wakes
  (`services.roster.resume_listeners`);
- after a grant change: pending worker wakes (`services.roster.grant_listeners`: a wake that
  waited for its `lifecycle` grant runs when the grant is admitted again);
- after an outbox event commits: the lifecycle fan-out (`post_save` of `LifecycleEvent`: core
  cannot import this app, so the trigger is a signal that only schedules an after-commit kick);
- Celery's `worker_shutdown`: the extensions' `shutdown` hooks (direct, best-effort).
"""

from __future__ import annotations

from typing import Any

from extensions_host.background.services.common import logger, retries_forgotten


def connect() -> None:
    from celery.signals import worker_shutdown
    from django.db.models.signals import post_save

    from core.models import LifecycleEvent
    from extensions_host import selectors
    from extensions_host.background.services.timers import TimerAccess
    from extensions_host.runtime import register_capability
    from extensions_host.services import roster

    register_capability("timers", TimerAccess)
    selectors.detail_sections["settled"] = _settled_section
    selectors.detail_sections["timers"] = _timers_section
    if on_resume not in roster.resume_listeners:
        roster.resume_listeners.append(on_resume)
    if retries_forgotten not in roster.fresh_start_steps:
        roster.fresh_start_steps.append(retries_forgotten)
    if on_grants_changed not in roster.grant_listeners:
        roster.grant_listeners.append(on_grants_changed)
    post_save.connect(_outbox_saved, sender=LifecycleEvent, dispatch_uid="background-outbox")
    worker_shutdown.connect(_worker_shutdown, dispatch_uid="background-shutdown", weak=False)


def _settled_section(row: Any) -> dict[str, Any] | None:
    from extensions_host.background.services.settled import settled_lag

    if "settled" not in (row.admitted_grants or []):
        return None
    return settled_lag(extension_id=row.id)


def _timers_section(row: Any) -> dict[str, Any] | None:
    from extensions_host.background.services.timers import timers_summary

    if "timers" not in (row.admitted_grants or []):
        return None
    return timers_summary(extension_id=row.id)


def on_resume(extension_id: str) -> None:
    """After a resume commits: the extension's timers count for the wake again, and its
    settled runs, lifecycle events and worker wakes are replayed from where it stopped."""
    from extensions_host.background.services.lifecycle import lifecycle_kick
    from extensions_host.background.services.settled import settled_notify_extension
    from extensions_host.background.services.wake import timer_wake_for_extension
    from extensions_host.background.services.workers import workers_wake_pending

    steps = (
        lambda: timer_wake_for_extension(extension_id),
        lambda: settled_notify_extension(extension_id),
        lambda: lifecycle_kick([extension_id]),
        lambda: workers_wake_pending(extension_ids=[extension_id]),
    )
    for step in steps:
        try:
            step()
        except Exception:  # the resume has committed; beat replays within a tick anyway
            logger.exception("after-resume background step failed for %s", extension_id)


def on_grants_changed(extension_id: str) -> None:
    """After a grant change commits: pending worker wakes run if `lifecycle` is admitted (the
    other channels catch up on beat's next tick)."""
    from extensions_host.background.services.workers import workers_wake_pending

    try:
        workers_wake_pending(extension_ids=[extension_id])
    except Exception:  # the change has committed; beat's worker sweep is the safety net
        logger.exception("after-grant-change worker wakes failed for %s", extension_id)


def _outbox_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    from extensions_host.background.services.lifecycle import on_outbox_event

    on_outbox_event(created)


def _worker_shutdown(**kwargs: Any) -> None:
    from extensions_host.background.services.shutdown import lifecycle_shutdown_all

    try:
        lifecycle_shutdown_all()
    except Exception:  # best-effort by definition: never block the worker's exit
        logger.exception("extension shutdown hooks failed")
