"""The staff console for extensions: status, reasons, grants, resume and admission.

The list shows each extension's figures at a glance (status badge, version, revision, grants,
settled lag, timers, restarts, usage against quota) in a fixed number of queries; the page of
one extension adds its stop, grants (editable, with a confirmation), settings, secret keys,
cursor, timers, records browser, documents, attention items, jobs, workers and audit trail.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.db.models.functions import Substr
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.admin import BigTableAdmin, ReadOnlyAdmin
from core.admin_filters import ListDefersAdmin, on_changelist, value_filter
from core.errors import HostError
from extensions_host import registry
from extensions_host.models import (
    DocumentDeclaration,
    ExtensionDocument,
    ExtensionRecord,
    ExtensionStatus,
    RosterEntry,
)
from extensions_host.services.quotas import (
    QUOTA_NAMES,
    quota_limit,
    quotas_parsed,
    quotas_problems,
    usage_totals,
)
from extensions_host.services.roster import (
    extension_admit_grants,
    extension_limits_update,
    extension_purge,
    extension_resume,
)

MSG_NONE_STOPPED = "None of the selected extensions is stopped: nothing to resume."
MSG_GRANTS_NOT_REQUESTED = "Only grants the extension requests can be admitted."
MSG_CONFIRM_GRANTS = "Tick the confirmation to change the admitted grants: {change}."
FILTER_MAX = 256
PREVIEW_CHARS = 120  # of a record's value in the record list


def _roster_ids() -> Iterable[str]:
    return RosterEntry.objects.order_by("id").values_list("id", flat=True)


def _declared_collections() -> Iterable[str]:
    return sorted(
        {name for ext in registry.loaded().values() for name in ext.definition.collections}
    )


def _declared_documents() -> Iterable[str]:
    return DocumentDeclaration.objects.order_by("name").values_list("name", flat=True).distinct()


# The console's filters on the big tables' plain columns (core.admin_filters): the choices come
# from the roster (one row per extension), the loaded extensions' declarations and the
# document declarations, never from a DISTINCT over the filtered table.
ExtensionIdFilter = value_filter("extension_id", _roster_ids, title="extension")
CollectionFilter = value_filter("collection", _declared_collections)
DocumentNameFilter = value_filter("name", _declared_documents, title="document")


def _compact(n: int) -> str:
    """100000 → "100k", 2500000 → "2.5M": quota figures that fit in a list column."""
    for suffix, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size:
            return f"{n / size:.1f}".removesuffix(".0") + suffix
    return str(n)


def status_badge(status: str) -> str:
    return format_html('<span class="hy-badge hy-{}">{}</span>', status, status)


class RosterEntryForm(forms.ModelForm):
    """Admitted grants as checkboxes over what the extension requests; a change takes an
    explicit confirmation (granting lets the extension act, revoking stops what it does)."""

    admitted_grants = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Only requested grants can be admitted.",
    )
    confirm_grants = forms.BooleanField(
        required=False,
        label="Confirm grant change",
        help_text="Required when the admitted grants change.",
    )

    class Meta:
        model = RosterEntry
        fields = ["admitted_grants", "auto_resume", "deadline_seconds", "quotas"]
        help_texts = {
            "quotas": "Overrides of the global quotas, as a JSON object of "
            + ", ".join(QUOTA_NAMES)
            + ' to non-negative integers, e.g. {"max_records": 1000}.'
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        requested = set(self.instance.requested_grants or [])
        admitted = set(self.instance.admitted_grants or [])
        self.fields["admitted_grants"].choices = [  # type: ignore[attr-defined]
            (grant, grant if grant in requested else f"{grant} (no longer requested)")
            for grant in sorted(requested | admitted)
        ]

    def clean_quotas(self) -> dict[str, int]:
        """Overrides by quota name, each a non-negative integer; empty means none."""
        raw = self.cleaned_data.get("quotas")
        problems = quotas_problems(raw)
        if problems:
            raise forms.ValidationError(problems)
        return quotas_parsed(raw)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if "admitted_grants" not in self.changed_data:
            return cleaned
        before = set(self.instance.admitted_grants or [])
        after = set(cleaned.get("admitted_grants") or [])
        if after - set(self.instance.requested_grants or []):
            self.add_error("admitted_grants", MSG_GRANTS_NOT_REQUESTED)
        elif not cleaned.get("confirm_grants"):
            change = ", ".join(
                [f"admit {g}" for g in sorted(after - before)]
                + [f"revoke {g}" for g in sorted(before - after)]
            )
            self.add_error("confirm_grants", MSG_CONFIRM_GRANTS.format(change=change))
        return cleaned


@admin.register(RosterEntry)
class RosterEntryAdmin(admin.ModelAdmin):
    form = RosterEntryForm
    change_form_template = "admin/extensions_host/rosterentry/change_form.html"
    list_display = [
        "id",
        "status_badge",
        "version",
        "short_revision",
        "grants",
        "lag",
        "timers",
        "restarts",
        "usage_vs_quota",
        "stop_reason",
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
        "requested",
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
        (
            "Grants",
            {"fields": ["requested", "admitted_grants", "pending", "confirm_grants"]},
        ),
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

    def get_queryset(self, request: HttpRequest) -> QuerySet[RosterEntry]:
        from inspector.console import roster_list_annotate

        queryset = super().get_queryset(request)
        # the per-row figures only on the list (the change page reads its own sections)
        if on_changelist(request):
            queryset = roster_list_annotate(queryset)
        return queryset

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: RosterEntry) -> str:
        return status_badge(obj.status)

    @admin.display(description="revision")
    def short_revision(self, obj: RosterEntry) -> str:
        return format_html('<code title="{}">{}</code>', obj.revision, obj.revision[:12])

    @admin.display(description="grants")
    def grants(self, obj: RosterEntry) -> str:
        pending = obj.pending_grants
        admitted = ", ".join(obj.admitted_grants) or "none"
        if not pending:
            return admitted
        return format_html(
            '{} <span class="hy-badge hy-warning" title="requested, not admitted: {}">'
            "+{} pending</span>",
            admitted,
            ", ".join(pending),
            len(pending),
        )

    @admin.display(description="lag")
    def lag(self, obj: RosterEntry) -> str:
        position = getattr(obj, "settled_position", None)
        if position is None:
            return "—"
        lag = max(obj.core_cursor - position, 0)  # type: ignore[attr-defined]
        return format_html('<span class="hy-num{}">{}</span>', " hy-hot" if lag else "", lag)

    @admin.display(description="timers due / all")
    def timers(self, obj: RosterEntry) -> str:
        due = getattr(obj, "timers_due", 0)
        pending = getattr(obj, "timers_pending", 0)
        return format_html(
            '<span class="hy-num{}">{}</span> / {}', " hy-hot" if due else "", due, pending
        )

    @admin.display(description="restarts", ordering="restart_count")
    def restarts(self, obj: RosterEntry) -> int:
        return obj.restart_count

    @admin.display(description="usage / quota")
    def usage_vs_quota(self, obj: RosterEntry) -> str:
        records = getattr(obj, "usage_records", 0)
        size = getattr(obj, "usage_bytes", 0)
        max_records = quota_limit(overrides=obj.quotas, name="max_records")
        max_bytes = quota_limit(overrides=obj.quotas, name="max_bytes")
        return format_html(
            '<span class="hy-nowrap">{} / {} records</span><br>'
            '<span class="hy-nowrap">{} / {}</span>',
            records,
            _compact(max_records),
            filesizeformat(size),
            filesizeformat(max_bytes),
        )

    @admin.display(description="stop reason")
    def stop_reason(self, obj: RosterEntry) -> str:
        if obj.status != ExtensionStatus.STOPPED:
            return ""
        reason = obj.reason if len(obj.reason) <= 120 else obj.reason[:119] + "…"
        return format_html('<span class="hy-reason" title="{}">{}</span>', obj.reason, reason)

    @admin.display(description="requested grants")
    def requested(self, obj: RosterEntry) -> str:
        return ", ".join(obj.requested_grants or []) or "—"

    @admin.display(description="requested, not admitted")
    def pending(self, obj: RosterEntry) -> str:
        return ", ".join(obj.pending_grants) or "—"

    @admin.display(description="usage")
    def usage(self, obj: RosterEntry) -> str:
        records, size = usage_totals(extension_id=obj.id)
        return f"{records} records, {size} bytes"

    def get_urls(self) -> list:
        resume = path(
            "<str:extension_id>/resume/",
            self.admin_site.admin_view(self.resume_view),
            name="extensions_host_rosterentry_resume",
        )
        return [resume, *super().get_urls()]

    def resume_view(self, request: HttpRequest, extension_id: str) -> HttpResponse:
        """Resume one extension from its page: a confirmation page, then the audited resume."""
        if not self.has_change_permission(request):
            return HttpResponse(status=403)
        stopped = RosterEntry.objects.filter(pk=extension_id, status=ExtensionStatus.STOPPED)
        change_url = reverse("admin:extensions_host_rosterentry_change", args=[extension_id])
        if not stopped.exists():
            if not RosterEntry.objects.filter(pk=extension_id).exists():
                raise Http404("Extension not found")
            self.message_user(request, f"{extension_id} is not stopped.", messages.WARNING)
            return HttpResponseRedirect(change_url)
        if request.method == "POST" and request.POST.get("confirm") == "yes":
            extension_resume(extension_id=extension_id, actor=request.user.get_username())
            self.message_user(request, f"Resumed {extension_id}.", messages.SUCCESS)
            return HttpResponseRedirect(change_url)
        page = self._confirmed(
            request,
            stopped,
            action="resume_selected",
            title=f"Resume {extension_id}",
            message="This stopped extension will run again (auto-resume counters reset).",
            confirm_label="Yes, resume",
        )
        assert page is not None
        return page

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        from inspector.console import extension_sections

        row = RosterEntry.objects.filter(pk=object_id).first()
        extra = dict(extra_context or {})
        if row is not None:
            filters = {
                name: request.GET.get(name, "")[:FILTER_MAX]
                for name in ("collection", "key", "index")
            }
            extra["console"] = extension_sections(row, filters=filters)
            for entry in extra["console"]["audit"]:
                # JSON, as the audit entry's own page shows it, not a Python repr
                entry.detail_json = json.dumps(entry.detail, ensure_ascii=False)
            extra["row"] = row
        return super().change_view(request, object_id, form_url, extra)

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Not wrapped in the admin's usual transaction: every write of this page goes through
        # a service with its own (durable) transaction, which cannot nest in another one.
        # the view Django's own `changeform_view` wraps in its transaction (a private method:
        # the stubs leave it out)
        changeform = self._changeform_view  # type: ignore[attr-defined]
        return changeform(request, object_id, form_url, extra_context)

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
        changed = {
            name: getattr(obj, name)
            for name in ("auto_resume", "deadline_seconds", "quotas")
            if name in form.changed_data
        }
        if not changed:
            return
        try:
            extension_limits_update(
                extension_id=obj.id, actor=request.user.get_username(), **changed
            )
        except HostError as exc:
            self.message_user(request, exc.message, messages.ERROR)

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

    @admin.action(description="Resume selected extensions", permissions=["change"])
    def resume_selected(
        self, request: HttpRequest, queryset: QuerySet[RosterEntry]
    ) -> TemplateResponse | None:
        stopped = queryset.filter(status=ExtensionStatus.STOPPED)
        if not stopped.exists():  # no confirmation page, no audit entry, no "Resumed 0"
            self.message_user(request, MSG_NONE_STOPPED, messages.WARNING)
            return None
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

    @admin.action(description="Admit every requested grant", permissions=["change"])
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

    @admin.action(description="Purge data of uninstalled extensions", permissions=["change"])
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


@admin.register(ExtensionRecord)
class ExtensionRecordAdmin(BigTableAdmin, ListDefersAdmin, ReadOnlyAdmin):
    list_display = ["extension_id", "collection", "key", "index", "size_bytes", "preview"]
    list_filter = ["extension", CollectionFilter]
    search_fields = ["key", "index"]
    list_defer = ("value",)  # the list reads the start it shows (`preview`), the page the whole

    def get_queryset(self, request: HttpRequest) -> QuerySet[ExtensionRecord]:
        queryset = super().get_queryset(request)
        if on_changelist(request):
            queryset = queryset.annotate(value_start=Substr("value", 1, PREVIEW_CHARS + 1))
        return queryset

    @admin.display(description="value")
    def preview(self, obj: ExtensionRecord) -> str:
        start: str = obj.value_start if hasattr(obj, "value_start") else obj.value
        return start if len(start) <= PREVIEW_CHARS else start[: PREVIEW_CHARS - 1] + "…"


@admin.register(ExtensionDocument)
class ExtensionDocumentAdmin(BigTableAdmin, ListDefersAdmin, ReadOnlyAdmin):
    list_display = ["extension_id", "name", "conversation_id", "updated_at"]
    list_filter = ["extension", DocumentNameFilter]
    search_fields = ["conversation__id"]
    list_defer = ("value",)


@admin.register(DocumentDeclaration)
class DocumentDeclarationAdmin(ReadOnlyAdmin):
    list_display = ["extension_id", "name", "max_bytes", "fork"]
