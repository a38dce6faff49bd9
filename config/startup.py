"""What every web and worker process does once at start (never from AppConfig.ready).

One rule for gunicorn (config/wsgi.py), uvicorn (config/asgi.py) and the Celery worker
(config/celery.py): a process starts while the database is down or not migrated yet (the sync
is skipped with a warning and the API answers 503 until the database is back), and refuses to
start on anything else, such as an extension that cannot be loaded.
"""

from __future__ import annotations

from django.conf import settings


def process_start() -> None:
    """Sync the roster with the extensions this process loaded (spec 02 §2); the database's
    trouble is tolerated (`roster_sync_at_start`), every other error raises. Serialised
    cluster-wide by the roster lock."""
    if not settings.HOST_SYNC_AT_START:
        return
    from django.db import connections

    from extensions_host.services.roster import roster_sync_at_start

    try:
        roster_sync_at_start()
    finally:
        connections.close_all()  # never hand a start-up connection to request handling
