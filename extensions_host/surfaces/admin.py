"""The staff console for the conversation surfaces: attention, ambient, interactions, tool-call
results and notification events (read-mostly: these are written by extensions and users)."""

from __future__ import annotations

from django.contrib import admin

from core.admin import BigTableAdmin, ReadOnlyAdmin
from core.admin_filters import value_filter
from extensions_host import registry
from extensions_host.admin import ExtensionIdFilter
from extensions_host.background.admin import ms_column
from extensions_host.surfaces.models import (
    AmbientSurface,
    AttentionItem,
    Interaction,
    ToolCallResult,
)


def _declared_interaction_kinds() -> list[str]:
    """The kinds the loaded extensions declare (`interaction_kinds`): the only ones they seed."""
    return sorted(
        {kind for ext in registry.loaded().values() for kind in ext.definition.interaction_kinds}
    )


@admin.register(AttentionItem)
class AttentionItemAdmin(ReadOnlyAdmin):
    list_display = ["item_id", "level", "title", "extension", "conversation", "expires_at"]
    list_filter = ["level", "extension"]
    search_fields = ["item_id", "title", "conversation__id"]
    list_select_related = ["extension", "conversation"]
    exclude = ["expires_at_ms", "set_at_ms"]
    readonly_fields = ["expires_at", "set_at"]

    expires_at = ms_column("expires_at_ms", "expires at (UTC)")
    set_at = ms_column("set_at_ms", "set at (UTC)")


@admin.register(AmbientSurface)
class AmbientSurfaceAdmin(ReadOnlyAdmin):
    list_display = ["key", "place", "extension", "conversation", "cleared", "updated_at"]
    list_filter = ["place", "cleared", "extension"]
    search_fields = ["key", "conversation__id"]
    list_select_related = ["extension", "conversation"]
    exclude = ["updated_at_ms"]
    readonly_fields = ["updated_at"]

    updated_at = ms_column("updated_at_ms", "updated at (UTC)")


@admin.register(Interaction)
class InteractionAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ["call_id", "kind", "status", "extension", "conversation", "created_at"]
    list_filter = ["status", value_filter("kind", _declared_interaction_kinds), "extension"]
    search_fields = ["call_id", "prompt", "conversation__id"]
    list_select_related = ["extension", "conversation"]
    exclude = ["created_at_ms", "settled_at_ms"]
    readonly_fields = ["created_at", "settled_at"]

    created_at = ms_column("created_at_ms", "created at (UTC)")
    settled_at = ms_column("settled_at_ms", "settled at (UTC)")


@admin.register(ToolCallResult)
class ToolCallResultAdmin(BigTableAdmin, ReadOnlyAdmin):
    list_display = ["tool_call_id", "run", "extension_id", "tool", "ok", "reason", "created_at"]
    list_filter = ["ok", ExtensionIdFilter]
    search_fields = ["tool_call_id", "reason"]
