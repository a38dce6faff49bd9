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
from artifacts.fingerprints import MSG_PAYLOAD_UNDECODABLE
from artifacts.models import Event, Invalidation, Operation, Record, World
from artifacts.services import Problem, integrity_check
from core.admin import BigTableAdmin, ReadOnlyAdmin
from core.admin_filters import value_filter

PROBLEMS_SHOWN = 20
# Worlds one run of the integrity action checks: it runs in the request, and each world is a
# full read of its records and events. The whole store is `manage.py verify_artifacts`'s.
INTEGRITY_WORLDS_MAX = 50
DEBUG_RECORDS_SHOWN = 500
DEBUG_OPERATIONS_SHOWN = 100
DEBUG_EVENTS_SHOWN = 200
DEBUG_PAYLOAD_SHOWN = 2000  # characters of a payload the debug view prints

MSG_TOO_MANY_WORLDS = (
    f"Select at most {INTEGRITY_WORLDS_MAX} worlds to check at once; nothing was checked. "
    "Run `manage.py verify_artifacts` to check the whole store."
)


def _as_json(value: Any) -> str:
    """A payload or mapping as staff read it: a text payload as is, anything else as
    pretty-printed JSON (not as a Python repr), cut at `DEBUG_PAYLOAD_SHOWN` characters."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    if len(text) > DEBUG_PAYLOAD_SHOWN:
        return text[:DEBUG_PAYLOAD_SHOWN] + "…"
    return text


def _problem_messages(problems: list[Problem], worlds: int) -> list[str]:
    """The summary line, then the first `PROBLEMS_SHOWN` problems: one world can hold
    thousands, and every one of them would be a line of the page."""
    lines = [f"{len(problems)} problem(s) found in {worlds} world(s)."]
    lines += [str(problem) for problem in problems[:PROBLEMS_SHOWN]]
    if len(problems) > PROBLEMS_SHOWN:
        lines.append(
            f"(the first {PROBLEMS_SHOWN} are shown: `manage.py verify_artifacts` lists them all)"
        )
    return lines


@admin.action(description="Check integrity of the selected worlds")
def check_integrity(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet) -> None:
    """Check the selected worlds, at most `INTEGRITY_WORLDS_MAX` of them: a larger selection
    (above all "select all", which is every world) is refused as a whole with a message, not
    cut to a subset, so "no corruption found" never speaks for worlds that were not checked.
    The check runs in the request and reads every record and event of each world."""
    world_ids = list(queryset.values_list("pk", flat=True).distinct()[: INTEGRITY_WORLDS_MAX + 1])
    if len(world_ids) > INTEGRITY_WORLDS_MAX:
        modeladmin.message_user(request, MSG_TOO_MANY_WORLDS, messages.ERROR)
        return
    problems = integrity_check(world_ids=world_ids)
    if not problems:
        modeladmin.message_user(
            request, f"{len(world_ids)} world(s) checked: no corruption found.", messages.SUCCESS
        )
        return
    for line in _problem_messages(problems, len(world_ids)):
        modeladmin.message_user(request, line, messages.ERROR)


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
        """One world's active projection, its newest records with their effective status, its
        newest operations and latest events, each list capped so the page costs the same
        however long the world has lived; `?check=1` adds the integrity check, which reads
        every record and event of the world and so runs only when asked for."""
        world = get_object_or_404(World, pk=world_id)
        if not self.has_view_permission(request, world):
            return HttpResponse(status=403)
        operation_id = request.GET.get("operation_id") or None
        debug = selectors.debug_read(
            world_id=world_id,
            operation_id=operation_id,
            limit=DEBUG_RECORDS_SHOWN,
            operations_limit=DEBUG_OPERATIONS_SHOWN,
        )
        events = Event.objects.filter(world_id=world_id).order_by("-sequence")[:DEBUG_EVENTS_SHOWN]
        projection = selectors.projection_read(world_id=world_id)
        for item in projection:
            item["payload_text"] = _as_json(item["payload"])
        for row in debug["records"]:
            # an undecodable payload is None, with the start of its raw text beside it
            undecodable = row["payload_undecodable"]
            row["payload_text"] = row["payload_raw"] if undecodable else _as_json(row["payload"])
        for operation in debug["operations"]:
            operation["request_attempts_text"] = _as_json(operation["request_attempts"])
        checked = request.GET.get("check") == "1"
        problems = integrity_check(world_ids=[world_id]) if checked else []
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Artifacts of {world_id}",
            "world": world,
            "debug": debug,
            "events": list(events),
            "checked": checked,
            "problems": problems[:PROBLEMS_SHOWN],
            "problem_count": len(problems),
            "problems_shown": PROBLEMS_SHOWN,
            "projection": projection,
            "operation_id": operation_id,
            "records_shown": DEBUG_RECORDS_SHOWN,
            "operations_shown": DEBUG_OPERATIONS_SHOWN,
            "events_shown": DEBUG_EVENTS_SHOWN,
            "undecodable": MSG_PAYLOAD_UNDECODABLE,
        }
        return TemplateResponse(request, "admin/artifacts/world/debug.html", context)


@admin.register(Operation)
class OperationAdmin(BigTableAdmin, ReadOnlyAdmin):
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
    # the primary key, like records and events: no index leads with created_at, so ordering by
    # it would sort the whole table for every page
    ordering = ["-pk"]

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
class RecordAdmin(BigTableAdmin, ReadOnlyAdmin):
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


# Every reason an event is written with (the `reason=` and `supersede(…, reason)` arguments in
# artifacts/services): supersede events name what invalidated the record, clear and
# ignored_call events how the clear was taken. tests/artifacts/test_admin_bounds.py checks
# this list against the services' source.
EVENT_REASONS: tuple[str, ...] = (
    Invalidation.NEW_OPERATION,
    Invalidation.HEAD_CHANGE,
    Invalidation.OPERATION_END,
    Invalidation.EXPLICIT_CLEAR,
    "core_failed",
    "followup_failed",
    "request_attempt_superseded",
    "late_superseded_operation_result",
    "stale_clear_ignored",
)


@admin.register(Event)
class EventAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ["world", "sequence", "kind", "operation", "record_id", "reason", "head"]
    # from the fixed list of reasons the services write: a plain filter on the column would
    # run `SELECT DISTINCT reason` over the whole event table on every list page
    list_filter = ["kind", value_filter("reason", lambda: EVENT_REASONS)]
    search_fields = ["world__conversation__id", "operation__id", "record_id", "tool_call_id"]
    ordering = ["-pk"]
