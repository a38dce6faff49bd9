"""Settled-run delivery (grant `settled`, spec 03).

- The **core cursor** is the highest committed settled sequence (the settled counter: it is
  gap-free in commit order, so every sequence up to it is visible).
- Each consumer has a cursor row. A delivery is a page (one transaction, group commit) of up to
  `frames` frames: the cursor row is locked (`FOR UPDATE SKIP LOCKED`: one deliverer per
  consumer at a time, others go on), the runs with `sequence > cursor` are read once, in order,
  and handed to `on_settled(ctx, runs)` a batch per frame (each run with the read API over its
  conversation, `run.entry/entries/document`); the cursor advances to the last run of the last
  frame that succeeded **in the same transaction**. A failure stops that consumer with its
  cursor after the last batch it took; after resume it receives exactly what it missed. The
  page is optimistic (no savepoint per frame; a failure runs it again isolated). Each batch
  has the hook's whole deadline; a batch the page has no time left for (its budget,
  `page_budget`) is delivered by the next page, from the advanced cursor.
- Consumers are independent: each has its own task and its own row; a stopped or slow one
  never delays another.
- Triggers: after each settle commits (`settled_notify`) and on every beat tick
  (`settled_sweep`), through coalesced kicks (one queued task per consumer, not per settle).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Max, Q

from conversations.models import Run, SettledCounter
from conversations.selectors import SETTLED_BATCH_MAX, RunSettledEvent, run_settled_events
from core import clock
from extensions_host import registry
from extensions_host.background.models import SettledCursor
from extensions_host.background.services.common import (
    CHANNEL_SETTLED,
    eligible_ids,
    enqueue_call,
    kick,
    kick_clear,
    kick_ensure,
    logger,
    page_with_retries,
)
from extensions_host.background.services.reader import ConversationReader
from extensions_host.runtime import FramePage, HookContext, missing_handler_reason, run_frame
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


GRANT = "settled"

# frames per delivery page in the task body (each frame hands one batch to the hook)
PAGE_FRAMES = 64


@dataclass
class _Delivered:
    runs: int = 0
    more: bool = False
    missing: bool = False


def settled_deliver(*, extension_id: str, batch: int | None = None, frames: int = 1) -> bool:
    """Deliver up to `frames` batches to one consumer in one page. Returns True when more runs
    are waiting for it (the caller goes on)."""
    size = settings.HOST_SETTLED_BATCH if batch is None else batch
    frames = max(1, min(frames, SETTLED_BATCH_MAX // size or 1))
    loaded = registry.get(extension_id)
    hook = loaded.definition.hooks.single.get("on_settled") if loaded is not None else None

    def body(page: FramePage) -> _Delivered:
        page.lock([extension_id])  # the roster row first, as every frame takes it
        row = page.rows.get(extension_id)
        if row is not None and GRANT not in row.admitted_grants:
            # grants gate everything (spec 02 §2): no delivery, the cursor waits where it is
            # (admitted again, the consumer catches up on what it missed, like after a resume)
            return _Delivered()
        cursor = _cursor_claim(extension_id)
        if cursor is None:  # another worker is delivering to this consumer right now, or none
            return _Delivered(missing=not SettledCursor.objects.filter(pk=extension_id).exists())
        position, not_before, attempt = cursor
        if not_before is not None and not_before > clock.now_ms():
            return _Delivered()  # a Retry asked for a pause
        events = run_settled_events(after=position, limit=size * frames)
        done = _Delivered()
        retry_after: float | None = None
        for start in range(0, len(events), size):
            chunk = events[start : start + size]
            outcome = run_frame(
                extension_id=extension_id,
                hook="on_settled",
                call=partial(_deliver, hook, runs=chunk),
                boundary="worker",
                page=page,
                retry_attempt=attempt,
                # one consumer per page: the page's first batch counts for all of it (a crash
                # anywhere in the page is redelivered from that same position)
                item=f"cursor@{position}",
                counted=start == 0,
            )
            if outcome.status != "ok":
                retry_after = (outcome.retry_after or 1) if outcome.status == "retry" else None
                # no time left in this page for the batch's whole deadline: the next page
                # delivers it
                done.more = outcome.skip == "page"
                break
            position, attempt = chunk[-1].sequence, 0
            done.runs += len(chunk)
        else:
            done.more = len(events) == size * frames
        if retry_after is not None:
            not_before, attempt = clock.now_ms() + math.ceil(retry_after * 1000), attempt + 1
        elif done.runs:
            not_before = None
        else:
            return done
        with connection.cursor() as db:
            db.execute(
                f"UPDATE {_cursors()} SET position = %s, retry_attempt = %s, not_before = %s, "  # noqa: S608
                "updated_at = %s WHERE extension_id = %s",
                [
                    position,
                    attempt,
                    not_before,
                    connection.ops.adapt_datetimefield_value(clock.now()),
                    extension_id,
                ],
            )
        return done

    done = page_with_retries(body, optimistic=True)
    if done.missing and eligible_ids("settled", ids=[extension_id]):
        settled_cursor_initialise(extension_id=extension_id)
    return done.more


def _cursors() -> str:
    return connection.ops.quote_name(SettledCursor._meta.db_table)


def _cursor_claim(extension_id: str) -> tuple[int, int | None, int] | None:
    """(position, not_before, retry_attempt) of the consumer's cursor, locked `FOR UPDATE SKIP
    LOCKED` (one deliverer per consumer; None: missing, or another worker holds it). A plain
    statement: every delivery page starts with it."""
    lock = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
    with connection.cursor() as db:
        db.execute(
            f"SELECT position, not_before, retry_attempt FROM {_cursors()} "  # noqa: S608
            f"WHERE extension_id = %s{lock}",
            [extension_id],
        )
        return db.fetchone()


def _deliver(hook: Any, ctx: HookContext, runs: list[RunSettledEvent]) -> Any:
    if hook is None:
        raise ExtensionStop(missing_handler_reason("settled"))
    # each run reads its conversation as lifecycle events do (the seed's runSettled handler
    # gets entry/entries/document): binding a reader runs no statement, only a read does
    return hook(
        ctx, [replace(run, reader=ConversationReader(ctx, run.conversation_id)) for run in runs]
    )


def settled_deliver_all(*, extension_id: str, budget_s: float | None = None) -> bool:
    """The per-consumer task body: clear the kick, deliver batches for up to `budget_s`.
    Returns True when more are waiting (the task re-enqueues itself)."""
    kick_clear(CHANNEL_SETTLED, extension_id)
    budget = settings.HOST_SWEEP_BUDGET_SECONDS if budget_s is None else budget_s
    ends = time.monotonic() + budget
    while settled_deliver(extension_id=extension_id, frames=PAGE_FRAMES):
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
    """After a settle commits: kick every running consumer with the `settled` grant admitted
    (one task each, coalesced). One statement per settle: consumers have kick rows from their
    cursor's creation on; one whose grant was withdrawn is not kicked (its cursor waits, and it
    catches up when the grant is admitted again: beat's sweep kicks it)."""
    return _enqueue(kick(CHANNEL_SETTLED, running_with=GRANT))


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
        enqueue_call(tasks.deliver_settled.delay, extension_id)
    return extension_ids
