"""`job.failed` notifications go to the one notification outbox (`extensions_host.contributions`),
which delivers them to every registered notifier."""

from __future__ import annotations

from extensions_host.contributions.services.notify import notification_emit


def job_failed_notify(*, job_id: str, title: str, body: str) -> None:
    """Record a `job.failed` notification in the caller's transaction (it commits with the
    failed run's outcome); staff are the audience, so no single recipient user."""
    notification_emit(type="job.failed", user=None, title=title, body=body, job_id=job_id)
