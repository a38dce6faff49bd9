"""The Celery app and the one beat schedule.

Every periodic sweep is declared here, with a comment per entry. Sweeps are idempotent, bounded
per call and re-enqueue themselves while work remains, so a second beat is harmless. Beat's own
liveness mark for /readyz is no task: beat's scheduler writes it (core/beat.py, selected by
CELERY_BEAT_SCHEDULER), so it says beat is alive whether or not a worker runs.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init
from django.conf import settings
from kombu.transport import TRANSPORT_ALIASES

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")

# `filesystem://` (the embedded broker) is kombu's transport with whole-message writes, in every
# process that loads this app, whichever settings module it runs
TRANSPORT_ALIASES["filesystem"] = "core.broker:Transport"

app = Celery("hyphae")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _sync_roster_at_worker_start(**kwargs: object) -> None:
    from config.startup import process_start

    try:
        process_start()
    except Exception as exc:
        # Celery logs and ignores what a signal handler raises: the worker would start without
        # its extensions. Refuse to start, as gunicorn and uvicorn do (config/startup.py).
        raise SystemExit(f"worker start failed: {type(exc).__name__}: {exc}") from exc


@app.on_after_configure.connect
def _declare_beat_schedule(sender: Celery, **kwargs: object) -> None:
    # after configuration, not at import: the tick comes from Django's settings, which honour
    # `.env` (this module is imported before settings are loaded)
    sender.conf.beat_schedule = beat_schedule(tick=settings.CELERY_BEAT_INTERVAL_SECONDS)


def beat_schedule(*, tick: float) -> dict[str, dict]:
    """The beat schedule; `tick` is CELERY_BEAT_INTERVAL_SECONDS, the fast sweeps' interval.

    A fast sweep still queued after `max(30 s, 10 ticks)` expires unrun: newer ones are queued
    behind it, so a worker that fell behind catches up instead of working through a backlog of
    stale sweeps ahead of the kicks that matter."""
    fast = {"expires": max(30.0, 10 * tick)}
    schedule = {
        # The built-in echo runtime claims and answers runnable conversations (AGENT_RUNTIME=echo).
        "echo-runtime": {
            "task": "conversations.tasks.echo_sweep",
            "schedule": tick,
            "options": fast,
        },
        # Release runs whose lease expired and re-queue their submissions.
        "expire-run-leases": {"task": "conversations.tasks.expire_leases", "schedule": 30.0},
        # Delete archived conversations older than RETENTION_DAYS (no-op when unset).
        "retention": {"task": "conversations.tasks.retention_sweep", "schedule": 24 * 3600.0},
        # Drop stored idempotency results older than 24 hours.
        "prune": {"task": "core.tasks.prune", "schedule": 3600.0},
        # Delete expired sessions (Django's `clearsessions`, in pages).
        "clear-sessions": {"task": "core.tasks.clear_sessions", "schedule": 24 * 3600.0},
        # Delete host-API call audit entries (`host.*`) older than
        # HOST_AUDIT_HOST_CALLS_RETENTION_DAYS (no-op when unset: kept forever).
        "prune-audit-host-calls": {
            "task": "core.tasks.prune_audit_host_calls",
            "schedule": 24 * 3600.0,
        },
        # Resume stopped extensions whose auto-resume backoff (1, 5, 30 min) has passed.
        "auto-resume": {"task": "extensions_host.tasks.auto_resume_sweep", "schedule": 30.0},
        # Fire due extension timers (precise `eta` wakes come on top, see background/services/wake).
        "fire-timers": {
            "task": "extensions_host.background.tasks.fire_timers",
            "schedule": tick,
            "options": fast,
        },
        # Safety net for settled delivery (it is also kicked after every settle).
        "deliver-settled": {
            "task": "extensions_host.background.tasks.settled_sweep",
            "schedule": tick,
            "options": fast,
        },
        # Safety net for the lifecycle outbox: fan out and deliver (also kicked after commit).
        "deliver-lifecycle": {
            "task": "extensions_host.background.tasks.lifecycle_sweep",
            "schedule": tick,
            "options": fast,
        },
        # Idle workers' pending wakes that no run will take (a lost task, a run whose process
        # died and whose lease ran out, a grant admitted again): each wake brings its own task,
        # so this is only a safety net, at the lease sweep's pace.
        "wake-workers": {
            "task": "extensions_host.background.tasks.workers_sweep",
            "schedule": 30.0,
        },
        # Run due extension jobs (and manual triggers).
        "run-jobs": {
            "task": "extensions_host.background.tasks.run_jobs",
            "schedule": tick,
            "options": fast,
        },
        # Emit conversation_idle for conversations idle past IDLE_AFTER_SECONDS.
        "detect-idle": {"task": "extensions_host.background.tasks.detect_idle", "schedule": 30.0},
        # Delete lifecycle outbox events delivered to every subscriber over an hour ago.
        "prune-outbox": {
            "task": "extensions_host.background.tasks.background_prune",
            "schedule": 3600.0,
        },
        # Drop expired attention items (they are already hidden from every view).
        "prune-attention": {
            "task": "extensions_host.surfaces.tasks.prune_attention",
            "schedule": 60.0,
        },
        # Notifier deliveries whose task was lost or whose worker died (retries are scheduled).
        "notifications-sweep": {
            "task": "extensions_host.contributions.tasks.notifications_sweep",
            "schedule": 30.0,
        },
        # Delete notifications older than HOST_NOTIFICATION_RETENTION_DAYS whose deliveries are
        # all finished (one still pending or in flight is kept).
        "prune-notifications": {
            "task": "extensions_host.contributions.tasks.notifications_prune",
            "schedule": 3600.0,
        },
    }
    return schedule
