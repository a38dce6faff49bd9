"""Staff console for background work: timers, settled cursors and lag, the lifecycle outbox,
workers, jobs (with a manual trigger). Read-only: the rows are the services'."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.db.models import IntegerField, QuerySet, Value
from django.http import HttpRequest

from core import clock
from core.admin import BigTableAdmin, ReadOnlyAdmin
from core.admin_filters import value_filter
from core.errors import HostError
from extensions_host.admin import ExtensionIdFilter
from extensions_host.background.models import (
    JobState,
    LifecycleDelivery,
    SettledCursor,
    Timer,
    WorkerState,
)
from extensions_host.background.services.jobs import job_trigger
from extensions_host.background.services.settled import core_cursor
from extensions_host.sdk import LIFECYCLE_EVENTS


def _ms(value: int | None) -> str:
    return "" if value is None else f"{clock.from_ms(value):%Y-%m-%d %H:%M:%S.%f}"[:-3]


def ms_column(field: str, description: str) -> Callable[[admin.ModelAdmin, Any], str]:
    """A display method showing the host-clock (epoch ms) `field` as a UTC datetime, for list
    columns and, with the raw field excluded, for the read-only detail page."""

    @admin.display(description=description, ordering=field)
    def column(modeladmin: admin.ModelAdmin, obj: Any) -> str:
        return _ms(getattr(obj, field))

    return column


@admin.register(Timer)
class TimerAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ["extension", "key", "due", "fire", "retry_attempt"]
    list_filter = ["extension"]
    search_fields = ["key"]
    ordering = ["fire_at", "id"]
    exclude = ["due_at", "fire_at"]
    readonly_fields = ["due", "fire"]

    due = ms_column("due_at", "due at (UTC)")
    fire = ms_column("fire_at", "next offered (UTC)")


@admin.register(SettledCursor)
class SettledCursorAdmin(ReadOnlyAdmin):
    list_display = ["extension_id", "position", "lag", "retry_attempt", "updated_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[SettledCursor]:
        # the core cursor read once per page, not once per row
        return (
            super()
            .get_queryset(request)
            .annotate(core_cursor=Value(core_cursor(), output_field=IntegerField()))
        )

    @admin.display(description="lag (core cursor − cursor)")
    def lag(self, obj: SettledCursor) -> int:
        return max(obj.core_cursor - obj.position, 0)  # type: ignore[attr-defined]


@admin.register(LifecycleDelivery)
class LifecycleDeliveryAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ["event_id", "extension_id", "kind", "conversation_id", "retry_attempt"]
    list_filter = [ExtensionIdFilter, value_filter("kind", lambda: sorted(LIFECYCLE_EVENTS))]
    # each extension's deliveries in event order, as they are delivered: what
    # `lifecycle_delivery_idx` serves (an order by event id alone sorts the whole table)
    ordering = ["extension_id", "event_id"]


@admin.register(WorkerState)
class WorkerStateAdmin(ReadOnlyAdmin):
    list_display = ["extension_id", "name", "runs", "last_outcome", "last_run", "last_error"]
    exclude = ["running_since", "running_until", "last_run_at"]
    readonly_fields = ["running_since_utc", "running_until_utc", "last_run"]

    running_since_utc = ms_column("running_since", "running since (UTC)")
    running_until_utc = ms_column("running_until", "running until (UTC)")
    last_run = ms_column("last_run_at", "last run (UTC)")


@admin.register(JobState)
class JobStateAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "next_run",
        "last_run",
        "last_outcome",
        "runs",
        "failures",
        "missed_runs",
        "overlap_skips",
    ]
    list_filter = ["extension_id", "last_outcome"]
    actions = ["trigger_selected"]
    exclude = ["next_run_at", "last_run_at", "last_scheduled_for", "last_missed_at"]
    readonly_fields = ["next_run", "last_run", "last_scheduled", "last_missed"]

    next_run = ms_column("next_run_at", "next run (UTC)")
    last_run = ms_column("last_run_at", "last run (UTC)")
    last_scheduled = ms_column("last_scheduled_for", "last scheduled for (UTC)")
    last_missed = ms_column("last_missed_at", "last missed at (UTC)")

    def has_trigger_permission(self, request: HttpRequest) -> bool:
        # the rows are read-only, so the model's change permission is what running one takes
        return request.user.has_perm(f"{self.opts.app_label}.change_{self.opts.model_name}")

    @admin.action(description="Run the selected jobs now", permissions=["trigger"])
    def trigger_selected(self, request: HttpRequest, queryset: QuerySet[JobState]) -> None:
        for job in queryset:
            try:
                job_trigger(job_id=job.pk, actor=request.user.get_username())
            except HostError as exc:
                self.message_user(request, f"{job.pk}: {exc.message}", messages.ERROR)
            else:
                self.message_user(request, f"{job.pk}: triggered", messages.SUCCESS)
