"""Idle detection (spec 01, 03): `conversation_idle {conversation_id, idle_ms}` once per idle
period, re-armed by new activity; recorded in the outbox like every lifecycle event."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef

from conversations.models import Conversation
from core import clock
from core.services import lifecycle_record
from extensions_host.background.models import IdleMark, Mark

IDLE_PAGE = 100
IDLE_WATERMARK = "idle_watermark"


def conversations_detect_idle(*, limit: int = IDLE_PAGE) -> tuple[int, bool]:
    """Emit `conversation_idle {conversation_id, idle_ms}` once per idle period: for
    conversations (not archived) with no activity for `IDLE_AFTER_SECONDS`, unless one was
    already emitted for this activity instant. New activity moves `last_activity_at` and so
    re-arms it. Returns (emitted, more may be waiting).

    The scan starts at a watermark (activity instants below it were all handled by an earlier
    sweep): activity is stamped with the host clock inside short transactions, so no activity
    older than the idle cutoff can still be uncommitted.
    """
    now = clock.now()
    cutoff = now - dt.timedelta(seconds=settings.IDLE_AFTER_SECONDS)
    watermark_ms = Mark.objects.filter(name=IDLE_WATERMARK).values_list("value", flat=True).first()
    marks = IdleMark.objects.filter(
        conversation_id=OuterRef("pk"), activity_at__gte=OuterRef("last_activity_at")
    )
    candidates = Conversation.objects.filter(last_activity_at__lte=cutoff, archived=False).filter(
        ~Exists(marks)
    )
    if watermark_ms is not None:
        candidates = candidates.filter(last_activity_at__gte=clock.from_ms(watermark_ms))
    page = list(
        candidates.order_by("last_activity_at", "pk").values_list("pk", "last_activity_at")[:limit]
    )
    emitted = 0
    for conversation_id, activity_at in page:
        if _idle_emit(conversation_id, activity_at, cutoff, now):
            emitted += 1
    more = len(page) == limit
    # ties at the last instant are re-read next time and excluded by their marks
    next_watermark = page[-1][1] if more else cutoff
    _watermark_advance(read_ms=watermark_ms, to_ms=clock.to_ms(next_watermark))
    return emitted, more


def idle_watermark_lower(*, activity_at: dt.datetime) -> None:
    """An unarchived conversation: lower the idle scan's watermark to its last activity, so
    the next sweep sees it (the scan passed it over while it was archived). Its idle mark
    still keeps it to one `conversation_idle` per idle period. Called in the unarchiving
    transaction (after the conversation row lock: the lock order conversation → mark)."""
    to_ms = clock.to_ms(activity_at)
    if not Mark.objects.filter(name=IDLE_WATERMARK, value__gt=to_ms).update(value=to_ms):
        # no watermark yet (the scan is unbounded) or already low enough; a sweep that read
        # "no watermark" must not then set one above this conversation
        Mark.objects.get_or_create(name=IDLE_WATERMARK, defaults={"value": to_ms})


def _watermark_advance(*, read_ms: int | None, to_ms: int) -> None:
    """Compare-and-set from the value this sweep read: an unarchive that lowered the watermark
    meanwhile wins, and the next sweep starts from there."""
    if read_ms is not None:
        Mark.objects.filter(name=IDLE_WATERMARK, value=read_ms).update(value=to_ms)
    elif not Mark.objects.filter(name=IDLE_WATERMARK, value__isnull=True).update(value=to_ms):
        Mark.objects.get_or_create(name=IDLE_WATERMARK, defaults={"value": to_ms})


def _idle_emit(
    conversation_id: str, activity_at: dt.datetime, cutoff: dt.datetime, now: dt.datetime
) -> bool:
    with transaction.atomic(durable=True):
        # the conversation row lock orders this event after any event of the same conversation
        # recorded by a concurrent transaction (per-conversation order of the outbox); waited
        # for, not skipped: the watermark moves past this conversation after this sweep
        locked = (
            Conversation.objects.select_for_update(no_key=True)
            .filter(pk=conversation_id, last_activity_at=activity_at, archived=False)
            .values_list("last_activity_at", flat=True)
            .first()
        )
        if locked is None or locked > cutoff:
            return False  # active again (re-armed) or archived meanwhile
        already = IdleMark.objects.filter(
            conversation_id=conversation_id, activity_at__gte=activity_at
        ).exists()
        if already:
            return False
        IdleMark.objects.update_or_create(
            conversation_id=conversation_id, defaults={"activity_at": activity_at}
        )
        lifecycle_record(
            kind="conversation_idle",
            conversation_id=conversation_id,
            payload={
                "conversation_id": conversation_id,
                "idle_ms": max(clock.to_ms(now) - clock.to_ms(activity_at), 0),
            },
        )
    return True
