"""Thin Celery tasks of the extension host."""

from __future__ import annotations

from celery import shared_task

from extensions_host.services.roster import roster_auto_resume_due


@shared_task(acks_late=True, ignore_result=True, soft_time_limit=30, time_limit=60)
def auto_resume_sweep() -> None:
    """Resume stopped extensions whose auto-resume backoff has passed (beat, every 30 s)."""
    roster_auto_resume_due()
