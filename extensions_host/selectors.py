"""Reads of the roster for the API and the admin: status, grants, revision, restart data,
usage against quotas."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from core.errors import MSG_NOT_FOUND, HostError
from extensions_host import registry
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.sdk.definition import ID_RE
from extensions_host.services.quotas import quota_limit, usage_totals

# Extra sections of `GET /v1/extensions/{id}` contributed by other capabilities (settled
# cursor and lag, timers due, …): name → fn(row) → JSON data.
detail_sections: dict[str, Callable[[RosterEntry], Any]] = {}


def roster_entries() -> QuerySet[RosterEntry]:
    return RosterEntry.objects.all()


def extension_id_usable(extension_id: str) -> bool:
    """Whether an extension could have this id (the SDK's format). Any other id (a NUL would be
    a driver error on PostgreSQL, not an answer) is simply not found, without a query."""
    return ID_RE.fullmatch(extension_id) is not None


def roster_entry_get(*, extension_id: str) -> RosterEntry:
    if not extension_id_usable(extension_id):
        raise HostError("store", "not_found", MSG_NOT_FOUND)
    row = RosterEntry.objects.filter(pk=extension_id).first()
    if row is None:
        raise HostError("store", "not_found", MSG_NOT_FOUND)
    return row


def grants_waiting() -> dict[str, list[str]]:
    """Installed extensions (running or stopped) with requested grants not admitted yet, by id
    (sorted), each with those grants: `sync_roster`, `/v1/meta` health and `/metrics`."""
    rows = RosterEntry.objects.exclude(status=ExtensionStatus.UNINSTALLED).only(
        "requested_grants", "admitted_grants"
    )
    return {row.id: row.pending_grants for row in rows if row.pending_grants}


def extension_summary(row: RosterEntry) -> dict[str, Any]:
    """The status list row (spec 02 §3)."""
    return {
        "id": row.id,
        "version": row.version,
        "revision": row.revision,
        "status": row.status,
        "reason": row.reason,
        "stopped_at": row.stopped_at,
        "failing_hook": row.failing_hook,
        "restart_count": row.restart_count,
    }


def extension_detail(row: RosterEntry) -> dict[str, Any]:
    loaded = registry.get(row.id)
    records, size = usage_totals(extension_id=row.id)
    detail = extension_summary(row) | {
        "fingerprint": row.fingerprint,
        "stop_event_id": row.stop_event_id,
        "last_error": row.last_error,
        "next_auto_resume_at": row.next_auto_resume_at,
        # whether a stop is auto-resumed: the installed version's declaration, staff's switch
        # and HOST_AUTO_RESUME must all allow it (services.recovery); each is shown too
        "auto_resume": row.auto_resume_effective and settings.HOST_AUTO_RESUME,
        "auto_resume_declared": row.declared_auto_resume,
        "auto_resume_staff": row.auto_resume,
        "grants": {
            "requested": list(row.requested_grants),
            "admitted": list(row.admitted_grants),
            "pending": row.pending_grants,
        },
        "state_version": row.state_version,
        "installed": loaded is not None,
        "loaded_revision": loaded.revision if loaded is not None else None,
        "deadline_seconds": row.deadline_seconds,
        "usage": {
            "records": records,
            "bytes": size,
            "max_records": quota_limit(overrides=row.quotas, name="max_records"),
            "max_bytes": quota_limit(overrides=row.quotas, name="max_bytes"),
        },
    }
    for name, section in detail_sections.items():
        detail[name] = section(row)
    return detail
