"""`GET /v1/meta` (spec 05): version, roster statuses, aggregated health, routes, workers,
jobs, incompatible migrations and the lag figures (settled cursor lag, due-timer backlog,
oldest due timer age), plus skills, bundles, notifiers and providers.

Health: each running extension's `health()` hook (a read-only frame; a raise or an invalid
result is a defect, like any hook) combined with its notifiers' delivery health and the grants
it waits for; any degraded or stopped extension makes the host degraded.

Workers, jobs and the timer/settled figures come from the background app when it is installed
(`extensions_host.background`); without it they read as empty/zero and `available: false`
says so.
"""

from __future__ import annotations

import logging
from typing import Any

from django.apps import apps
from django.conf import settings
from pydantic import ValidationError

from extensions_host import registry
from extensions_host.contributions.services.bundles import bundles_list
from extensions_host.contributions.services.notify import notifier_health
from extensions_host.contributions.services.providers import providers_catalog
from extensions_host.contributions.services.routes import routes_list
from extensions_host.contributions.services.skills import skills_list
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import InvalidResult, run_frame
from extensions_host.sdk import SDK_VERSION, Health

logger = logging.getLogger("extensions_host.contributions.meta")

BACKGROUND_APP = "extensions_host.background"
SURFACES_APP = "extensions_host.surfaces"
MSG_HEALTH_INVALID = "Extension health result is invalid"
MSG_HOW_TO_ADMIT = "staff admit them in the admin or with manage.py admit_grants"


def host_version() -> str:
    return str(settings.SPECTACULAR_SETTINGS.get("VERSION", "0"))


def _background() -> bool:
    return apps.is_installed(BACKGROUND_APP)


def extension_health(row: RosterEntry, notifiers: list[dict[str, Any]]) -> dict[str, Any]:
    """One extension's health: stopped/uninstalled → degraded with the reason; else its
    `health()` hook (if any), degraded too by any notifier that exhausted its retries."""
    if row.status == ExtensionStatus.STOPPED:
        return {"status": "degraded", "detail": f"stopped: {row.reason}"}
    if row.status == ExtensionStatus.UNINSTALLED:
        return {"status": "ok", "detail": "uninstalled"}
    result: dict[str, Any] = {"status": "ok"}
    loaded = registry.get(row.id)
    hook = loaded.definition.hooks.single.get("health") if loaded is not None else None
    if hook is not None and loaded is not None and row.revision == loaded.revision:
        outcome = run_frame(
            extension_id=row.id,
            hook="health",
            call=hook,
            mode="read",
            failures="stop",
            boundary="request",
            validate=_health_valid,
        )
        if outcome.ok:
            result = outcome.value
        elif outcome.status == "stopped" or outcome.skip == "stopped":
            result = {"status": "degraded", "detail": f"stopped: {outcome.reason}"}
    problems = [
        f"notifier {n['name']} degraded: {n['last_error']}"
        for n in notifiers
        if n["extension_id"] == row.id and n["status"] == "degraded"
    ]
    if row.pending_grants:
        # what those grants gate does not run until staff admit them (HOST_AUTO_ADMIT=false)
        waiting = ", ".join(row.pending_grants)
        problems.append(f"waiting for grants: {waiting} ({MSG_HOW_TO_ADMIT} {row.id})")
    if problems:
        own = result.get("detail")
        detail = "; ".join([own, *problems] if own else problems)
        result = {"status": "degraded", "detail": detail}
    return result


def _health_valid(value: Any) -> dict[str, Any]:
    try:
        checked = value if isinstance(value, Health) else Health.model_validate(value)
    except ValidationError as exc:
        raise InvalidResult(MSG_HEALTH_INVALID) from exc
    return checked.model_dump(exclude_none=True)


def lag_figures() -> dict[str, Any]:
    """Settled cursor lag per consumer, the due-timer backlog and the oldest due timer age,
    and the lifecycle outbox backlog (from the background app, in a fixed number of queries
    whatever the number of extensions: `backlog_figures`, which `/metrics` reads through here
    and the console's dashboard reads too)."""
    figures: dict[str, Any] = {
        "available": False,
        "settled": {"core_cursor": 0, "consumers": {}, "max_lag": 0},
        "timers": {"due": 0, "pending": 0, "oldest_due_age_ms": None},
        "outbox": {"unfanned": 0, "pending": {}},
    }
    if not _background():
        return figures  # placeholder: the background app is not installed here
    try:
        from extensions_host.background.services.backlog import backlog_figures
    except ImportError:  # pragma: no cover - a partial deployment
        return figures
    backlog = backlog_figures()
    timers = backlog["timers"]
    figures["available"] = True
    figures["settled"] = backlog["settled"]
    figures["timers"] = {key: timers[key] for key in ("due", "pending", "oldest_due_age_ms")}
    figures["outbox"] = backlog["outbox"]
    return figures


def workers_and_jobs() -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    if not _background():
        return [], [], False
    try:
        from extensions_host.background.services.jobs import jobs_list
        from extensions_host.background.services.workers import workers_summary
    except ImportError:  # pragma: no cover - a partial deployment
        return [], [], False
    return workers_summary(), jobs_list(), True


def incompatible_migrations() -> list[dict[str, str]]:
    """Extensions that take part in runs and whose state migration failed (spec 04); run
    participation belongs to the surfaces app, so without it none is listed."""
    if not apps.is_installed(SURFACES_APP):
        return []
    from extensions_host.surfaces.services.participation import (
        incompatible_migrations as participating,
    )

    return participating()


def meta_build() -> dict[str, Any]:
    rows = list(RosterEntry.objects.all())
    notifiers = notifier_health()
    extensions: list[dict[str, Any]] = []
    for row in rows:
        health = extension_health(row, notifiers)
        extensions.append(
            {
                "id": row.id,
                "version": row.version,
                "status": row.status,
                "reason": row.reason,
                "health": health,
            }
        )
    degraded = any(
        item["health"]["status"] == "degraded" or item["status"] == ExtensionStatus.STOPPED
        for item in extensions
    )
    workers, jobs, background = workers_and_jobs()
    return {
        "version": host_version(),
        "sdk_version": SDK_VERSION,
        "health": {"status": "degraded" if degraded else "ok"},
        "extensions": extensions,
        "routes": routes_list(),
        "notifiers": notifiers,
        "providers": providers_catalog(),
        "skills": skills_list(),
        "webui_bundles": bundles_list(),
        "workers": workers,
        "jobs": jobs,
        "background_available": background,
        "incompatible_migrations": incompatible_migrations(),
        "lag": lag_figures(),
    }
