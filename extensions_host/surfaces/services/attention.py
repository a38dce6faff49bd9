"""Attention items (spec 04, Attention): set/clear inside the frame, the per-extension bound,
refreshing watchers when an extension's visibility changes, and pruning expired items."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from pydantic import ValidationError

from core import clock
from extensions_host.models import RosterEntry
from extensions_host.runtime.current import Frame
from extensions_host.sdk import StateError
from extensions_host.services.documents import check_conversation_id
from extensions_host.services.quotas import quota_limit
from extensions_host.surfaces.models import LEVEL_RANK, AmbientSurface, AttentionItem
from extensions_host.surfaces.services.common import (
    conversation_exists,
    conversations_touch,
    json_size,
    text_storable,
)
from extensions_host.surfaces.types import AttentionItem as AttentionItemSpec

logger = logging.getLogger(__name__)

MSG_ITEM_INVALID = "Attention item is invalid"
MSG_ID_INVALID = "An attention id must be 1..256 characters"
MSG_CONVERSATION_MISSING = "Attention conversation does not exist"
COMMAND_INPUT_MAX_BYTES = 16 * 1024
REFRESH_PAGE = 256
PRUNE_PAGE = 500


def attention_limit(frame: Frame) -> int:
    return quota_limit(overrides=frame.quotas, name="max_attention")


def attention_set(*, frame: Frame, conversation_id: str, item: Any) -> None:
    """Insert or replace the extension's item `item.id` on the conversation.

    Every bound is checked before anything is written: the schema (unknown fields are errors),
    storable text, a well-formed conversation id naming an existing conversation, and at most
    `max_attention` (1,024) outstanding items per extension across all conversations (a
    replacement does not count twice; reviving an expired item counts like a new one).

    The count is the committed items plus the frame's own: frames of one extension running at
    the same time may together go past the bound by what each of them sets — the bounded
    overshoot of every quota (spec 02 §7; `services/quotas.py`), never a lock serialising the
    extension's frames.
    """
    spec = _item(item)
    check_conversation_id(conversation_id)
    if not conversation_exists(conversation_id):
        raise StateError("bound", MSG_CONVERSATION_MISSING)
    extension_id = frame.extension_id
    now = clock.now_ms()
    existing = AttentionItem.objects.filter(
        extension_id=extension_id, conversation_id=conversation_id, item_id=spec.id
    ).first()
    # an expired row only waits for the prune sweep: reviving it adds an outstanding item
    revived = existing is not None and _expired(existing, now)
    if existing is None or revived:
        limit = attention_limit(frame)
        # outstanding = not expired (expired rows only wait for the prune sweep)
        outstanding = (
            AttentionItem.objects.filter(extension_id=extension_id)
            .exclude(expires_at_ms__lte=now)
            .count()
        )
        if outstanding >= limit:
            raise StateError("bound", f"Extension quota max_attention ({limit}) is exceeded")
    values = {
        "level": spec.level,
        "level_rank": LEVEL_RANK[spec.level],
        "title": spec.title,
        "body": spec.body or "",
        "command": spec.command.model_dump(mode="json") if spec.command else None,
        "expires_at_ms": spec.expires_at_ms,
        "set_at_ms": now,
    }
    if existing is None:
        AttentionItem.objects.create(
            extension_id=extension_id,
            conversation_id=conversation_id,
            item_id=spec.id,
            **values,
        )
    else:
        AttentionItem.objects.filter(pk=existing.pk).update(**values)
    frame.observed.add(conversation_id)


def _expired(row: AttentionItem, now: int) -> bool:
    """Whether the item is past its expiry: no longer outstanding (the visible-attention query
    and the bound both exclude `expires_at_ms <= now`)."""
    return row.expires_at_ms is not None and row.expires_at_ms <= now


def attention_clear(*, frame: Frame, conversation_id: str, item_id: Any) -> bool:
    """Remove the extension's item; True when it existed. A malformed conversation id is a
    bound error, as in `attention_set` (a well-formed one that names no conversation has no
    item: False)."""
    check_conversation_id(conversation_id)
    if not isinstance(item_id, str) or not 1 <= len(item_id) <= 256 or not text_storable(item_id):
        raise StateError("bound", MSG_ID_INVALID)
    deleted, _ = AttentionItem.objects.filter(
        extension_id=frame.extension_id, conversation_id=conversation_id, item_id=item_id
    ).delete()
    if deleted:
        frame.observed.add(conversation_id)
    return bool(deleted)


def _item(item: Any) -> AttentionItemSpec:
    try:
        spec = (
            item
            if isinstance(item, AttentionItemSpec)
            else AttentionItemSpec.model_validate(item, strict=False)
        )
    except (ValidationError, TypeError, ValueError) as exc:
        raise StateError("bound", MSG_ITEM_INVALID) from exc
    texts = [spec.id, spec.title, spec.body or ""]
    if spec.command is not None:
        texts.append(spec.command.name)
    if not all(text_storable(text) for text in texts):
        raise StateError("bound", MSG_ITEM_INVALID)
    if spec.command is not None:
        size = json_size(spec.command.input)
        if size is None or size > COMMAND_INPUT_MAX_BYTES:
            raise StateError("bound", MSG_ITEM_INVALID)
    return spec


def attention_owner_refresh(*, extension_id: str) -> int:
    """After an extension's visibility changed (stop, resume, uninstall, grants): bump the
    version of every conversation where it has attention items or ambient surfaces, so watchers
    re-read. Visibility itself needs no rewrite: it is a query-time join on the roster.

    Bounded: at most the per-extension ceiling of items, in pages. Never raises (it runs after a
    stop or resume committed; a failure here only delays watchers to their next poll).
    """
    try:
        overrides = (
            RosterEntry.objects.filter(pk=extension_id).values_list("quotas", flat=True).first()
        )
        ceiling = quota_limit(overrides=overrides or {}, name="max_attention")
        ids = set(
            AttentionItem.objects.filter(extension_id=extension_id)
            .order_by("conversation_id")  # not the model ordering: DISTINCT would select it
            .values_list("conversation_id", flat=True)
            .distinct()[:ceiling]
        )
        ids |= set(
            AmbientSurface.objects.filter(extension_id=extension_id)
            .order_by("conversation_id")
            .values_list("conversation_id", flat=True)
            .distinct()[:ceiling]
        )
        ordered = sorted(ids)
        touched = 0
        for start in range(0, len(ordered), REFRESH_PAGE):
            with transaction.atomic():
                touched += conversations_touch(
                    conversation_ids=ordered[start : start + REFRESH_PAGE]
                )
        return touched
    except Exception:
        logger.exception("attention refresh failed for extension %s", extension_id)
        return 0


def attention_prune_expired(*, limit: int = PRUNE_PAGE) -> tuple[int, bool]:
    """Delete expired items (host clock), bumping the versions of their conversations.
    Returns (deleted, more may remain)."""
    now = clock.now_ms()
    rows = list(
        AttentionItem.objects.filter(expires_at_ms__lte=now)
        .order_by("expires_at_ms", "pk")
        .values_list("pk", "conversation_id")[:limit]
    )
    if not rows:
        return 0, False
    with transaction.atomic(durable=True):
        deleted, _ = AttentionItem.objects.filter(
            pk__in=[pk for pk, _ in rows], expires_at_ms__lte=now
        ).delete()
        conversations_touch(conversation_ids={cid for _, cid in rows})
    return deleted, len(rows) == limit
