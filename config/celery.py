"""The Celery app and the one beat schedule.

Every periodic sweep is declared here, with a comment per entry. Sweeps are idempotent, bounded
per call and re-enqueue themselves while work remains, so a second beat is harmless.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")

app = Celery("hyphae")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _sync_roster_at_worker_start(**kwargs: object) -> None:
    from config.startup import process_start

    process_start()


TICK = float(os.environ.get("CELERY_BEAT_INTERVAL_SECONDS", "1"))

app.conf.beat_schedule = {
    # Liveness of beat itself: /readyz reports not ready when this stops ticking.
    "beat-heartbeat": {"task": "core.tasks.beat_heartbeat", "schedule": 10.0},
    # The built-in echo runtime claims and answers runnable conversations (AGENT_RUNTIME=echo).
    "echo-runtime": {"task": "conversations.tasks.echo_sweep", "schedule": TICK},
    # Release runs whose lease expired and re-queue their submissions.
    "expire-run-leases": {"task": "conversations.tasks.expire_leases", "schedule": 30.0},
    # Delete archived conversations older than RETENTION_DAYS (no-op when unset).
    "retention": {"task": "conversations.tasks.retention_sweep", "schedule": 24 * 3600.0},
    # Drop stored idempotency results older than 24 hours.
    "prune": {"task": "core.tasks.prune", "schedule": 3600.0},
    # Resume stopped extensions whose auto-resume backoff (1, 5, 30 min) has passed.
    "auto-resume": {"task": "extensions_host.tasks.auto_resume_sweep", "schedule": 30.0},
}
