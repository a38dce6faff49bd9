"""Ambient surfaces (spec 04): small always-visible panels per conversation, keyed.

The extension declares the keys it may write (`ambient_kinds`); the first extension to write a
key in a conversation owns it there. A set replaces the whole surface; a clear empties it and
keeps the ownership.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from core import clock
from extensions_host.runtime.current import Frame
from extensions_host.sdk import StateError
from extensions_host.surfaces.models import AmbientSurface
from extensions_host.surfaces.services.common import conversation_exists, json_size
from extensions_host.surfaces.types import AmbientRecord

MSG_RECORD_INVALID = "Ambient surface is invalid"
MSG_KEY_UNDECLARED = "Ambient key is not declared"
MSG_OWNED_ELSEWHERE = "Ambient key is owned by another extension"
MSG_CONVERSATION_MISSING = "Ambient conversation does not exist"
CONTENT_MAX_BYTES = 32 * 1024  # body and details together


def ambient_set(*, frame: Frame, keys: tuple[str, ...], conversation_id: str, record: Any) -> None:
    """Replace the surface `record.key` of the conversation (claiming it when unowned)."""
    spec = _record(record)
    _writable(frame, keys, conversation_id, spec.key)
    values = {
        "place": spec.place,
        "max_rows": spec.max_rows,
        "overflow": spec.overflow,
        "refresh_ms": spec.refresh_ms,
        "body": spec.body,
        "details": spec.details,
        "cleared": False,
        "updated_at_ms": clock.now_ms(),
    }
    updated = AmbientSurface.objects.filter(
        conversation_id=conversation_id, key=spec.key, extension_id=frame.extension_id
    ).update(**values)
    if not updated:
        # unowned (checked under the lock in `_writable`); a concurrent first writer makes this
        # insert fail and the frame is retried, where it sees the owner
        AmbientSurface.objects.create(
            conversation_id=conversation_id, key=spec.key, extension_id=frame.extension_id, **values
        )
    frame.observed.add(conversation_id)


def ambient_clear(*, frame: Frame, keys: tuple[str, ...], conversation_id: str, key: Any) -> None:
    """Empty the surface; the extension keeps owning the key."""
    if not isinstance(key, str) or not 1 <= len(key) <= 64:
        raise StateError("bound", MSG_RECORD_INVALID)
    _writable(frame, keys, conversation_id, key)
    updated = AmbientSurface.objects.filter(
        conversation_id=conversation_id, key=key, extension_id=frame.extension_id
    ).update(body=None, details=None, cleared=True, updated_at_ms=clock.now_ms())
    if updated:
        frame.observed.add(conversation_id)


def _writable(frame: Frame, keys: tuple[str, ...], conversation_id: str, key: str) -> None:
    if key not in keys:
        raise StateError("bound", MSG_KEY_UNDECLARED)
    if not conversation_exists(conversation_id):
        raise StateError("bound", MSG_CONVERSATION_MISSING)
    owner = (
        AmbientSurface.objects.select_for_update(of=("self",))
        .filter(conversation_id=conversation_id, key=key)
        .values_list("extension_id", flat=True)
        .first()
    )
    if owner is not None and owner != frame.extension_id:
        raise StateError("conflict", MSG_OWNED_ELSEWHERE)


def _record(record: Any) -> AmbientRecord:
    try:
        spec = record if isinstance(record, AmbientRecord) else AmbientRecord.model_validate(record)
    except (ValidationError, TypeError, ValueError) as exc:
        raise StateError("bound", MSG_RECORD_INVALID) from exc
    # the bound is on the content as documented: the JSON of `body` plus that of `details`
    # (an absent one counts nothing), not the key or a wrapping object
    sizes = [json_size(value) for value in (spec.body, spec.details) if value is not None]
    if None in sizes or sum(size or 0 for size in sizes) > CONTENT_MAX_BYTES:
        raise StateError("bound", MSG_RECORD_INVALID)
    return spec
