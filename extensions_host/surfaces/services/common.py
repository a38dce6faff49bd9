"""What the conversation capabilities share: version bumps outside frames, the roster join that
decides visibility, conversation checks and JSON bounds."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import F

from conversations.models import Conversation
from extensions_host.models import ExtensionStatus, RosterEntry

CONVERSATION_ID = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
MAX_JSON_DEPTH = 32


def conversation_id_valid(value: object) -> bool:
    return isinstance(value, str) and CONVERSATION_ID.match(value) is not None


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
    """The UTF-8 size of the JSON encoding, or None when the value cannot be stored (NUL
    characters, lone surrogates, non-finite numbers, nesting deeper than 32)."""
    if not _storable(value, 0):
        return None
    try:
        encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return len(encoded.encode("utf-8"))
    except (TypeError, ValueError, UnicodeEncodeError):
        return None


def text_storable(value: str) -> bool:
    return _storable(value, 0)


def _storable(value: Any, depth: int) -> bool:
    if depth > MAX_JSON_DEPTH:
        return False
    if isinstance(value, str):
        if "\x00" in value:
            return False
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and _storable(k, depth) and _storable(v, depth + 1)
            for k, v in value.items()
        )
    if isinstance(value, list | tuple):
        return all(_storable(v, depth + 1) for v in value)
    return value is None or isinstance(value, bool | int)
