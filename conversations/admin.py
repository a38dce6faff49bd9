"""Read-mostly admin for conversations, entries, submissions and runs.

Every change goes through the services (events, versions, locks), so the admin only shows
rows; staff act through the API or the actions of later issues. Lists select their relations
up front so a page is a fixed number of queries, and a conversation links to its (filtered)
entries, submissions and runs instead of inlining an unbounded transcript; its page shows the
newest of each, the projection preview, attention, ambient surfaces and interactions, and
links to the live inspector and the artifact debug view.

No conversation is deleted here, not even by a superuser: a delete would cascade past the
services (no audit entry, no artifact or settled-sequence bookkeeping) into rows whose own
admins are read-only. Conversations go by archive and the retention sweep (`RETENTION_DAYS`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html

from conversations.models import Conversation, Entry, Run, Submission
from core.admin import BigTableAdmin, ReadOnlyAdmin
from core.admin_filters import ListDefersAdmin


def _changelist(model: type[models.Model], label: str, conversation_id: str) -> str:
    url = reverse(f"admin:conversations_{model._meta.model_name}_changelist")
    return format_html('<a href="{}?conversation={}">{}</a>', url, conversation_id, label)


@admin.register(Conversation)
class ConversationAdmin(BigTableAdmin, ReadOnlyAdmin):
    change_form_template = "admin/conversations/conversation/change_form.html"
    list_display = (
        "id",
        "name",
        "owner",
        "sharing",
        "archived",
        "last_activity_at",
        "version",
        "inspect",
    )
    list_filter = ("sharing", "archived")
    search_fields = ("id", "name", "owner__username")
    list_select_related = ("owner",)
    ordering = ("-last_activity_at",)
    readonly_fields = (
        "id",
        "name",
        "owner",
        "sharing",
        "source",
        "archived",
        "archived_at",
        "parent",
        "forked_at_entry",
        "created_at",
        "last_activity_at",
        "version",
        "related",
    )

    @admin.display(description="live")
    def inspect(self, obj: Conversation) -> str:
        return format_html('<a href="{}">inspect</a>', reverse("inspector:page", args=[obj.pk]))

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        from inspector.console import conversation_sections

        extra = dict(extra_context or {})
        if Conversation.objects.filter(pk=object_id).exists():
            extra["console"] = conversation_sections(user=request.user, conversation_id=object_id)
            extra["conversation_id"] = object_id
        return super().change_view(request, object_id, form_url, extra)

    @admin.display(description="transcript and queue")
    def related(self, obj: Conversation) -> str:
        return format_html(
            "{} · {} · {}",
            _changelist(Entry, "entries", obj.pk),
            _changelist(Submission, "submissions", obj.pk),
            _changelist(Run, "runs", obj.pk),
        )


@admin.register(Entry)
class EntryAdmin(BigTableAdmin, ListDefersAdmin, ReadOnlyAdmin):
    list_display = (
        "id",
        "conversation_id",
        "role",
        "run_id",
        "submission_id",
        "withdrawn",
        "created_at",
    )
    list_filter = ("role", "withdrawn")
    search_fields = ("conversation__id",)
    list_defer = ("content",)  # a transcript's text and parts: on the entry's page only
    readonly_fields = (
        "id",
        "conversation",
        "role",
        "content",
        "run",
        "submission",
        "entry_key",
        "withdrawn",
        "created_at",
    )


@admin.register(Submission)
class SubmissionAdmin(BigTableAdmin, ListDefersAdmin, ReadOnlyAdmin):
    list_display = (
        "id",
        "conversation_id",
        "request_id",
        "status",
        "delivery",
        "origin_kind",
        "origin_extension_id",
        "run_id",
        "release_count",
        "created_at",
    )
    list_filter = ("status", "delivery", "origin_kind")
    search_fields = ("conversation__id", "request_id")
    list_defer = ("parts",)  # the prompt's parts: on the submission's page only
    readonly_fields = (
        "id",
        "conversation",
        "request_id",
        "parts",
        "delivery",
        "not_before",
        "origin_kind",
        "origin_user",
        "origin_extension_id",
        "correlation",
        "fingerprint",
        "status",
        "run",
        "release_count",
        "created_at",
        "updated_at",
    )


@admin.register(Run)
class RunAdmin(BigTableAdmin, ListDefersAdmin, ReadOnlyAdmin):
    list_display = (
        "id",
        "conversation_id",
        "status",
        "outcome",
        "settled_sequence",
        "claimed_at",
        "lease_expires_at",
        "settled_at",
    )
    list_filter = ("status", "outcome")
    search_fields = ("conversation__id", "claim_key")
    # what the claim captured (participants, prompt sections, tools, files): on the run's page
    list_defer = ("capture",)
    readonly_fields = (
        "id",
        "conversation",
        "claim_key",
        "status",
        "claimed_at",
        "lease_expires_at",
        "heartbeat_at",
        "settled_at",
        "outcome",
        "answer_entry",
        "reason",
        "settled_sequence",
        "capture",
        "created_at",
        "updated_at",
    )
