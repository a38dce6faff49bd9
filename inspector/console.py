"""Reads of the staff console (the Django admin): the index dashboard, the extension list's
per-row figures and the sections of the extension and conversation pages.

Every read is bounded (a fixed number of queries, a fixed number of rows shown): the console
must stay fast on a host with millions of records, timers and runs.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, PermissionsMixin
from django.db.models import (
    Count,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce

from artifacts.models import World
from conversations.models import Entry, Run, RunStatus, Submission, SubmissionStatus
from core import clock
from core.models import AuditEntry
from extensions_host import registry
from extensions_host.background.declarations import workers_of
from extensions_host.background.models import (
    JobState,
    SettledCursor,
    Timer,
    WorkerState,
)
from extensions_host.background.services.backlog import backlog_figures
from extensions_host.background.services.settled import core_cursor
from extensions_host.contributions.models import (
    ExtensionSecret,
    ExtensionSettings,
    Notification,
    NotificationType,
    NotifierHealth,
)
from extensions_host.models import (
    ExtensionDocument,
    ExtensionRecord,
    ExtensionStatus,
    RosterEntry,
    UsageSlot,
)
from extensions_host.services.quotas import quota_limit
from extensions_host.surfaces.models import AttentionItem
from extensions_host.surfaces.selectors import attention_visible
from inspector.rendering import content_text, json_pretty
from inspector.selectors import (
    ambient_read,
    inspector_principal,
    interactions_read,
    projection_slots,
)

DAY_MS = 24 * 3600 * 1000
ROWS = 50  # rows shown per section of a page
PREVIEW_CHARS = 200


def _ms(value: int | None) -> dt.datetime | None:
    return None if value is None else clock.from_ms(value)


def _age(ms: int | None, now: int) -> str:
    """A short human age ("3 s", "12 min", "5 h", "2 d")."""
    if ms is None:
        return ""
    seconds = max(now - ms, 0) // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- the index dashboard -----------------------------------------------------------------------


# The parts of the dashboard, each with the permission it takes: the view permission of the
# model behind it (the model its card links to), so the index shows a staff user no more than
# the console's own pages would.
DASHBOARD_PARTS = {
    "extensions": "extensions_host.view_rosterentry",
    "settled": "ext_background.view_settledcursor",
    "timers": "ext_background.view_timer",
    "jobs": "ext_contributions.view_notification",
    "notifiers": "ext_contributions.view_notifierhealth",
    "runs": "conversations.view_run",
    "audit": "core.view_auditentry",
}


def dashboard_read(*, user: PermissionsMixin | AnonymousUser) -> dict[str, Any]:
    """The figures that matter at a glance, of the parts `user` may view (`DASHBOARD_PARTS`):
    stopped extensions with their reasons and extensions waiting for staff to admit their
    grants, settled lag per consumer, the timer backlog and its oldest due timer, failed jobs
    (with the lifecycle backlog) and notifier failures in the last day, live runs and queued
    prompts, recent audit. `shown` names the parts; the others are not read."""
    shown = {part for part, perm in DASHBOARD_PARTS.items() if user.has_perm(perm)}
    now = clock.now_ms()
    since = now - DAY_MS
    dash: dict[str, Any] = {"shown": shown}
    if "extensions" in shown:
        by_status = dict(
            RosterEntry.objects.values_list("status").annotate(n=Count("id")).order_by("status")
        )
        waiting = _waiting_for_grants()
        dash |= {
            "running": by_status.get(ExtensionStatus.RUNNING, 0),
            "stopped_count": by_status.get(ExtensionStatus.STOPPED, 0),
            "uninstalled": by_status.get(ExtensionStatus.UNINSTALLED, 0),
            "stopped": list(
                RosterEntry.objects.filter(status=ExtensionStatus.STOPPED).order_by(
                    "-stopped_at", "id"
                )[:ROWS]
            ),
            "waiting": waiting[:ROWS],
            "waiting_count": len(waiting),
            # the resume and admit buttons: what the roster's actions take
            "may_change": user.has_perm("extensions_host.change_rosterentry"),
        }
    if shown & {"settled", "timers", "jobs"}:
        # settled lag, the timer backlog and the outbox: the figures `GET /v1/meta` and
        # /metrics give, from the one place that computes them (a fixed number of queries)
        backlog = backlog_figures()
        settled, timers = backlog["settled"], backlog["timers"]
        dash |= {
            "core_cursor": settled["core_cursor"],
            "consumers": [
                {"extension": extension_id, "cursor": consumer["cursor"], "lag": consumer["lag"]}
                for extension_id, consumer in settled["consumers"].items()
                if consumer["cursor"] is not None
            ][:ROWS],
            "max_lag": settled["max_lag"],
            "timers_pending": timers["pending"],
            "timers_due": timers["due"],
            "oldest_due_at": _ms(timers["oldest_due_at"]),
            "oldest_due_age": _age(timers["oldest_due_at"], now),
            "lifecycle_backlog": sum(backlog["outbox"]["pending"].values()),
        }
    if "jobs" in shown:
        dash["failed_job_runs"], dash["failed_jobs"] = _failed_job_runs(since)
    if "notifiers" in shown:
        notifiers = NotifierHealth.objects.filter(last_failure_at__gte=since).order_by(
            "-last_failure_at"
        )[:ROWS]
        dash["notifier_failures"] = [
            {
                "extension": row.extension_id,
                "notifier": row.notifier,
                "status": row.status,
                "consecutive": row.consecutive_failures,
                "error": row.last_error,
                "at": _ms(row.last_failure_at),
            }
            for row in notifiers
        ]
    if "runs" in shown:
        dash["live_runs"] = Run.objects.filter(status=RunStatus.CLAIMED).count()
        dash["queued"] = Submission.objects.filter(status=SubmissionStatus.QUEUED).count()
    if "audit" in shown:
        dash["audit"] = list(AuditEntry.objects.order_by("-at", "-id")[:10])
    return dash


def _waiting_for_grants() -> list[dict[str, Any]]:
    """Installed extensions with requested grants staff have not admitted (spec 02 §2), by id:
    with HOST_AUTO_ADMIT=false (production) every newly installed extension waits here, its
    gated hooks, commands and host API calls refused until staff admit them. Admitting a subset
    on purpose keeps an extension listed: it still requests the rest.

    The roster has one row per extension ever installed (a few dozen at most), and which
    grants are pending is a difference of two JSON lists: compared here, not in SQL."""
    rows = (
        RosterEntry.objects.exclude(status=ExtensionStatus.UNINSTALLED)
        .only("id", "status", "requested_grants", "admitted_grants")
        .order_by("id")
    )
    return [
        {"id": row.id, "status": row.status, "pending": row.pending_grants}
        for row in rows
        if row.pending_grants
    ]


def _failed_job_runs(since: int) -> tuple[int, list[dict[str, Any]]]:
    """Job runs that failed since `since` (epoch ms), and the jobs they belong to (newest
    failure first, at most `ROWS`), each with its failures in the window and the reason of the
    latest.

    Counted from the `job.failed` notifications, which every failed run records in its own
    transaction: a job's row keeps only its latest outcome, so a run that failed and was
    followed by a good one would not count. Worker runs notify too (`ext:<id>:worker:<name>`);
    they are not jobs.
    """
    runs = Notification.objects.filter(
        type=NotificationType.JOB_FAILED, created_at__gte=clock.from_ms(since)
    ).exclude(job_id__contains=":worker:")
    jobs = list(
        runs.values("job_id")
        .annotate(failures=Count("id"), last_id=Max("id"))
        .order_by("-last_id")[:ROWS]
    )
    latest = Notification.objects.in_bulk([job["last_id"] for job in jobs])
    states = JobState.objects.in_bulk([job["job_id"] for job in jobs])
    return runs.count(), [
        {
            "id": job["job_id"],
            "failures": job["failures"],
            "error": preview(latest[job["last_id"]].body),
            "at": latest[job["last_id"]].created_at,
            "outcome": state.last_outcome if (state := states.get(job["job_id"])) else "",
        }
        for job in jobs
    ]


def _due(now: int) -> Q:
    return Q(fire_at__lte=now)


# --- the extension list ------------------------------------------------------------------------


def roster_list_annotate(queryset: QuerySet[RosterEntry]) -> QuerySet[RosterEntry]:
    """Per-row figures of the extension list as subqueries, so the page is a fixed number of
    queries whatever its length: timers pending and due, the settled cursor (lag = the core
    cursor, read once, minus it) and the usage counters."""
    now = clock.now_ms()

    def count(query: QuerySet[Any]) -> Coalesce:
        counted = query.values("extension_id").annotate(n=Count("id")).values("n")
        return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))

    def usage(field: str) -> Coalesce:
        summed = (
            UsageSlot.objects.filter(extension_id=OuterRef("pk"))
            .values("extension_id")
            .annotate(total=Sum(field))
            .values("total")
        )
        return Coalesce(Subquery(summed), Value(0))

    timers = Timer.objects.filter(extension_id=OuterRef("pk"))
    return queryset.annotate(
        timers_pending=count(timers),
        timers_due=count(timers.filter(fire_at__lte=now)),
        settled_position=Subquery(
            SettledCursor.objects.filter(pk=OuterRef("pk")).values("position")[:1]
        ),
        core_cursor=Value(core_cursor(), output_field=IntegerField()),
        usage_records=usage("records"),
        usage_bytes=usage("bytes"),
    )


# --- the extension page ------------------------------------------------------------------------


def extension_sections(row: RosterEntry, *, filters: dict[str, str]) -> dict[str, Any]:
    """The sections of one extension's page. `filters` (collection, key, index) narrow the
    records browser; key matches a prefix."""
    now = clock.now_ms()
    extension_id = row.id
    settings_row = ExtensionSettings.objects.filter(pk=extension_id).first()
    timers = Timer.objects.filter(extension_id=extension_id)
    timer_figures = timers.aggregate(
        pending=Count("id"), due=Count("id", filter=_due(now)), oldest=Min("fire_at")
    )
    usage = UsageSlot.objects.filter(extension_id=extension_id).aggregate(
        records=Sum("records"), bytes=Sum("bytes")
    )
    records = ExtensionRecord.objects.filter(extension_id=extension_id)
    # the declared collections (no COUNT over what may be millions of records)
    loaded = registry.get(extension_id)
    collections = sorted(loaded.definition.collections) if loaded is not None else []
    if filters.get("collection") and filters["collection"] not in collections:
        collections.append(filters["collection"])
    if filters.get("collection"):
        records = records.filter(collection=filters["collection"])
    if filters.get("key"):
        records = records.filter(key__startswith=filters["key"])
    if filters.get("index"):
        records = records.filter(index=filters["index"])
    cursor = SettledCursor.objects.filter(pk=extension_id).first()
    core = core_cursor()
    return {
        "settings": {
            "exists": settings_row is not None,
            "json": json_pretty(settings_row.value) if settings_row is not None else "{}",
            "pk": extension_id,
        },
        "secret_keys": list(
            ExtensionSecret.objects.filter(extension_id=extension_id)
            .order_by("key")
            .values_list("key", flat=True)[:ROWS]
        ),
        "settled": None
        if cursor is None
        else {
            "cursor": cursor.position,
            "core_cursor": core,
            "lag": max(core - cursor.position, 0),
            "retry_attempt": cursor.retry_attempt,
            "not_before": _ms(cursor.not_before),
        },
        "timers": {
            "pending": timer_figures["pending"],
            "due": timer_figures["due"],
            "max": quota_limit(overrides=row.quotas, name="max_timers"),
            "rows": [
                {
                    "key": timer.key,
                    "due_at": _ms(timer.due_at),
                    "fire_at": _ms(timer.fire_at),
                    "overdue": timer.fire_at <= now,
                    "age": _age(timer.fire_at, now) if timer.fire_at <= now else "",
                    "retry_attempt": timer.retry_attempt,
                }
                for timer in timers.order_by("fire_at", "id")[:ROWS]
            ],
        },
        "usage": {
            "records": int(usage["records"] or 0),
            "bytes": int(usage["bytes"] or 0),
            "max_records": quota_limit(overrides=row.quotas, name="max_records"),
            "max_bytes": quota_limit(overrides=row.quotas, name="max_bytes"),
        },
        "records": {
            "collections": collections,
            "filters": filters,
            "rows": [
                {
                    "pk": record.pk,
                    "collection": record.collection,
                    "key": record.key,
                    "index": record.index,
                    "size": record.size_bytes,
                    "preview": preview(record.value),
                }
                for record in records.order_by("collection", "key")[:ROWS]
            ],
        },
        "documents": [
            {
                "pk": document.pk,
                "name": document.name,
                "conversation": document.conversation_id,
                "updated_at": document.updated_at,
                "preview": preview(document.value),
            }
            for document in ExtensionDocument.objects.filter(extension_id=extension_id).order_by(
                "-updated_at", "-pk"
            )[:ROWS]
        ],
        "attention": list(
            AttentionItem.objects.filter(extension_id=extension_id).order_by(
                "level_rank", "-set_at_ms"
            )[:ROWS]
        ),
        "attention_visible": row.status == ExtensionStatus.RUNNING
        and "attention" in row.admitted_grants,
        "jobs": [
            {
                "id": job.pk,
                "name": job.name,
                "next_run_at": _ms(job.next_run_at),
                "last_run_at": _ms(job.last_run_at),
                "outcome": job.last_outcome,
                "error": job.last_error,
                "runs": job.runs,
                "failures": job.failures,
            }
            for job in JobState.objects.filter(extension_id=extension_id).order_by("name")[:ROWS]
        ],
        "workers": _workers(extension_id),
        "notifiers": list(
            NotifierHealth.objects.filter(extension_id=extension_id).order_by("notifier")[:ROWS]
        ),
        "audit": list(AuditEntry.objects.filter(target=extension_id).order_by("-at", "-id")[:ROWS]),
    }


def _workers(extension_id: str) -> list[dict[str, Any]]:
    """The extension's workers: each with a run state, then those declared here that never ran
    (they have no state row until their first wake)."""
    rows = [
        {
            "name": worker.name,
            "runs": worker.runs,
            "last_run_at": _ms(worker.last_run_at),
            "outcome": worker.last_outcome,
            "error": worker.last_error,
            "running": worker.lease_live,
        }
        for worker in WorkerState.objects.filter(extension_id=extension_id)
        .with_lease(clock.now_ms())
        .order_by("name")[:ROWS]
    ]
    loaded = registry.get(extension_id)
    seen = {row["name"] for row in rows}
    declared = workers_of(loaded.definition) if loaded is not None else ()
    never_ran = [
        {"name": name, "runs": 0, "last_run_at": None, "outcome": "", "error": "never ran"}
        for name in sorted(worker.name for worker in declared if worker.name not in seen)
    ]
    return rows + never_ran[: max(ROWS - len(rows), 0)]


# --- the conversation page ---------------------------------------------------------------------


def conversation_sections(
    *, user: AbstractBaseUser | AnonymousUser, conversation_id: str
) -> dict[str, Any]:
    """The sections of one conversation's page: the newest entries, submissions and runs, the
    projection preview (the `project` hooks run read-only, as for the API), visible attention,
    ambient surfaces and interactions."""
    principal = inspector_principal(user)
    entries = list(Entry.objects.filter(conversation_id=conversation_id).order_by("-pk")[:ROWS])
    counts = Entry.objects.filter(conversation_id=conversation_id).aggregate(
        n=Count("id"), head=Max("id")
    )
    return {
        "entries": [
            {
                "id": entry.pk,
                "role": entry.role,
                "text": preview(content_text(entry.content), 400),
                "withdrawn": entry.withdrawn,
                "created_at": entry.created_at,
            }
            for entry in reversed(entries)
        ],
        "entry_count": counts["n"],
        "head": counts["head"],
        "submissions": list(
            Submission.objects.filter(conversation_id=conversation_id).order_by("-pk")[:ROWS]
        ),
        "runs": list(
            Run.objects.filter(conversation_id=conversation_id)
            .defer("capture")
            .order_by("-pk")[:ROWS]
        ),
        "projection": projection_slots(principal=principal, conversation_id=conversation_id),
        "attention": attention_visible(conversation_id=conversation_id),
        "ambient": ambient_read(conversation_id=conversation_id),
        "interactions": interactions_read(conversation_id=conversation_id),
        "has_world": World.objects.filter(pk=conversation_id).exists(),
    }
