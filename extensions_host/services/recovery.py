"""Recovery policy (spec 02 §7): auto-resume backoff and the retry bound."""

from __future__ import annotations

import datetime as dt

from django.conf import settings

from extensions_host.models import RosterEntry

# 1, then 5, then 30 minutes; three attempts since the last staff resume or revision change.
AUTO_RESUME_BACKOFF_SECONDS: tuple[int, ...] = (60, 300, 1800)


def auto_resume_next_at(*, row: RosterEntry, stopped_at: dt.datetime) -> dt.datetime | None:
    """When the auto-resume sweep should resume this stopped extension (None: leave it to
    staff)."""
    if not (row.auto_resume_effective and settings.HOST_AUTO_RESUME):
        return None
    if row.restart_count >= len(AUTO_RESUME_BACKOFF_SECONDS):
        return None
    return stopped_at + dt.timedelta(seconds=AUTO_RESUME_BACKOFF_SECONDS[row.restart_count])


def retry_limit() -> int:
    """How many `Retry`s one item may ask for before it counts as a defect (default 10)."""
    return settings.HOST_RETRY_LIMIT
