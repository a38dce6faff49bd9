"""Settled-run delivery (grant `settled`, spec 03).

- The **core cursor** is the highest committed settled sequence (the settled counter: it is
  gap-free in commit order, so every sequence up to it is visible).
- Each consumer has a cursor row. A delivery is one frame: the cursor row is locked
  (`FOR UPDATE SKIP LOCKED`: one deliverer per consumer at a time, others go on), the runs with
  `sequence > cursor` (up to a batch, in order) are handed to `on_settled(ctx, runs)`, and the
  cursor advances to the last of them **in the same transaction**. A failure stops that
  consumer with its cursor unmoved; after resume it receives exactly what it missed.
- Consumers are independent: each has its own task and its own row; a stopped or slow one
  never delays another.
- Triggers: after each settle commits (`settled_notify`) and on every beat tick
  (`settled_sweep`), through coalesced kicks (one queued task per consumer, not per settle).
"""

from __future__ import annotations

import math
import time
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max, Q

from conversations.models import Run, SettledCounter
from conversations.selectors import RunSettledEvent, run_settled_events
from core import clock
from extensions_host import registry
from extensions_host.background.models import SettledCursor
from extensions_host.background.services.common import (
    CHANNEL_SETTLED,
    eligible_ids,
    enqueue,
    kick,
    kick_clear,
    kick_ensure,
    logger,
)
from extensions_host.runtime import HookContext, missing_handler_reason, run_frame
from extensions_host.runtime.transient import with_transient_retries
from extensions_host.sdk import ExtensionStop


def core_cursor() -> int:
    """The highest committed settled sequence."""
    value = SettledCounter.objects.filter(pk=1).values_list("value", flat=True).first()
    if value is None:  # counter not seeded yet (a fresh or flushed database)
        value = Run.objects.aggregate(top=Max("settled_sequence"))["top"]
    return int(value or 0)


def settled_cursor_initialise(*, extension_id: str) -> None:
    """A `settled` consumer with no cursor yet starts at the current core cursor, so a new
    consumer does not replay all history (spec 02 §2 step 2). Idempotent; an existing cursor
    is never moved (a resumed consumer replays exactly what it missed)."""
    SettledCursor.objects.bulk_create(
        [SettledCursor(extension_id=extension_id, position=core_cursor())], ignore_conflicts=True
    )
    kick_ensure(CHANNEL_SETTLED, [extension_id])


def settled_lag(*, extension_id: str) -> dict[str, Any]:
    """`{cursor, core_cursor, lag}` of one consumer (lag = core cursor − consumer cursor)."""
    core = core_cursor()
    position = (
        SettledCursor.objects.filter(pk=extension_id).values_list("position", flat=True).first()
    )
    return {
        "cursor": position,
        "core_cursor": core,
        "lag": None if position is None else max(core - position, 0),
    }


def settled_deliver(*, extension_id: str, batch: int | None = None) -> bool:
    """Deliver one batch to one consumer in one frame. Returns True when more runs are waiting
    for it (the caller goes on)."""
    size = settings.HOST_SETTLED_BATCH if batch is None else batch
    attempt = (
        SettledCursor.objects.filter(pk=extension_id)
        .values_list("retry_attempt", flat=True)
        .first()
    )
    if attempt is None:
        if eligible_ids("settled", ids=[extension_id]):
            settled_cursor_initialise(extension_id=extension_id)
        return False
    loaded = registry.get(extension_id)
    hook = loaded.definition.hooks.single.get("on_settled") if loaded is not None else None
    events: list[RunSettledEvent] = []

    def prepare() -> bool:
        row = SettledCursor.objects.select_for_update(skip_locked=True).filter(pk=extension_id)
        cursor = row.values_list("position", "not_before").first()
        if cursor is None:
            return False  # another worker is delivering to this consumer right now
        position, not_before = cursor
        if not_before is not None and not_before > clock.now_ms():
            return False  # a Retry asked for a pause
        events[:] = run_settled_events(after=position, limit=size)
        return bool(events)

    def call(ctx: HookContext) -> Any:
        if hook is None:
            raise ExtensionStop(missing_handler_reason("settled"))
        return hook(ctx, list(events))

    def finish(_: Any) -> None:
        SettledCursor.objects.filter(pk=extension_id).update(
            position=events[-1].sequence, retry_attempt=0, not_before=None
        )

    outcome = run_frame(
        extension_id=extension_id,
        hook="on_settled",
        call=call,
        boundary="worker",
        prepare=prepare,
        finish=finish,
        retry_attempt=attempt,
        item="cursor",  # one position at a time per consumer: the one its cursor is at
    )
    if outcome.status == "retry":
        _retry_later(extension_id, outcome.retry_after)
        return False
    if outcome.status != "ok":
        return False
    return len(events) == size or events[-1].sequence < core_cursor()


def _retry_later(extension_id: str, after_seconds: float | None) -> None:
    not_before = clock.now_ms() + math.ceil((after_seconds or 1) * 1000)

    def step() -> None:
        with transaction.atomic(durable=True):
            SettledCursor.objects.filter(pk=extension_id).update(
                retry_attempt=F("retry_attempt") + 1, not_before=not_before
            )

    with_transient_retries(step)


def settled_deliver_all(*, extension_id: str, budget_s: float | None = None) -> bool:
    """The per-consumer task body: clear the kick, deliver batches for up to `budget_s`.
    Returns True when more are waiting (the task re-enqueues itself)."""
    kick_clear(CHANNEL_SETTLED, extension_id)
    budget = settings.HOST_SWEEP_BUDGET_SECONDS if budget_s is None else budget_s
    ends = time.monotonic() + budget
    while settled_deliver(extension_id=extension_id):
        if time.monotonic() >= ends:
            return True
    return False


def settled_consumers_behind() -> list[str]:
    """Running consumers whose cursor is below the core cursor (and not pausing after a
    Retry); consumers without a cursor yet get one at the core cursor."""
    consumers = eligible_ids("settled")
    if not consumers:
        return []
    known = set(SettledCursor.objects.filter(pk__in=consumers).values_list("pk", flat=True))
    for extension_id in consumers:
        if extension_id not in known:
            settled_cursor_initialise(extension_id=extension_id)
    now = clock.now_ms()
    return list(
        SettledCursor.objects.filter(pk__in=consumers, position__lt=core_cursor())
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
        .values_list("pk", flat=True)
    )


def settled_sweep() -> list[str]:
    """Beat's safety net: kick every consumer that is behind. Returns the ones enqueued."""
    return _enqueue(kick(CHANNEL_SETTLED, settled_consumers_behind()))


def settled_notify() -> list[str]:
    """After a settle commits: kick every running consumer (one task each, coalesced). One
    statement per settle: consumers have kick rows from their cursor's creation on; a consumer
    whose grant was withdrawn is kicked at most once more, and its task finds nothing to do."""
    return _enqueue(kick(CHANNEL_SETTLED, running_only=True))


def settled_after_commit() -> None:
    """The after-commit call of a settlement (`run_settled_after_commit`): never raises into
    the committed settle; beat's sweep is the safety net."""
    try:
        settled_notify()
    except Exception:
        logger.exception("settled delivery kick failed")


def settled_notify_extension(extension_id: str) -> list[str]:
    """After a resume: kick this consumer so it replays what it missed."""
    if not eligible_ids("settled", ids=[extension_id]):
        return []
    kick_ensure(CHANNEL_SETTLED, [extension_id])
    return _enqueue(kick(CHANNEL_SETTLED, [extension_id]))


def _enqueue(extension_ids: list[str]) -> list[str]:
    from extensions_host.background import tasks

    for extension_id in extension_ids:
        enqueue(lambda e=extension_id: tasks.deliver_settled.delay(e))
    return extension_ids


def settled_consumers() -> list[dict[str, Any]]:
    """Every consumer with its cursor and lag (for `GET /v1/meta` lag figures and metrics)."""
    core = core_cursor()
    return [
        {"extension_id": extension_id, "cursor": position, "lag": max(core - position, 0)}
        for extension_id, position in SettledCursor.objects.order_by("pk").values_list(
            "pk", "position"
        )
    ]
