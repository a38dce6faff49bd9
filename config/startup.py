"""What every web and worker process does once at start (never from AppConfig.ready)."""

from __future__ import annotations

from django.conf import settings


def process_start() -> None:
    """Sync the roster with the extensions this process loaded (spec 02 §2). Tolerates a
    database without tables (before `migrate`); serialised cluster-wide by the roster lock."""
    if not settings.HOST_SYNC_AT_START:
        return
    from django.db import connections

    from extensions_host.services.roster import roster_sync_at_start

    try:
        roster_sync_at_start()
    finally:
        connections.close_all()  # never hand a start-up connection to request handling
