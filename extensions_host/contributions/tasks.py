"""Thin Celery tasks of contributions: load by id, call one service."""

from __future__ import annotations

from celery import shared_task
from django.db import transaction

from extensions_host.contributions.services import notify


# the hard limit stays above the longest notifier deadline (300 s) plus the bookkeeping
@shared_task(acks_late=True, ignore_result=True, soft_time_limit=330, time_limit=360)
def notifier_deliver(delivery_id: int) -> str:
    """Deliver one notification to one notifier (retries are scheduled by the service)."""
    return notify.notification_deliver(delivery_id=delivery_id)


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=30, time_limit=60)
def notifications_sweep() -> int:
    """Beat: re-enqueue due deliveries whose task was lost or whose worker died."""
    return notify.notifications_sweep()


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=60, time_limit=90)
def notifications_prune() -> None:
    """Hourly: delete finished notifications older than HOST_NOTIFICATION_RETENTION_DAYS, one
    page per call; re-enqueued while a full page was deleted."""
    _, more = notify.notifications_prune()
    if more:
        transaction.on_commit(notifications_prune.delay, robust=True)
