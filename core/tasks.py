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
