"""Read-only admin for the artifact store: worlds (with the debug view and the integrity
check), operations, records and events. Staff inspect here; only the store's services write."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from artifacts import selectors
from artifacts.models import Event, Operation, Record, World
from artifacts.services import integrity_check
from core.admin import ReadOnlyAdmin

PROBLEMS_SHOWN = 20
DEBUG_EVENTS_SHOWN = 200
DEBUG_PAYLOAD_SHOWN = 2000  # characters of a payload the debug view prints


def _as_json(value: Any) -> str:
    """A payload or mapping as staff read it: a text payload as is, anything else as
    pretty-printed JSON (not as a Python repr), cut at `DEBUG_PAYLOAD_SHOWN` characters."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    if len(text) > DEBUG_PAYLOAD_SHOWN:
        return text[:DEBUG_PAYLOAD_SHOWN] + "…"
    return text


@admin.action(description="Check integrity of the selected worlds")
def check_integrity(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    world_ids = list(queryset.values_list("pk", flat=True).distinct())
    problems = integrity_check(world_ids=world_ids)
    if not problems:
        modeladmin.message_user(
            request, f"{len(world_ids)} world(s) checked: no corruption found.", messages.SUCCESS
        )
        return
    modeladmin.message_user(
        request,
        f"{len(problems)} problem(s) found in {len(world_ids)} world(s).",
        messages.ERROR,
    )
    for problem in problems[:PROBLEMS_SHOWN]:
        modeladmin.message_user(request, str(problem), messages.ERROR)


@admin.register(World)
class WorldAdmin(ReadOnlyAdmin):
    list_display = ["conversation_id", "created_at", "debug_link"]
    search_fields = ["conversation__id"]
    actions = [check_integrity]

    @admin.display(description="debug")
    def debug_link(self, world: World) -> str:
        url = reverse("admin:artifacts_world_debug", args=[world.pk])
        return format_html('<a href="{}">debug view</a>', url)

    def get_urls(self) -> list:
        debug = path(
            "<str:world_id>/debug/",
            self.admin_site.admin_view(self.debug_view),
            name="artifacts_world_debug",
        )
        return [debug, *super().get_urls()]

    def debug_view(self, request: HttpRequest, world_id: str) -> HttpResponse:
        """Every record with its effective status, the operations, the latest events and the
        integrity check of one world."""
        world = get_object_or_404(World, pk=world_id)
        if not self.has_view_permission(request, world):
            return HttpResponse(status=403)
        operation_id = request.GET.get("operation_id") or None
        debug = selectors.debug_read(world_id=world_id, operation_id=operation_id, limit=500)
        events = Event.objects.filter(world_id=world_id).order_by("-sequence")[:DEBUG_EVENTS_SHOWN]
        projection = selectors.projection_read(world_id=world_id)
        for item in [*projection, *debug["records"]]:
            item["payload_text"] = _as_json(item["payload"])
        for operation in debug["operations"]:
            operation["request_attempts_text"] = _as_json(operation["request_attempts"])
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Artifacts of {world_id}",
            "world": world,
            "debug": debug,
            "events": list(events),
            "problems": integrity_check(world_ids=[world_id]),
            "projection": projection,
        }
        return TemplateResponse(request, "admin/artifacts/world/debug.html", context)


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "world",
        "status",
        "followup_status",
        "projection_status",
        "head",
        "attempts",
        "updated_at",
    ]
    list_filter = ["status", "followup_status", "projection_status"]
    search_fields = ["id", "world__conversation__id"]
    ordering = ["-created_at"]

    @admin.display(description="request attempts")
    def attempts(self, operation: Operation) -> str:
        """Each request's current attempt (`request_id=attempt`, by request id)."""
        attempts = operation.request_attempts
        return ", ".join(f"{request}={attempts[request]}" for request in sorted(attempts)) or "-"


class RecordChangeList(ChangeList):
    """The record list, with each listed record's effective status read for the whole page."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        statuses = selectors.record_statuses(self.result_list)
        for record in self.result_list:
            record.effective_status = statuses[record.pk]


@admin.register(Record)
class RecordAdmin(ReadOnlyAdmin):
    list_display = [
        "record_id",
        "world",
        "sequence",
        "operation",
        "output",
        "channel",
        "strategy",
        "save_mode",
        "status",
        "activated",
        "superseded",
        "bound_head",
    ]
    list_filter = ["save_mode", "strategy", "invalidation", "superseded", "activated"]
    search_fields = ["record_id", "world__conversation__id", "operation__id", "tool_call_id"]
    ordering = ["-pk"]
    # the payload can be 4 MiB: show its size and fingerprint, not the text, in the form
    exclude = ["payload"]
    readonly_fields = ["payload_preview"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).defer("payload")

    def get_changelist(self, request: HttpRequest, **kwargs: object) -> type[ChangeList]:
        return RecordChangeList

    @admin.display(description="status")
    def status(self, record: Record) -> str:
        """The effective status (`read_debug`'s): the raw columns alone miss what supersedes
        a record after the fact (its operation superseded, a newer attempt) and clears."""
        status = getattr(record, "effective_status", None)
        if status is None:  # outside the list page
            status = selectors.record_statuses([record])[record.pk]
        return status

    @admin.display(description="payload (first 2000 characters)")
    def payload_preview(self, record: Record) -> str:
        if record.payload is None:
            return "(save=none: kept only in the cache)"
        return record.payload[:2000]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["world", "sequence", "kind", "operation", "record_id", "reason", "head"]
    list_filter = ["kind", "reason"]
    search_fields = ["world__conversation__id", "operation__id", "record_id", "tool_call_id"]
    ordering = ["-pk"]
