"""Thin Celery tasks of the host core."""

from __future__ import annotations

from celery import shared_task
from django.db import transaction

from core import services


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=60, time_limit=90)
def prune() -> None:
    """Hourly housekeeping: stored idempotency results older than 24 hours, one page per call;
    re-enqueued while a full page was deleted."""
    _, more = services.idempotency_prune()
    if more:
        transaction.on_commit(prune.delay, robust=True)


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=60, time_limit=90)
def clear_sessions() -> None:
    """Daily: delete expired sessions (`clearsessions`), one page per call; re-enqueued while a
    full page was deleted."""
    _, more = services.sessions_clear_expired()
    if more:
        transaction.on_commit(clear_sessions.delay, robust=True)


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=60, time_limit=90)
def prune_audit_host_calls() -> None:
    """Daily: delete host-API call audit entries older than HOST_AUDIT_HOST_CALLS_RETENTION_DAYS
    (a no-op when unset), one page per call; re-enqueued while a full page was deleted."""
    _, more = services.audit_host_calls_prune()
    if more:
        transaction.on_commit(prune_audit_host_calls.delay, robust=True)
