"""Reads of the conversation surfaces: visible attention and ambient (the conversation view, the
projection response, the inspector) and interactions."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from core import clock
from extensions_host.surfaces.models import AmbientSurface, AttentionItem, Interaction
from extensions_host.surfaces.services.common import visible_extension_ids

ATTENTION_VIEW_MAX = 1024


def attention_visible(
    *, conversation_id: str, extension_ids: list[str] | None = None
) -> list[dict[str, Any]]:
    """The conversation's visible attention: items of running extensions granted `attention`,
    not expired (host clock), ordered by level (action, warning, info), then the newest set
    first."""
    visible = visible_extension_ids() if extension_ids is None else extension_ids
    if not visible:
        return []
    now = clock.now_ms()
    rows = (
        AttentionItem.objects.filter(conversation_id=conversation_id, extension_id__in=visible)
        .filter(Q(expires_at_ms__isnull=True) | Q(expires_at_ms__gt=now))
        .order_by("level_rank", "-set_at_ms", "extension_id", "item_id")[:ATTENTION_VIEW_MAX]
    )
    return [_attention_wire(row) for row in rows]


def _attention_wire(row: AttentionItem) -> dict[str, Any]:
    item: dict[str, Any] = {
        "extension": row.extension_id,
        "id": row.item_id,
        "level": row.level,
        "title": row.title,
        "set_at_ms": row.set_at_ms,
    }
    if row.body:
        item["body"] = row.body
    if row.command is not None:
        item["command"] = row.command
    if row.expires_at_ms is not None:
        item["expires_at_ms"] = row.expires_at_ms
    return item


def ambient_visible(
    *, conversation_id: str, extension_ids: list[str] | None = None
) -> list[dict[str, Any]]:
    """The conversation's ambient surfaces that have content, of running extensions granted
    `attention`, ordered by place then key."""
    visible = visible_extension_ids() if extension_ids is None else extension_ids
    if not visible:
        return []
    rows = AmbientSurface.objects.filter(
        conversation_id=conversation_id, extension_id__in=visible, cleared=False
    ).order_by("place", "key")
    return [
        {
            "key": row.key,
            "extension": row.extension_id,
            "place": row.place,
            "max_rows": row.max_rows,
            "overflow": row.overflow,
            "refresh_ms": row.refresh_ms,
            "body": row.body,
            "details": row.details,
            "updated_at_ms": row.updated_at_ms,
        }
        for row in rows
    ]


def interactions_of(*, conversation_id: str, status: str | None = None) -> QuerySet[Interaction]:
    qs = Interaction.objects.filter(conversation_id=conversation_id)
    if status is not None:
        qs = qs.filter(status=status)
    return qs
