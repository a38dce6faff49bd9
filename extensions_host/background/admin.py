"""Staff console for background work: timers, settled cursors and lag, the lifecycle outbox,
workers, jobs (with a manual trigger). Read-only: the rows are the services'."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from core import clock
from core.admin import ReadOnlyAdmin
from core.errors import HostError
from extensions_host.background.models import (
    JobState,
    LifecycleDelivery,
    SettledCursor,
    Timer,
    WorkerState,
)
from extensions_host.background.services.jobs import job_trigger
from extensions_host.background.services.settled import core_cursor


def _ms(value: int | None) -> str:
    return "" if value is None else f"{clock.from_ms(value):%Y-%m-%d %H:%M:%S.%f}"[:-3]


@admin.register(Timer)
class TimerAdmin(ReadOnlyAdmin):
    list_display = ["extension", "key", "due", "fire", "retry_attempt"]
    list_filter = ["extension"]
    search_fields = ["key"]
    ordering = ["fire_at", "id"]

    @admin.display(description="due at (UTC)", ordering="due_at")
    def due(self, obj: Timer) -> str:
        return _ms(obj.due_at)

    @admin.display(description="next offered (UTC)", ordering="fire_at")
    def fire(self, obj: Timer) -> str:
        return _ms(obj.fire_at)


@admin.register(SettledCursor)
class SettledCursorAdmin(ReadOnlyAdmin):
    list_display = ["extension_id", "position", "lag", "retry_attempt", "updated_at"]

    @admin.display(description="lag (core cursor − cursor)")
    def lag(self, obj: SettledCursor) -> int:
        return max(core_cursor() - obj.position, 0)


@admin.register(LifecycleDelivery)
class LifecycleDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["event_id", "extension_id", "kind", "conversation_id", "retry_attempt"]
    list_filter = ["extension_id", "kind"]
    ordering = ["event_id"]


@admin.register(WorkerState)
class WorkerStateAdmin(ReadOnlyAdmin):
    list_display = ["extension_id", "name", "runs", "last_outcome", "last_run", "last_error"]

    @admin.display(description="last run (UTC)")
    def last_run(self, obj: WorkerState) -> str:
        return _ms(obj.last_run_at)


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

    @admin.display(description="next run (UTC)", ordering="next_run_at")
    def next_run(self, obj: JobState) -> str:
        return _ms(obj.next_run_at)

    @admin.display(description="last run (UTC)", ordering="last_run_at")
    def last_run(self, obj: JobState) -> str:
        return _ms(obj.last_run_at)

    @admin.action(description="Run the selected jobs now")
    def trigger_selected(self, request: HttpRequest, queryset: QuerySet[JobState]) -> None:
        for job in queryset:
            try:
                job_trigger(job_id=job.pk, actor=request.user.get_username())
            except HostError as exc:
                self.message_user(request, f"{job.pk}: {exc.message}", messages.ERROR)
            else:
                self.message_user(request, f"{job.pk}: triggered", messages.SUCCESS)
