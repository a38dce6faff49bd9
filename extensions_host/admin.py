"""The staff console for extensions: status, reasons, grants, resume and admission."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html

from core.errors import HostError
from extensions_host.models import (
    DocumentDeclaration,
    ExtensionDocument,
    ExtensionRecord,
    ExtensionStatus,
    RosterEntry,
)
from extensions_host.services.quotas import usage_totals
from extensions_host.services.roster import (
    extension_admit_grants,
    extension_purge,
    extension_resume,
)

_BADGE = {
    ExtensionStatus.RUNNING: "#1a7f37",
    ExtensionStatus.STOPPED: "#cf222e",
    ExtensionStatus.UNINSTALLED: "#6e7781",
}


@admin.register(RosterEntry)
class RosterEntryAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "status_badge",
        "version",
        "short_revision",
        "admitted",
        "restart_count",
        "stopped_at",
    ]
    list_filter = ["status", "auto_resume"]
    search_fields = ["id", "reason"]
    actions = ["resume_selected", "admit_requested_grants", "purge_uninstalled"]
    readonly_fields = [
        "id",
        "version",
        "revision",
        "fingerprint",
        "status",
        "reason",
        "stopped_at",
        "failing_hook",
        "stop_event_id",
        "requested_grants",
        "pending",
        "state_version",
        "ledger_revision",
        "activation_epoch",
        "restart_count",
        "last_error",
        "next_auto_resume_at",
        "usage",
        "created_at",
        "updated_at",
    ]
    fieldsets = [
        (None, {"fields": ["id", "version", "revision", "fingerprint", "status"]}),
        (
            "Stop",
            {"fields": ["reason", "stopped_at", "failing_hook", "stop_event_id", "last_error"]},
        ),
        ("Grants", {"fields": ["requested_grants", "admitted_grants", "pending"]}),
        (
            "Recovery",
            {"fields": ["auto_resume", "restart_count", "next_auto_resume_at", "deadline_seconds"]},
        ),
        (
            "State",
            {"fields": ["state_version", "ledger_revision", "activation_epoch", "usage", "quotas"]},
        ),
        (None, {"fields": ["created_at", "updated_at"]}),
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # rows come from sync_roster

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # purging an uninstalled extension's data is a separate, audited action

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: RosterEntry) -> str:
        return format_html('<b style="color:{}">{}</b>', _BADGE.get(obj.status, "#000"), obj.status)

    @admin.display(description="revision")
    def short_revision(self, obj: RosterEntry) -> str:
        return obj.revision[:12]

    @admin.display(description="admitted grants")
    def admitted(self, obj: RosterEntry) -> str:
        return ", ".join(obj.admitted_grants)

    @admin.display(description="requested, not admitted")
    def pending(self, obj: RosterEntry) -> str:
        return ", ".join(obj.pending_grants) or "—"

    @admin.display(description="usage")
    def usage(self, obj: RosterEntry) -> str:
        records, size = usage_totals(extension_id=obj.id)
        return f"{records} records, {size} bytes"

    def save_model(self, request: HttpRequest, obj: RosterEntry, form: Any, change: bool) -> None:
        if "admitted_grants" in form.changed_data:
            try:
                extension_admit_grants(
                    extension_id=obj.id,
                    grants=list(obj.admitted_grants),
                    actor=request.user.get_username(),
                )
            except HostError as exc:
                self.message_user(request, exc.message, messages.ERROR)
                return
        fields = [
            f for f in form.changed_data if f in {"auto_resume", "deadline_seconds", "quotas"}
        ]
        if fields:
            obj.save(update_fields=[*fields, "updated_at"])

    def _confirmed(
        self,
        request: HttpRequest,
        queryset: QuerySet[RosterEntry],
        *,
        action: str,
        title: str,
        message: str,
        confirm_label: str,
    ) -> TemplateResponse | None:
        """None once staff confirmed (the form posted back) or when nothing applies; else the
        confirmation page."""
        if request.POST.get("confirm") == "yes" or not queryset.exists():
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "message": message,
            "confirm_label": confirm_label,
            "queryset": queryset,
            "action": action,
            "opts": self.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/extensions_host/confirm_action.html", context)

    @admin.action(description="Resume selected extensions")
    def resume_selected(
        self, request: HttpRequest, queryset: QuerySet[RosterEntry]
    ) -> TemplateResponse | None:
        stopped = queryset.filter(status=ExtensionStatus.STOPPED)
        page = self._confirmed(
            request,
            stopped,
            action="resume_selected",
            title="Resume extensions",
            message="These stopped extensions will run again (auto-resume counters reset).",
            confirm_label="Yes, resume",
        )
        if page is not None:
            return page
        resumed = 0
        for row in stopped:
            result = extension_resume(extension_id=row.id, actor=request.user.get_username())
            resumed += result.status == ExtensionStatus.RUNNING
        self.message_user(request, f"Resumed {resumed} extension(s).")
        return None

    @admin.action(description="Admit every requested grant")
    def admit_requested_grants(
        self, request: HttpRequest, queryset: QuerySet[RosterEntry]
    ) -> TemplateResponse | None:
        page = self._confirmed(
            request,
            queryset,
            action="admit_requested_grants",
            title="Admit grants",
            message="Every grant these extensions request will be admitted.",
            confirm_label="Yes, admit",
        )
        if page is not None:
            return page
        for row in queryset:
            extension_admit_grants(
                extension_id=row.id,
                grants=list(row.requested_grants),
                actor=request.user.get_username(),
            )
        self.message_user(request, f"Admitted requested grants of {queryset.count()} extension(s).")
        return None

    @admin.action(description="Purge data of uninstalled extensions")
    def purge_uninstalled(
        self, request: HttpRequest, queryset: QuerySet[RosterEntry]
    ) -> TemplateResponse | None:
        uninstalled = queryset.filter(status=ExtensionStatus.UNINSTALLED)
        page = self._confirmed(
            request,
            uninstalled,
            action="purge_uninstalled",
            title="Purge extension data",
            message="All records and documents of these uninstalled extensions will be deleted.",
            confirm_label="Yes, delete their data",
        )
        if page is not None:
            return page
        purged = [row.id for row in uninstalled]
        for extension_id in purged:
            extension_purge(extension_id=extension_id, actor=request.user.get_username())
        self.message_user(request, f"Purged {len(purged)} extension(s).")
        return None


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ExtensionRecord)
class ExtensionRecordAdmin(_ReadOnly):
    list_display = ["extension", "collection", "key", "index", "size_bytes", "preview"]
    list_filter = ["extension", "collection"]
    search_fields = ["key", "index"]

    @admin.display(description="value")
    def preview(self, obj: ExtensionRecord) -> str:
        return obj.value[:120]


@admin.register(ExtensionDocument)
class ExtensionDocumentAdmin(_ReadOnly):
    list_display = ["extension", "name", "conversation", "updated_at"]
    list_filter = ["extension", "name"]


@admin.register(DocumentDeclaration)
class DocumentDeclarationAdmin(_ReadOnly):
    list_display = ["extension", "name", "max_bytes", "fork"]
