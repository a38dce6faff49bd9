"""The no-op Celery task of the round-trip baseline: it only tells the bench when it ran."""

from __future__ import annotations

import time

from celery import shared_task

from bench.extensions import probe


@shared_task(ignore_result=True)
def noop(token: str, sent_at_ms: float) -> None:
    """Do nothing but report (sent, ran) to the runner through Redis."""
    probe.push_now("bench:noop", {"token": token, "sent": sent_at_ms, "ran": time.time() * 1000})
