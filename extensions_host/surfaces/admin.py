"""The staff console for the conversation surfaces: attention, ambient, interactions, tool-call
results and notification events (read-mostly: these are written by extensions and users)."""

from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyAdmin
from extensions_host.surfaces.models import (
    AmbientSurface,
    AttentionItem,
    Interaction,
    ToolCallResult,
)


@admin.register(AttentionItem)
class AttentionItemAdmin(ReadOnlyAdmin):
    list_display = ["item_id", "level", "title", "extension", "conversation", "expires_at_ms"]
    list_filter = ["level", "extension"]
    search_fields = ["item_id", "title", "conversation__id"]
    list_select_related = ["extension", "conversation"]


@admin.register(AmbientSurface)
class AmbientSurfaceAdmin(ReadOnlyAdmin):
    list_display = ["key", "place", "extension", "conversation", "cleared", "updated_at_ms"]
    list_filter = ["place", "cleared", "extension"]
    search_fields = ["key", "conversation__id"]
    list_select_related = ["extension", "conversation"]


@admin.register(Interaction)
class InteractionAdmin(ReadOnlyAdmin):
    list_display = ["call_id", "kind", "status", "extension", "conversation", "created_at_ms"]
    list_filter = ["status", "kind", "extension"]
    search_fields = ["call_id", "prompt", "conversation__id"]
    list_select_related = ["extension", "conversation"]


@admin.register(ToolCallResult)
class ToolCallResultAdmin(ReadOnlyAdmin):
    list_display = ["tool_call_id", "run", "extension_id", "tool", "ok", "reason", "created_at"]
    list_filter = ["ok", "extension_id"]
    search_fields = ["tool_call_id", "reason"]
