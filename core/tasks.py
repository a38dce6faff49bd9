"""Thin Celery tasks of the host core."""

from __future__ import annotations

from celery import shared_task

from core import services


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=10, time_limit=20)
def beat_heartbeat() -> None:
    """Beat's liveness mark, read by /readyz."""
    services.beat_tick()


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=60, time_limit=90)
def prune() -> None:
    """Hourly housekeeping: stored idempotency results older than 24 hours."""
    services.idempotency_prune()
