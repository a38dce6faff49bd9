"""Thin Celery tasks of conversations: each calls one service (beat entries in config/celery.py).

Sweeps are bounded per call and re-enqueue themselves while work remains.
"""

from __future__ import annotations

from celery import shared_task

from conversations import echo, services


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=50, time_limit=60)
def echo_sweep() -> None:
    """The built-in echo runtime (a no-op unless AGENT_RUNTIME=echo)."""
    if echo.echo_sweep():
        echo_sweep.delay()


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=50, time_limit=60)
def expire_leases() -> None:
    """Release runs whose lease expired and re-queue their inputs."""
    _, more = services.runs_expire_leases()
    if more:
        expire_leases.delay()


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=240, time_limit=300)
def retention_sweep() -> None:
    """Delete archived conversations older than RETENTION_DAYS (no-op when unset)."""
    _, more = services.conversations_retention_sweep()
    if more:
        retention_sweep.delay()
