"""What the conversation capabilities share: version bumps outside frames, the roster join that
decides visibility, conversation checks and JSON bounds."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import F

from conversations.models import Conversation, conversation_id_valid
from core.validation import json_problem, text_problem
from core.validation import json_size as stored_json_size
from extensions_host.models import ExtensionStatus, RosterEntry


def conversation_exists(conversation_id: str) -> bool:
    return conversation_id_valid(conversation_id) and (
        Conversation.objects.filter(pk=conversation_id).exists()
    )


def conversations_touch(*, conversation_ids: Iterable[str]) -> int:
    """Bump the versions of these conversations (outside a frame: inside one, the frame's
    `observed` set does it) and wake their live streams after commit."""
    ids = sorted(set(conversation_ids))
    if not ids:
        return 0
    updated = Conversation.objects.filter(pk__in=ids).update(version=F("version") + 1)
    if updated:
        from extensions_host.surfaces.live import changes_publish

        transaction.on_commit(lambda: changes_publish(ids), robust=True)
    return updated


def visible_extension_ids() -> list[str]:
    """Extensions whose attention and ambient surfaces are visible: running and granted
    `attention`. Read at query time (the roster is small), so a committed stop, resume or grant
    change is honoured by the very next read."""
    rows = RosterEntry.objects.filter(status=ExtensionStatus.RUNNING).values_list(
        "id", "admitted_grants"
    )
    return [extension_id for extension_id, grants in rows if "attention" in (grants or [])]


def json_size(value: Any) -> int | None:
    """The UTF-8 size of the JSON encoding, or None when the value cannot be stored
    (`core.validation.json_problem`: NUL characters, lone surrogates, non-finite numbers,
    nesting deeper than 32)."""
    return None if json_problem(value) is not None else stored_json_size(value)


def text_storable(value: str) -> bool:
    return isinstance(value, str) and text_problem(value) is None
