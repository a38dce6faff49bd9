"""Removing an extension's background state (the purge of an uninstalled extension)."""

from __future__ import annotations

from django.db.models import Q

from extensions_host.background.models import (
    JobState,
    Kick,
    LifecycleConsumer,
    LifecycleDelivery,
    SettledCursor,
    Timer,
    WorkerState,
)


def extension_background_purge(*, extension_id: str) -> dict[str, int]:
    """Delete the extension's timers, settled cursor, pending lifecycle deliveries, worker and
    job state and kicks, in the caller's transaction. Returns counts by kind."""
    removed = {
        "timers": Timer.objects.filter(extension_id=extension_id).delete()[0],
        "settled_cursor": SettledCursor.objects.filter(pk=extension_id).delete()[0],
        "lifecycle_deliveries": LifecycleDelivery.objects.filter(
            extension_id=extension_id
        ).delete()[0],
        "jobs": JobState.objects.filter(extension_id=extension_id).delete()[0],
        "workers": WorkerState.objects.filter(extension_id=extension_id).delete()[0],
    }
    LifecycleConsumer.objects.filter(pk=extension_id).delete()
    Kick.objects.filter(Q(extension_id=extension_id)).delete()
    return removed
