"""Reads of the inspector page: one conversation's transcript, attention, ambient surfaces,
projection slots, active artifacts and interactions, shaped for the templates.

Each part is read on its own so the live page re-reads only what an event names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from artifacts.choices import ContentType
from artifacts.selectors import projection_read
from conversations.models import Conversation, Entry, Run, RunStatus, Submission, SubmissionStatus
from conversations.selectors import conversation_view
from core import clock
from core.auth import Principal, user_principal
from extensions_host.services.projection import projection_build
from extensions_host.surfaces.models import Interaction, InteractionStatus
from extensions_host.surfaces.selectors import ambient_visible, attention_visible
from inspector.rendering import content_other, content_text, json_pretty, markdown_html

TRANSCRIPT_SHOWN = 200
INTERACTIONS_SHOWN = 50
QUEUE_SHOWN = 20
AMBIENT_PLACES = ("header", "sidebar", "footer")

# The parts of the page, in the order they are laid out.
PARTS = ("header", "attention", "ambient", "transcript", "projection", "artifacts", "interactions")
# What each kind of the event stream (extensions_host.surfaces.live.KINDS) invalidates; the
# projection is re-read on every change, since a `project` hook may read anything.
KIND_PARTS: dict[str, tuple[str, ...]] = {
    "conversation": ("header",),
    "entries": ("transcript", "header"),
    "submissions": ("transcript", "header"),
    "runs": ("transcript", "header"),
    "attention": ("attention",),
    "ambient": ("ambient",),
    "interactions": ("interactions",),
    "artifacts": ("artifacts",),
    "projection": ("projection",),
}


def inspector_principal(user: Any) -> Principal:
    """The principal of a logged-in page visitor (session login, full rights of the user)."""
    return user_principal(user, "session")


def inspector_conversation(*, principal: Principal, conversation_id: str) -> Conversation:
    """The conversation with `head`, `busy` and `access`; HostError not_found when unreadable."""
    return conversation_view(principal=principal, conversation_id=conversation_id)


def part_context(part: str, *, principal: Principal, conversation: Conversation) -> dict[str, Any]:
    """The template context of one part."""
    return _READERS[part](principal, conversation)


def _header(principal: Principal, conversation: Conversation) -> dict[str, Any]:
    return {
        "conversation": conversation,
        "can_write": conversation.access == "owner" and principal.can_write,
    }


def transcript_read(*, conversation_id: str, limit: int = TRANSCRIPT_SHOWN) -> dict[str, Any]:
    """The newest `limit` entries (oldest first), the waiting inputs and the live run."""
    newest = list(
        Entry.objects.filter(conversation_id=conversation_id).order_by("-pk")[: limit + 1]
    )
    truncated = len(newest) > limit
    entries = [
        {
            "id": entry.pk,
            "role": entry.role,
            "text": content_text(entry.content),
            "other": content_other(entry.content),
            "withdrawn": entry.withdrawn,
            "created_at": entry.created_at,
            "run_id": entry.run_id,
        }
        for entry in reversed(newest[:limit])
    ]
    queued = list(
        Submission.objects.filter(
            conversation_id=conversation_id, status=SubmissionStatus.QUEUED
        ).order_by("pk")[:QUEUE_SHOWN]
    )
    live_run = (
        Run.objects.filter(conversation_id=conversation_id, status=RunStatus.CLAIMED)
        .values_list("pk", flat=True)
        .first()
    )
    return {
        "entries": entries,
        "truncated": truncated,
        "queued": [
            {"id": s.pk, "text": content_text(s.parts), "delivery": s.delivery} for s in queued
        ],
        "live_run": live_run,
    }


def _transcript(principal: Principal, conversation: Conversation) -> dict[str, Any]:
    return transcript_read(conversation_id=conversation.pk)


def _attention(principal: Principal, conversation: Conversation) -> dict[str, Any]:
    return {"attention": attention_visible(conversation_id=conversation.pk)}


def ambient_read(*, conversation_id: str) -> list[dict[str, Any]]:
    """Visible ambient surfaces grouped by place (header, sidebar, footer)."""
    surfaces = ambient_visible(conversation_id=conversation_id)
    for surface in surfaces:
        surface["body_text"] = _surface_text(surface.get("body"))
        surface["details_json"] = (
            json_pretty(surface["details"]) if surface.get("details") is not None else ""
        )
    by_place = [
        {"place": place, "surfaces": [s for s in surfaces if s["place"] == place]}
        for place in AMBIENT_PLACES
    ]
    return [group for group in by_place if group["surfaces"]]


def _surface_text(body: Any) -> list[str]:
    """An ambient body as display rows: a string, a list of strings, or JSON."""
    if body is None:
        return []
    if isinstance(body, str):
        return body.splitlines() or [body]
    if isinstance(body, list) and all(isinstance(row, str) for row in body):
        return list(body)
    return [json_pretty(body)]


def _ambient(principal: Principal, conversation: Conversation) -> dict[str, Any]:
    return {"ambient": ambient_read(conversation_id=conversation.pk)}


def projection_slots(*, principal: Principal, conversation_id: str) -> list[dict[str, Any]]:
    """One slot per extension with `projection` or `commands`: running with its value (and
    command names), or stopped with its reason."""
    built = projection_build(principal=principal, conversation_id=conversation_id)
    slots = []
    for extension_id, slot in built["slots"].items():
        slots.append(
            {
                "extension": extension_id,
                "status": slot["status"],
                "revision": (slot.get("revision") or "")[:12],
                "reason": slot.get("reason", ""),
                "value_json": json_pretty(slot["value"]) if slot.get("value") is not None else "",
                "commands": [entry.get("name", "") for entry in slot.get("catalog") or []],
            }
        )
    return slots


def _projection(principal: Principal, conversation: Conversation) -> dict[str, Any]:
    return {"slots": projection_slots(principal=principal, conversation_id=conversation.pk)}


def artifacts_read(*, conversation_id: str) -> list[dict[str, Any]]:
    """The world's active artifacts grouped by channel (channels in order of first
    appearance), each prepared for its content type."""
    channels: dict[str, list[dict[str, Any]]] = {}
    for item in projection_read(world_id=conversation_id):
        payload = item["payload"]
        shown: dict[str, Any] = {
            "record_id": item["record_id"],
            "output": item["output"],
            "key": item["key"],
            "content_type": item["content_type"],
            "scripts": bool(item["preset_scripts_enabled"]),
            "sequence": item["sequence"],
        }
        if item["content_type"] == ContentType.TEXT_MARKDOWN:
            shown["kind"], shown["html"] = "markdown", markdown_html(str(payload))
        elif item["content_type"] == ContentType.APPLICATION_JSON:
            shown["kind"], shown["text"] = "json", json_pretty(payload)
        elif item["content_type"] == ContentType.TEXT_HTML:
            shown["kind"], shown["text"] = "html", str(payload)
        else:
            shown["kind"], shown["text"] = "text", str(payload)
        channels.setdefault(item["channel"], []).append(shown)
    return [{"channel": name, "items": items} for name, items in channels.items()]


def _artifacts(principal: Principal, conversation: Conversation) -> dict[str, Any]:
    return {
        "channels": artifacts_read(conversation_id=conversation.pk),
        "conversation": conversation,
    }


def interactions_read(*, conversation_id: str, limit: int = INTERACTIONS_SHOWN) -> list[Any]:
    """Pending interactions first, then the newest settled ones."""
    rows = list(Interaction.objects.filter(conversation_id=conversation_id).order_by("-pk")[:limit])
    rows.sort(key=lambda row: (row.status != InteractionStatus.PENDING, -row.pk))
    return [
        {
            "call_id": row.call_id,
            "kind": row.kind,
            "prompt": row.prompt,
            "status": row.status,
            "extension": row.extension_id,
            "options_json": json_pretty(row.options) if row.options is not None else "",
            "answer_json": json_pretty(row.answer) if row.answer is not None else "",
            "created_at": clock.from_ms(row.created_at_ms),
        }
        for row in rows
    ]


def _interactions(principal: Principal, conversation: Conversation) -> dict[str, Any]:
    return {"interactions": interactions_read(conversation_id=conversation.pk)}


_READERS: dict[str, Callable[[Principal, Conversation], dict[str, Any]]] = {
    "header": _header,
    "attention": _attention,
    "ambient": _ambient,
    "transcript": _transcript,
    "projection": _projection,
    "artifacts": _artifacts,
    "interactions": _interactions,
}
