"""Beat's scheduler: Celery's persistent scheduler that also marks beat alive for /readyz.

Selected by the CELERY_BEAT_SCHEDULER setting, so `celery -A config beat` needs no option. The
mark is written by the beat process itself, never by a task a worker runs: stopping the
workers must not make every web process report a dead beat (spec 05: a dead beat makes the host
not ready; a dead worker does not).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from celery.beat import PersistentScheduler
from django.conf import settings

logger = logging.getLogger("core.beat")


class HostScheduler(PersistentScheduler):
    """Writes beat's liveness mark (`core.services.beat_tick`) at most, and at least, every
    BEAT_MARK_SECONDS, whatever the schedule's own intervals; keeps its schedule file where
    CELERY_BEAT_SCHEDULE_FILENAME (HOST_VAR_DIR) or `--schedule` says, making its folder."""

    schedule_filename: str  # set by PersistentScheduler.__init__ (the stubs don't declare it)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._mark_due = 0.0  # monotonic: the first tick writes the mark
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        # a production host has no HOST_VAR_DIR until something writes there
        Path(self.schedule_filename).parent.mkdir(parents=True, exist_ok=True)
        super().setup_schedule()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        now = time.monotonic()
        if now >= self._mark_due:
            self._mark_due = now + settings.BEAT_MARK_SECONDS
            self._mark()
        delay = super().tick(*args, **kwargs)
        # wake in time for the next mark even when no entry is due for longer
        return min(delay, max(0.0, self._mark_due - time.monotonic()))

    def _mark(self) -> None:
        from core.services import beat_tick  # after Django's setup (it imports models)

        try:
            beat_tick()
        except Exception as exc:
            # the cache is down: /readyz reports it (and beat as not ready); keep scheduling
            logger.warning("beat could not write its liveness mark to the cache: %s", exc)
